"""`pin` as an operation, in-process: what it observes of each component and announces, where the
lock goes and what it records in the ledger, what a cancel leaves, which endpoints and servers must
answer, and where the declaration's relative paths resolve.

Real declarations and artifacts in tmp_path, a real SQLite ledger, a real git repository, real
interpreter processes, MCP servers over stdio (the SDK's own client).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from execsys import COMPONENTS, declaration
from execsys.errors import InputError
from execsys.identity import (
    ArtifactHashed,
    Cancelled,
    ComponentObserved,
    PinOptions,
    load_lock,
    observe_components,
    observe_runtime,
    pin,
    run_pin,
    verify,
)
from execsys.ledger import Ledger
from tests.fixtures.git_repo import git
from tests.fixtures.identity_project import (
    DECLARATION,
    JUDGE_DOWN,
    b3sum,
    declare,
    needs_b3sum,
    write_project,
)


@needs_b3sum
def test_every_declared_component_is_observed_and_announced_in_order(rich: Path) -> None:
    import socket

    events: list = []
    identity = pin(declaration.load(rich / "execsys.toml"), require_endpoint=False, on_event=events.append)
    observed = [(e.name, e.index, e.total) for e in events if isinstance(e, ComponentObserved)]
    order = ["runtime", "artifact", "model", "hardware", "harness", "environment", "grader", "tools", "workflow",
             "context_policy", "retrieval", "budget"]
    assert observed == [(name, index, 12) for index, name in enumerate(order, 1)]
    assert identity.observed("model") == {"from_files": {"model_type": "llama", "architectures": ["LlamaForCausalLM"],
                                                         "dtype": "bfloat16"}}
    assert identity.observed("artifact")["kind"] == "tree" and identity.observed("artifact")["files"] == 3
    assert identity.observed("runtime") == {"engine": {"name": None, "version": None, "source": None}}
    assert identity.observed("hardware")["hostname"] == socket.gethostname()
    assert identity.observed("harness") == {"git": None, "note": f"{rich} is not inside a git repository"}
    assert identity.observed("environment")["variables"] == {}
    template = b3sum(rich / "template.jinja")
    done = subprocess.run(["b3sum", "--no-names"], input=b"{{ messages }}", capture_output=True, timeout=30,
                          check=True)
    assert identity.observed("context_policy") == {
        "template": {"path": str(rich / "template.jinja"), "kind": "file", "digest": template, "files": 1},
        "applied_template": {"source": "tokenizer_config.json chat_template",
                             "digest": done.stdout.decode().strip(), "matches_declared": True}}
    retrieval = identity.observed("retrieval")
    assert retrieval["index"] == {"path": str(rich / "index.bin"), "kind": "file", "digest": b3sum(rich / "index.bin"),
                                  "files": 1}
    assert (retrieval["corpus"]["path"], retrieval["corpus"]["kind"], retrieval["corpus"]["files"]) == (
        str(rich / "corpus"), "tree", 2)
    assert identity.observed("grader") == {"judge": {"endpoint": {"url": "http://127.0.0.1:9/v1",
                                                                  "error": JUDGE_DOWN.removeprefix("judge: ")}}}
    assert {name: identity.observed(name) for name in ("tools", "workflow", "budget")} == {
        "tools": {}, "workflow": {}, "budget": {}}


def test_observing_components_requires_the_declared_endpoint_unless_told_otherwise(project: Path) -> None:
    decl = declare(project, '[runtime]\nendpoint = "http://127.0.0.1:9/v1"\n')
    with pytest.raises(InputError) as caught:
        observe_components(decl)
    assert str(caught.value).startswith("endpoint http://127.0.0.1:9/v1: unreachable")
    components = observe_components(decl, require_endpoint=False)
    assert list(components) == list(COMPONENTS)
    assert "unreachable" in components["runtime"]["observed"]["endpoint"]["error"]


def test_artifact_hashing_reports_its_bytes(project: Path) -> None:
    (project / "model.bin").write_bytes(b"w" * 3000)
    events: list = []
    pin(declare(project, ""), require_endpoint=False, on_event=events.append)
    hashed = [event for event in events if isinstance(event, ArtifactHashed)]
    assert hashed and hashed[-1] == ArtifactHashed(3000, 3000)
    assert all(event.total_bytes == 3000 and 0 <= event.done_bytes <= 3000 for event in hashed)


def test_run_pin_records_in_the_ledger_then_writes_the_lock_beside_the_declaration(tmp_path: Path) -> None:
    from execsys.identity import IdentityRecorded, PinOptions, run_pin
    from execsys.ledger import Ledger

    (tmp_path / "model.bin").write_bytes(b"weights")
    (tmp_path / "execsys.toml").write_text(DECLARATION)
    ledger_path = tmp_path / "ledger.db"
    options = PinOptions.from_sources(declaration.load(tmp_path / "execsys.toml"), ledger=ledger_path)
    assert (options.lock_path, options.ledger_path, options.record, options.require_endpoint, options.previous) == (
        tmp_path / "execsys.lock.json", ledger_path, True, True, None)
    events: list = []
    report = run_pin(options, on_event=events.append)
    lock = tmp_path / "execsys.lock.json"
    assert report.lock_path == lock and report.diff is None and report.to_json() == report.identity.to_json()
    assert load_lock(lock).id == report.identity.id
    assert [e for e in events if isinstance(e, IdentityRecorded)] == [
        IdentityRecorded(report.identity.id, str(report.record_id), str(lock))]
    assert [e.name for e in events if isinstance(e, ComponentObserved)][0] == "runtime"
    with Ledger.open(ledger_path) as ledger:
        record = ledger.get(str(report.record_id))
        assert (record.kind, record.identity, record.body["id"]) == ("identity", report.identity.id, report.identity.id)
    # the lock is left out of the harness's own observation, and a re-pin says what moved
    (tmp_path / "execsys.toml").write_text(DECLARATION.replace("seed = 7", "seed = 8"))
    again = run_pin(PinOptions.from_sources(declaration.load(tmp_path / "execsys.toml"), load_lock(lock),
                                            ledger=ledger_path))
    assert again.diff is not None and again.diff.moved == ["budget"] and again.diff.sentence == "isolates budget"
    assert load_lock(lock).id == again.identity.id != report.identity.id


def test_run_pin_without_recording_writes_nothing(tmp_path: Path) -> None:
    from execsys.identity import PinOptions, run_pin

    (tmp_path / "model.bin").write_bytes(b"weights")
    (tmp_path / "execsys.toml").write_text(DECLARATION)
    options = PinOptions.from_sources(declaration.load(tmp_path / "execsys.toml"), ledger=tmp_path / "ledger.db",
                                      record=False, lock_path=str(tmp_path / "other.lock.json"))
    assert (options.record, options.require_endpoint, options.lock_path) == (False, False, tmp_path / "other.lock.json")
    report = run_pin(options)
    assert (report.lock_path, report.record_id, report.superseded) == (None, None, None) and report.identity.id
    assert sorted(p.name for p in tmp_path.iterdir()) == ["execsys.toml", "model.bin"]


def test_pin_options_refuse_bad_paths_in_one_line(tmp_path: Path) -> None:
    from execsys.identity import PinOptions

    (tmp_path / "execsys.toml").write_text(DECLARATION)
    decl = declaration.load(tmp_path / "execsys.toml")
    with pytest.raises(InputError) as caught:
        PinOptions.from_sources(decl, lock_path=" ")
    assert str(caught.value) == "the lock path is empty: give --lock FILE, or omit it for the lock beside the declaration"
    with pytest.raises(InputError) as caught:
        PinOptions.from_sources(decl, lock_path=tmp_path)
    assert str(caught.value) == f"{tmp_path}: cannot write the lock (is a directory)"
    with pytest.raises(InputError) as caught:
        PinOptions.from_sources(decl, engine_log="")
    assert str(caught.value) == "--engine-log is empty: give the engine's log file"
    options = PinOptions.from_sources(decl, engine_log="engine.log", require_endpoint=False)
    assert options.declaration.component("runtime")["log"] == os.path.abspath("engine.log")
    assert options.declaration.path == decl.path and options.require_endpoint is False
    assert options.declaration.component("budget") == decl.component("budget")


def test_a_declaration_read_from_no_file_locks_in_the_working_directory(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("EXECSYS_CONFIG", raising=False)
    beside = PinOptions.from_sources(declaration.load(write_project(tmp_path / "eval"))).lock_path
    assert beside == tmp_path / "eval" / "execsys.lock.json"
    nowhere = declaration.empty()
    assert PinOptions.from_sources(nowhere).lock_path == Path("execsys.lock.json")
    identity = pin(nowhere, require_endpoint=False)
    assert identity.declaration == {"path": None, "base_dir": str(tmp_path)}


def test_an_engine_log_flag_keeps_the_rest_of_the_declaration(tmp_path: Path) -> None:
    path = write_project(tmp_path, DECLARATION + '[runtime]\nendpoint = "http://127.0.0.1:9/v1"\nengine = "vllm"\n'
                                            'log = "old.log"\nsurprise = 1\n')
    decl = declaration.load(path)
    assert decl.warnings and "unknown key 'runtime.surprise'" in decl.warnings[0]
    options = PinOptions.from_sources(decl, engine_log=tmp_path / "engine.log", record=False)
    assert options.declaration.component("runtime") == {
        "endpoint": "http://127.0.0.1:9/v1", "engine": "vllm", "log": str(tmp_path / "engine.log")}
    assert options.declaration.warnings == decl.warnings
    # the warning still reaches the pin's notes
    assert run_pin(options).identity.notes[0] == decl.warnings[0]


class CancelAfter(threading.Event):
    """A cancel that reads as set from its ``after + 1``-th check on (None: never), counting the checks:
    a face whose user asks to stop at one exact point between two units of work."""

    def __init__(self, after: int | None = None) -> None:
        super().__init__()
        self.after = after
        self.checks = 0

    def is_set(self) -> bool:
        self.checks += 1
        return self.after is not None and self.checks > self.after


def test_a_cancel_stops_pin_before_anything_is_written(tmp_path: Path) -> None:
    path = write_project(tmp_path)
    ledger_path = tmp_path / "ledger.db"
    stop = threading.Event()
    stop.set()
    events: list = []
    with pytest.raises(Cancelled):
        pin(declaration.load(path), require_endpoint=False, cancel=stop, on_event=events.append)
    assert [e.name for e in events if isinstance(e, ComponentObserved)] == ["runtime"]
    # observing only (the TUI's "observe now") is cancelled too
    with pytest.raises(Cancelled):
        run_pin(PinOptions.from_sources(declaration.load(path), record=False), cancel=stop)
    with pytest.raises(Cancelled):
        run_pin(PinOptions.from_sources(declaration.load(path), ledger=ledger_path), cancel=stop)
    assert not (tmp_path / "execsys.lock.json").exists()
    # a cancel after the last component is observed, before the record: still nothing written
    counted = CancelAfter()
    run_pin(PinOptions.from_sources(declaration.load(path), record=False), cancel=counted)
    assert counted.checks > 0
    with pytest.raises(Cancelled) as caught:
        run_pin(PinOptions.from_sources(declaration.load(path), ledger=ledger_path), cancel=CancelAfter(counted.checks))
    assert str(caught.value) == "cancelled: nothing was written"
    assert not (tmp_path / "execsys.lock.json").exists()
    with Ledger.open(ledger_path) as ledger:
        assert ledger.count(kind="identity") == 0
    # and the same run, not cancelled, records and writes
    report = run_pin(PinOptions.from_sources(declaration.load(path), ledger=ledger_path), cancel=CancelAfter())
    assert load_lock(tmp_path / "execsys.lock.json").id == report.identity.id


def test_a_pin_cancelled_after_the_runtime_stops_saying_nothing_was_written(project: Path) -> None:
    decl = declare(project, "")
    cancel = threading.Event()
    events: list = []

    def on_event(event: object) -> None:
        events.append(event)
        cancel.set()

    with pytest.raises(Cancelled) as caught:
        pin(decl, on_event=on_event, cancel=cancel)
    assert str(caught.value) == "cancelled: nothing was written"
    assert events == [ComponentObserved("runtime", 1, 12)]


def test_pin_requires_the_endpoint_only_when_it_records(tmp_path: Path) -> None:
    path = write_project(tmp_path, DECLARATION + '[runtime]\nendpoint = "http://127.0.0.1:9/v1"\n')
    ledger_path = tmp_path / "ledger.db"
    with pytest.raises(InputError) as caught:
        run_pin(PinOptions.from_sources(declaration.load(path), ledger=ledger_path))
    assert str(caught.value).startswith("endpoint http://127.0.0.1:9/v1: unreachable")
    assert not (tmp_path / "execsys.lock.json").exists()
    observed = run_pin(PinOptions.from_sources(declaration.load(path), record=False)).identity
    assert "unreachable" in observed.observed("runtime")["endpoint"]["error"]


@needs_b3sum
def test_pin_refuses_an_endpoint_that_does_not_answer_and_reads_grader_files_beside_the_declaration(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    project = tmp_path / "eval"
    project.mkdir()
    (project / "model.bin").write_bytes(b"weights")
    (project / "judge.txt").write_text("Grade: {answer}\n")
    (project / "execsys.toml").write_text(DECLARATION + '[grader]\nname = "j"\n[grader.judge]\nprompt = "judge.txt"\n')
    monkeypatch.chdir(tmp_path)
    identity = pin(declaration.load(project / "execsys.toml"))
    assert identity.observed("grader") == {"judge": {"prompt": {"path": str(project / "judge.txt"),
                                                                "digest": b3sum(project / "judge.txt")}}}
    (project / "execsys.toml").write_text(DECLARATION + '[runtime]\nendpoint = "http://127.0.0.1:9/v1"\n')
    with pytest.raises(InputError) as caught:
        pin(declaration.load(project / "execsys.toml"))
    assert str(caught.value).startswith("endpoint http://127.0.0.1:9/v1: unreachable")


def test_the_lock_pin_rewrites_is_no_edit_of_the_harness_repository(tmp_path: Path) -> None:
    project = tmp_path / "eval"
    path = write_project(project)
    lock = project / "execsys.lock.json"
    lock.write_text("{}\n")
    git("init", "-q", cwd=project)
    git("add", ".", cwd=project)
    git("commit", "-qm", "eval", cwd=project)
    lock.write_text('{"an": "older pin"}\n')  # tracked, and edited since the commit
    assert pin(declaration.load(path), require_endpoint=False).observed("harness")["dirty"] is True
    assert pin(declaration.load(path), require_endpoint=False, exclude=[lock]).observed("harness")["dirty"] is False
    ledger_path = tmp_path / "ledger.db"
    first = run_pin(PinOptions.from_sources(declaration.load(path), ledger=ledger_path))
    again = run_pin(PinOptions.from_sources(declaration.load(path), load_lock(lock), ledger=ledger_path))
    assert again.identity.observed("harness")["dirty"] is False
    assert again.identity.id == first.identity.id and again.diff is not None and again.diff.moved == []


def test_an_excluded_file_is_no_edit_of_the_harness_at_pin(project: Path) -> None:
    decl = declare(project, "")
    lock = project / "execsys.lock.json"
    lock.write_text("{}\n")
    git("init", "-q", cwd=project)
    git("add", ".", cwd=project)
    git("commit", "-qm", "eval", cwd=project)
    lock.write_text('{"id": "rewritten"}\n')  # the lock being rewritten by this very pin
    assert pin(decl, require_endpoint=False, exclude=[lock]).observed("harness")["dirty"] is False
    assert pin(decl, require_endpoint=False).observed("harness")["dirty"] is True


def test_runtime_files_resolve_beside_the_declaration_and_shells_the_harness_uses_are_recorded(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    project = tmp_path / "eval"
    project.mkdir()
    (project / "model.bin").write_bytes(b"weights")
    (project / "engine.env").write_text("NVIDIA_TF32_OVERRIDE=0\nHF_TOKEN=hf_secretsecretsecret\n")
    (project / "engine.log").write_text("loading weights\n")
    (project / "execsys.toml").write_text('[artifact]\npath = "model.bin"\n[runtime]\nengine = "vllm"\n'
                                          'env_file = "engine.env"\nlog = "engine.log"\n'
                                          '[harness]\ncommands = ["echo hi | cat", "true"]\n')
    monkeypatch.chdir(tmp_path)  # pinned from elsewhere: the declaration's own directory still counts
    identity = pin(declaration.load(project / "execsys.toml"), require_endpoint=False)
    runtime = identity.observed("runtime")
    assert runtime["env_file_numerics"] == {"NVIDIA_TF32_OVERRIDE": "0"}
    assert runtime["kernels"] == {"log": str(project / "engine.log"), "found": []}
    assert identity.declared("runtime")["env_file"] == "engine.env"  # declared as written
    shells = identity.observed("environment")["shells"]
    assert [(s["program"], s["because"]) for s in shells] == [("sh", "harness command 'echo hi | cat' runs through it")]


def test_a_declaration_without_a_file_resolves_beside_the_working_directory(
        project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(project)
    identity = pin(declaration.parse(DECLARATION), require_endpoint=False)
    assert identity.declaration == {"path": None, "base_dir": str(project)}
    assert identity.observed("artifact")["path"] == str(project / "model.bin")


def test_an_empty_runtime_file_setting_names_no_file(project: Path) -> None:
    identity = pin(declare(project, '[runtime]\nenv_file = ""\nlog = ""\n'), require_endpoint=False)
    runtime = identity.observed("runtime")
    assert "env_file_numerics" not in runtime and "kernels" not in runtime
    assert observe_runtime({"env_file": "", "log": ""}, require_endpoint=False, base_dir=project).keys() == \
        runtime.keys()


# A minimal MCP server over stdio (JSON-RPC lines): initialize and tools/list, nothing else.
MCP_SERVER = '''
import json, sys
for line in sys.stdin:
    msg = json.loads(line)
    if "id" not in msg:
        continue
    if msg["method"] == "initialize":
        result = {"protocolVersion": msg["params"]["protocolVersion"], "capabilities": {"tools": {}},
                  "serverInfo": {"name": "mini", "version": "0.1"}}
    elif msg["method"] == "tools/list":
        result = {"tools": [{"name": "echo", "description": "Echo.", "inputSchema": {"type": "object"}}]}
    else:
        print(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "error": {"code": -32601, "message": "no"}}), flush=True)
        continue
    print(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": result}), flush=True)
'''


def test_mcp_servers_start_beside_the_declaration_and_each_one_down_is_named(tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("mcp", reason="the MCP SDK comes with the test extra (pip install -e '.[test]')")
    project = tmp_path / "eval"
    servers = "".join(f'[[tools.mcp]]\nname = "{name}"\ncommand = ["{sys.executable}", "server.py"]\n'
                      for name in ("a", "b"))
    path = write_project(project, DECLARATION + servers)
    (project / "server.py").write_text(MCP_SERVER)
    from execsys import trust

    trust.trust(path)  # the test's own declaration: its author trusts it
    monkeypatch.chdir(tmp_path)  # pinned from elsewhere: the servers still start in the declaration's directory
    identity = pin(declaration.load(path))
    assert [(s["name"], s["server"]["name"], [t["name"] for t in s["tools"]])
            for s in identity.observed("tools")["servers"]] == [("a", "mini", ["echo"]), ("b", "mini", ["echo"])]
    # the servers now describe their tool otherwise: verify names the tool and what moved, not field paths
    (project / "server.py").write_text(MCP_SERVER.replace('"Echo."', '"Echo, louder."')
                                       .replace('"version": "0.1"', '"version": "0.2"'))
    tools = verify(identity).components["tools"]
    assert (tools.status, tools.reason) == ("changed", "server version 0.1 → 0.2; tool echo: description changed")
    (project / "server.py").unlink()
    with pytest.raises(InputError) as caught:
        pin(declaration.load(path))  # pin needs every server to answer
    assert str(caught.value).startswith("MCP server 'a': cannot list its tools (")
    report = verify(identity)  # verify: the tools are unknown now, not changed
    tools = report.components["tools"]
    assert tools.status == "unverifiable" and tools.changes == [] and report.observed_id is None
    assert re.fullmatch(r"MCP server\(s\) did not answer: a \(MCP server 'a': cannot list its tools \(.+\)\), "
                        r"b \(MCP server 'b': cannot list its tools \(.+\)\)", tools.reason or ""), tools.reason
    down = pin(declaration.load(path), require_endpoint=False)  # observing only: the servers down are listed
    assert [entry.split(" ")[0] for entry in down.observed("tools")["unreachable"]] == ["a", "b"]


def test_a_new_identity_over_a_probed_one_says_whose_licences_the_probes_are(tmp_path: Path) -> None:
    """run_pin over a lock of another identity names the probe records (and their axes) measured for the
    old one: they license nothing for the new one. A first pin, or the same identity again, says nothing;
    the lock it replaces is read even when the caller did not hand it over, and a broken one is no identity."""
    from execsys.identity import SupersededLicences

    write_project(tmp_path)
    ledger_path = tmp_path / "ledger.db"
    lock = tmp_path / "execsys.lock.json"

    def repin(with_previous: bool = False):
        decl = declaration.load(tmp_path / "execsys.toml")
        previous = load_lock(lock) if with_previous else None
        return run_pin(PinOptions.from_sources(decl, previous, ledger=ledger_path, require_endpoint=False))

    first = repin()
    assert first.superseded is None
    old = first.identity.id
    with Ledger.open(ledger_path) as ledger:
        for axis in ("session", "session", "restart"):
            ledger.append("probe", {"schema": "execsys.probe/1", "axis": axis, "identity": old, "n": 4, "m": 4,
                                    "scope": {}}, identity=old)
    assert repin(with_previous=True).superseded is None  # the same identity: its licences stand

    (tmp_path / "model.bin").write_bytes(b"other weights")
    moved = repin()  # the old lock read from the file it replaces
    assert moved.superseded == SupersededLicences(old, 3, ("session", "restart"))
    assert moved.superseded.sentence() == (
        f"3 probe records (session, restart) belong to {old[:12]}…; this identity is unlicensed until probed")
    assert SupersededLicences(old, 1, ("session",)).sentence() == (
        f"1 probe record (session) belong to {old[:12]}…; this identity is unlicensed until probed")

    (tmp_path / "model.bin").write_bytes(b"third weights")
    unprobed = repin(with_previous=True)
    assert unprobed.superseded == SupersededLicences(moved.identity.id, 0, ())
    assert unprobed.superseded.sentence() == (
        f"this is a new identity (the lock held {moved.identity.id[:12]}…); it is unlicensed until probed")

    for broken in ("{not json", '{"id": 7}', '{"id": ""}', "[]"):
        lock.write_text(broken)
        (tmp_path / "model.bin").write_bytes(broken.encode())
        assert repin().superseded is None, broken


def test_a_lock_that_cannot_be_written_is_refused_before_anything_is_observed_or_recorded(tmp_path: Path) -> None:
    write_project(tmp_path)
    ledger_path = tmp_path / "ledger.db"
    options = PinOptions.from_sources(declaration.load(tmp_path / "execsys.toml"), ledger=ledger_path,
                                      lock_path="/proc/execsys.lock.json", require_endpoint=False)
    events: list = []
    with pytest.raises(InputError) as refused:
        run_pin(options, on_event=events.append)
    assert str(refused.value).startswith("/proc/execsys.lock.json: cannot write the lock (")
    assert events == [] and not ledger_path.exists()

