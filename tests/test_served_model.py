"""The model that answered: a response naming another model than the one requested, during probes,
and the doctor's model-name honesty check.

Real first: llama-cpp-python's server (0.3.x) answers any model name with its resident model and
echoes the name asked for, so its responses never differ from the request -- which is exactly why
the honesty check asks for a name it does not list. Beside it, a stdlib endpoint (``ModelNameEndpoint``)
that resolves the requested alias to a dated model name, as hosted APIs do (``gpt-4o`` answered as
``gpt-4o-2024-08-06``), or answers with whatever is resident (sglang#10065), or refuses an unknown
name with 404 as vLLM does.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

from execsys.doctor.runner import DoctorOptions, run_hazard
from execsys.probes.events import Note, ServedModelDiffers
from execsys.probes.runner import ProbeOptions, run_probe

from execsys.declaration import parse
from execsys.observe.served import ANSWERS_ANY_NAME, UNLISTED_MODEL_NAME
from execsys.sources import Sources
from tests.fixtures.fake_http import JsonHandler, LoopbackServer


class ModelNameEndpoint(LoopbackServer):
    """An OpenAI-compatible loopback endpoint listing ``listed``. A request naming a listed model is
    answered as ``answer_as`` (None: the name requested); an unlisted name gets 404 when ``honest``,
    else it is answered as the resident model (``answer_as`` or the first listed)."""

    def __init__(self, listed: tuple[str, ...] = ("tiny",), *, answer_as: str | None = None,
                 honest: bool = True, echo_unlisted: bool = False) -> None:
        self.listed = list(listed)
        self.answer_as = answer_as
        self.honest = honest
        self.echo_unlisted = echo_unlisted
        self.asked: list[str] = []
        super().__init__(self._handler())
        self.base_url = self.url()

    def _handler(self) -> type[JsonHandler]:
        endpoint = self

        class Handler(JsonHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                if self.path.rstrip("/") == "/v1/models":
                    self.send_json({"object": "list", "data": [{"id": m, "object": "model"} for m in endpoint.listed]})
                else:
                    self.send_json({"detail": "Not Found"}, 404)

            def do_POST(self) -> None:
                request = self.read_json()
                name = str(request.get("model") or "")
                endpoint.asked.append(name)
                if name not in endpoint.listed:
                    if endpoint.honest:
                        self.send_json({"object": "error", "type": "NotFoundError", "code": 404,
                                        "message": f"The model `{name}` does not exist."}, 404)
                        return
                    answered = name if endpoint.echo_unlisted else (endpoint.answer_as or endpoint.listed[0])
                else:
                    answered = endpoint.answer_as or name
                chat = "messages" in request
                text = "42"
                choice = ({"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
                          if chat else {"index": 0, "text": text, "finish_reason": "stop"})
                self.send_json({"id": "cmpl-1", "object": "chat.completion" if chat else "text_completion",
                                "model": answered, "choices": [choice]})

        return Handler


def _cases(path: Path, n: int = 6) -> Path:
    path.write_text("".join(json.dumps({"id": f"c{i}", "prompt": f"what is {i}+{i}?", "max_tokens": 4}) + "\n"
                            for i in range(n)))
    return path


# -- probes: a response whose model differs from the requested one ---------------------------

def test_a_probe_records_and_reports_responses_answered_as_another_model(cli, tmp_path: Path) -> None:
    with ModelNameEndpoint(("tiny",), answer_as="tiny-2026-01") as endpoint:
        result = cli("probe", "session", "--endpoint", endpoint.base_url, "--cases", str(_cases(tmp_path / "c.jsonl")),
                     "--json")
    assert result.returncode == 0, result.stderr
    record = result.json()
    assert record["target"]["models"] == ["tiny"]
    for label, info in zip("AB", record["passes"], strict=True):
        assert info["model"] == "tiny" and info["models"] == ["tiny-2026-01"]
        assert info["model_mismatch"] == {"requested": "tiny", "answered": {"tiny-2026-01": 6}, "cases": 6}
        note = f"pass {label}: 6 of 6 responses named another model than the 'tiny' requested: 'tiny-2026-01' (6)"
        assert note in record["notes"]
    # the same lines in the human output
    with ModelNameEndpoint(("tiny",), answer_as="tiny-2026-01") as endpoint:
        human = cli("probe", "session", "--endpoint", endpoint.base_url, "--cases",
                    str(_cases(tmp_path / "h.jsonl")))
    assert human.returncode == 0, human.stderr
    progress = " ".join(human.stderr.split())  # said as it happens, on the progress stream
    assert "was answered as model 'tiny-2026-01', not the 'tiny' requested" in progress
    assert "6 of 6 responses named another model than the 'tiny' requested" in " ".join(human.stdout.split())


def test_the_event_says_it_once_per_pass_as_it_happens(tmp_path: Path) -> None:
    events: list[object] = []
    with ModelNameEndpoint(("tiny",), answer_as="resident") as endpoint:
        options = ProbeOptions.from_sources(Sources.of(parse(""), lock_file=tmp_path / "none.lock.json"), axis="session", endpoints=[endpoint.base_url],
                                            cases=str(_cases(tmp_path / "c.jsonl")),
                                            ledger=str(tmp_path / "ledger.sqlite"))
        record = run_probe(options, on_event=events.append)
    said = [e for e in events if isinstance(e, ServedModelDiffers)]
    assert [(e.pass_index, e.requested, e.answered) for e in said] == [(0, "tiny", "resident"), (1, "tiny", "resident")]
    assert isinstance(said[0], Note) and "not the 'tiny' requested" in said[0].message
    assert all(p["model_mismatch"]["cases"] == 6 for p in record.passes)


def test_responses_naming_the_requested_model_say_nothing(tmp_path: Path) -> None:
    events: list[object] = []
    with ModelNameEndpoint(("tiny",)) as endpoint:
        options = ProbeOptions.from_sources(Sources.of(parse(""), lock_file=tmp_path / "none.lock.json"), axis="session", endpoints=[endpoint.base_url],
                                            cases=str(_cases(tmp_path / "c.jsonl")),
                                            ledger=str(tmp_path / "ledger.sqlite"))
        record = run_probe(options, on_event=events.append)
    assert not [e for e in events if isinstance(e, ServedModelDiffers)]
    assert all("model_mismatch" not in p and p["models"] == ["tiny"] for p in record.passes)
    assert not any("another model" in note for note in record.notes)


def test_llama_cpp_python_echoes_even_a_misspelt_name_so_only_the_honesty_check_sees_it(cli, tmp_path: Path,
                                                                                      llama_server) -> None:
    """The real server answers ``--model tinyy`` (a typo) with its resident model and claims to be
    ``tinyy``: the per-response comparison has nothing to see; the doctor's check below does."""
    result = cli("probe", "session", "--endpoint", llama_server.base_url, "--model", "tinyy",
                 "--cases", str(_cases(tmp_path / "c.jsonl", n=3)), "--json")
    assert result.returncode == 0, result.stderr
    record = result.json()
    assert all(p["models"] == ["tinyy"] and "model_mismatch" not in p for p in record["passes"])


