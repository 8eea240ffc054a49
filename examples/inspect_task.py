"""An Inspect AI task with its dataset inline: nothing to download, eight samples, greedy decoding.

    inspect eval inspect_task.py --model openai-api/local/tiny --log-dir logs \
        --max-tokens 8 --temperature 0
    execsys run -- inspect eval inspect_task.py --model openai-api/local/tiny --log-dir logs

with ``LOCAL_BASE_URL=http://127.0.0.1:8000/v1`` and ``LOCAL_API_KEY`` set to anything (a local
llama.cpp server checks no key): Inspect's ``openai-api`` provider reads ``<NAME>_BASE_URL`` and
``<NAME>_API_KEY`` for ``openai-api/<name>/<model>``. Under ``execsys run``, install execsys into
Inspect's environment (``pip install 'execsys[inspect]'``) so its hook records the identity in the
eval log and checks every model call against the pin.
"""

from inspect_ai import Task, task
from inspect_ai.dataset import Sample
from inspect_ai.scorer import includes
from inspect_ai.solver import generate

QUESTIONS = [
    ("What is 1+1?", "2"), ("What is 2+3?", "5"), ("What is 4+4?", "8"), ("What is 5+6?", "11"),
    ("What is 9+1?", "10"), ("What is 3+3?", "6"), ("What is 7+2?", "9"), ("What is 8+8?", "16"),
]


@task
def tiny_inspect() -> Task:
    return Task(
        dataset=[Sample(input=f"Q: {q}\nA:", target=a, id=f"q{i + 1}") for i, (q, a) in enumerate(QUESTIONS)],
        solver=[generate()],
        scorer=includes(),
    )