# -- doctor: model-name honesty -----------------------------------------------------------------

def test_doctor_warns_when_the_real_llama_cpp_python_server_answers_an_unlisted_name(llama_server) -> None:
    result = run_hazard("model-name-honesty", DoctorOptions(endpoint=llama_server.base_url))
    assert result.status == "warn"
    assert result.summary == ANSWERS_ANY_NAME
    text = "\n".join(result.evidence)
    assert f"asked for the unlisted model {UNLISTED_MODEL_NAME!r}: HTTP 200, answered as {UNLISTED_MODEL_NAME!r}" \
        in text
    assert f"lists: {llama_server.alias}" in text
    assert [f.id for f in result.findings] == ["model-name-honesty/answers-any-name"]


def test_doctor_warns_on_a_server_answering_as_its_resident_model() -> None:
    with ModelNameEndpoint(("tiny",), honest=False, answer_as="tiny") as endpoint:
        result = run_hazard("model-name-honesty", DoctorOptions(endpoint=endpoint.base_url))
        assert endpoint.asked == [UNLISTED_MODEL_NAME]  # one request, and only the cheap one
    assert result.status == "warn"
    assert "answered as 'tiny'" in "\n".join(result.evidence)


def test_doctor_is_ok_when_the_server_refuses_a_name_it_does_not_serve() -> None:
    with ModelNameEndpoint(("tiny",), honest=True) as endpoint:
        result = run_hazard("model-name-honesty", DoctorOptions(endpoint=endpoint.base_url))
    assert result.status == "ok"
    assert "HTTP 404" in result.summary and "refuses" in result.summary
    assert "does not exist" in "\n".join(result.evidence)


def test_doctor_skips_without_an_endpoint_and_says_why_when_it_cannot_ask() -> None:
    assert run_hazard("model-name-honesty", DoctorOptions()).status == "skip"
    with ModelNameEndpoint(()) as endpoint:
        listed_none = run_hazard("model-name-honesty", DoctorOptions(endpoint=endpoint.base_url))
    assert listed_none.status == "skip" and "lists no models" in listed_none.summary
    gone = ModelNameEndpoint(())
    url = gone.base_url
    gone.server.server_close()
    unreachable = run_hazard("model-name-honesty", DoctorOptions(endpoint=url, timeout=1.0))
    assert unreachable.status == "skip" and "did not answer" in unreachable.summary


def test_the_doctor_reads_the_endpoint_from_the_declaration(tmp_path: Path, llama_server) -> None:
    from execsys import declaration

    path = tmp_path / "execsys.toml"
    path.write_text(f'[runtime]\nengine = "llama-cpp-python"\nendpoint = "{llama_server.base_url}"\n')
    options = DoctorOptions.from_sources(declaration.load(path))
    assert options.endpoint == llama_server.base_url
    assert run_hazard("model-name-honesty", options).status == "warn"


def test_doctor_cli_shows_the_honesty_warning(cli, tmp_path: Path, llama_server) -> None:
    (tmp_path / "execsys.toml").write_text(
        f'[runtime]\nengine = "llama-cpp-python"\nendpoint = "{llama_server.base_url}"\n')
    result = cli("doctor", "--only", "model-name-honesty", "--json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr  # a warning, not a blocking hazard
    [hazard] = result.json()["hazards"]
    assert hazard["id"] == "model-name-honesty" and hazard["status"] == "warn"
    assert hazard["summary"] == ANSWERS_ANY_NAME
    strict = cli("doctor", "--only", "model-name-honesty", "--strict", cwd=tmp_path)
    assert strict.returncode == 1 and ANSWERS_ANY_NAME in " ".join(strict.stdout.split())


# -- execsys run's watch: the engine function the watch loop calls --------------------------------

def test_the_watch_reports_an_alias_re_pointed_mid_run_as_drift_of_the_answered_model(llama_server) -> None:
    from execsys.observe.served import answered_as
    from execsys.run.watch import Watcher

    with ModelNameEndpoint(("tiny",), answer_as="tiny-2026-01") as endpoint:
        drift: list[dict] = []
        watcher = Watcher({"endpoint": endpoint.base_url}, 0.2, on_drift=drift.append)
        watcher.start()  # the baseline: requests for 'tiny' are answered by tiny-2026-01
        endpoint.answer_as = "tiny-2026-06"  # the router behind the name moves
        deadline = time.monotonic() + 30
        while not drift and time.monotonic() < deadline:
            time.sleep(0.1)
        watcher.stop()
        assert "tiny" in endpoint.asked
    assert [(e["component"], e["before"], e["after"]) for e in drift] == [
        ("runtime.endpoint.answered_model", "tiny-2026-01", "tiny-2026-06")]
    # the real server names the model asked for; an endpoint that is gone answers nothing, not an error
    assert answered_as(llama_server.base_url, llama_server.alias) == llama_server.alias
    gone = ModelNameEndpoint(())
    gone.server.server_close()
    assert answered_as(gone.base_url, "tiny", timeout=1.0) is None


def test_doctor_honesty_check_is_bounded_by_its_budget_against_a_trickling_server() -> None:
    """A server that accepts and answers one byte a second never holds the check past its budget."""
    import socket
    import time

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)
    stop = threading.Event()

    def trickle() -> None:
        while not stop.is_set():
            try:
                listener.settimeout(0.5)
                conn, _ = listener.accept()
            except OSError:
                continue
            with conn:
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n")
                while not stop.is_set():
                    try:
                        conn.sendall(b" ")
                    except OSError:
                        break
                    time.sleep(0.5)

    thread = threading.Thread(target=trickle, daemon=True)
    thread.start()
    try:
        start = time.monotonic()
        result = run_hazard("model-name-honesty",
                            DoctorOptions(endpoint=f"http://127.0.0.1:{listener.getsockname()[1]}/v1", timeout=1.0))
        elapsed = time.monotonic() - start
    finally:
        stop.set()
        thread.join(timeout=5)
        listener.close()
    assert result.status == "skip" and "did not answer" in result.summary
    assert elapsed < 7  # the budget is 5 s at timeout 1 s, inside the runner's 8 s deadline
