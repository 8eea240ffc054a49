"""pin as an operation (execsys/identity.py): where the lock goes, what a cancel leaves, which lock or
ledger record an identity ref names, and the grader, tools and workflow observed through the harness.

Written for mutants that survived scripts/mutation.sh in ``pin``, ``run_pin``, ``PinOptions.from_sources``,
``run_verify``, ``lock_beside``, ``load_identity_ref`` and ``_observe_grader_tools_workflow``. Real
declarations and artifacts in tmp_path, a real SQLite ledger, a real git repository, real interpreter
processes, MCP servers over stdio (the SDK's own client) and an OpenAI-compatible endpoint on loopback.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from execsys import COMPONENTS, declaration
from execsys.canonical import content_id
from execsys.errors import InputError
from execsys.identity import (
    Cancelled,
    ComponentChecked,
    ComponentObserved,
    Identity,
    PinOptions,
    VerifyOptions,
    load_identity_ref,
    load_lock,
    lock_beside,
    pin,
    record_identity,
    run_pin,
    run_verify,
    verify,
    write_lock,
)
from execsys.ledger import Ledger
from tests.fixtures.identity_project import DECLARATION, write_project


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args], cwd=repo, check=True,
                   capture_output=True, timeout=30)


# -- where the lock goes, and what from_sources keeps ---------------------------------------------


def test_a_declaration_read_from_no_file_locks_in_the_working_directory(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert lock_beside(declaration.load(write_project(tmp_path / "eval"))) == tmp_path / "eval" / "execsys.lock.json"
    nowhere = declaration.empty()
    assert lock_beside(nowhere) == Path("execsys.lock.json")
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


# -- cancel, the endpoint rule and the lock left out of the harness --------------------------------


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


def test_pin_requires_the_endpoint_only_when_it_records(tmp_path: Path) -> None:
    path = write_project(tmp_path, DECLARATION + '[runtime]\nendpoint = "http://127.0.0.1:9/v1"\n')
    ledger_path = tmp_path / "ledger.db"
    with pytest.raises(InputError) as caught:
        run_pin(PinOptions.from_sources(declaration.load(path), ledger=ledger_path))
    assert str(caught.value).startswith("endpoint http://127.0.0.1:9/v1: unreachable")
    assert not (tmp_path / "execsys.lock.json").exists()
    observed = run_pin(PinOptions.from_sources(declaration.load(path), record=False)).identity
    assert "unreachable" in observed.observed("runtime")["endpoint"]["error"]


def test_the_lock_pin_rewrites_is_no_edit_of_the_harness_repository(tmp_path: Path) -> None:
    project = tmp_path / "eval"
    path = write_project(project)
    lock = project / "execsys.lock.json"
    lock.write_text("{}\n")
    _git(project, "init", "-q")
    _git(project, "add", ".")
    _git(project, "commit", "-qm", "eval")
    lock.write_text('{"an": "older pin"}\n')  # tracked, and edited since the commit
    assert pin(declaration.load(path), require_endpoint=False).observed("harness")["dirty"] is True
    assert pin(declaration.load(path), require_endpoint=False, exclude=[lock]).observed("harness")["dirty"] is False
    ledger_path = tmp_path / "ledger.db"
    first = run_pin(PinOptions.from_sources(declaration.load(path), ledger=ledger_path))
    again = run_pin(PinOptions.from_sources(declaration.load(path), load_lock(lock), ledger=ledger_path))
    assert again.identity.observed("harness")["dirty"] is False
    assert again.identity.id == first.identity.id and again.diff is not None and again.diff.moved == []


# -- what the engine does now: outside the id, in the lock -----------------------------------------


def test_an_endpoint_that_answers_any_model_name_is_noted_and_kept_outside_the_id(tmp_path: Path) -> None:
    from execsys.observe.served import ANSWERS_ANY_NAME
    from tests.fixtures.llama import FlipEndpoint

    with FlipEndpoint(models=["tiny"]) as endpoint:
        path = write_project(tmp_path, DECLARATION + f'[runtime]\nendpoint = "{endpoint.base_url}"\n')
        identity = pin(declaration.load(path))
    honesty = identity.live["model_name_honesty"]
    assert honesty["answered"] is True and honesty["answered_as"] == honesty["asked"] != "tiny"
    assert [n for n in identity.notes if n.startswith(ANSWERS_ANY_NAME)]
    assert load_lock(write_lock(identity, tmp_path / "execsys.lock.json")).live == identity.live


# -- run_verify is verify ---------------------------------------------------------------------------


def test_run_verify_announces_each_check_and_stops_on_cancel(tmp_path: Path) -> None:
    path = write_project(tmp_path)
    identity = load_lock(write_lock(pin(declaration.load(path), require_endpoint=False), tmp_path / "x.lock.json"))
    events: list = []
    report = run_verify(VerifyOptions.from_sources(None, identity), on_event=events.append)
    assert report.verdict == "same-system"
    assert [(e.name, e.status) for e in events if isinstance(e, ComponentChecked)] == [(n, "same") for n in COMPONENTS]
    stop = threading.Event()
    stop.set()
    with pytest.raises(Cancelled):
        run_verify(VerifyOptions.from_sources(None, identity), cancel=stop)


# -- an identity by lock, record or id prefix ------------------------------------------------------


def _variants(identity: Identity, count: int) -> list[Identity]:
    """Real identities of ``count`` budgets (seed 0, 1, ...): each id is its components' content id."""
    out = []
    for seed in range(count):
        components = json.loads(json.dumps(identity.components))
        components["budget"]["declared"]["seed"] = seed
        out.append(dataclasses.replace(identity, id=content_id(components), components=components))
    return out


@pytest.fixture
def pinned(tmp_path: Path) -> Identity:
    return pin(declaration.load(write_project(tmp_path / "eval")), require_endpoint=False)


def _sharing_a_first_character(identity: Identity, count: int) -> tuple[str, list[Identity]]:
    groups: dict[str, list[Identity]] = {}
    for variant in _variants(identity, 400):
        group = groups.setdefault(variant.id[0], [])
        group.append(variant)
        if len(group) == count:
            return variant.id[0], group
    raise AssertionError("no first character shared")  # pragma: no cover - 400 ids over 16 characters


def test_an_ambiguous_identity_prefix_lists_up_to_four_ids(pinned: Identity, tmp_path: Path) -> None:
    first, group = _sharing_a_first_character(pinned, 5)
    for size in (2, 4, 5):
        with Ledger.open(tmp_path / f"ledger{size}.db") as ledger:
            for identity in group[:size]:
                record_identity(identity, ledger)
                record_identity(identity, ledger)  # an identity pinned twice is one match
            with pytest.raises(InputError) as caught:
                load_identity_ref(first, ledger)
        shown = ", ".join(sorted(i.id[:12] for i in group[:size])[:4])
        more = ", ..." if size > 4 else ""
        assert str(caught.value) == (f"identity prefix '{first}' is ambiguous in the ledger ({shown}{more}): "
                                     "give more characters")
    with Ledger.open(tmp_path / "ledger2.db") as ledger:
        assert load_identity_ref(group[1].id[:20], ledger).id == group[1].id


def test_an_identity_prefix_names_its_newest_record_and_a_record_id_that_record(pinned: Identity,
                                                                                tmp_path: Path) -> None:
    older = dataclasses.replace(pinned, recorded_at="2026-01-01T00:00:00Z")
    newer = dataclasses.replace(pinned, recorded_at="2026-06-01T00:00:00Z")
    with Ledger.open(tmp_path / "ledger.db") as ledger:
        older_id = record_identity(older, ledger)
        newer_id = record_identity(newer, ledger)
        by_prefix = load_identity_ref(pinned.id[:8], ledger)
        assert (by_prefix.recorded_at, by_prefix.source) == (newer.recorded_at, f"ledger record {newer_id}")
        by_record = load_identity_ref(older_id, ledger)
        assert (by_record.recorded_at, by_record.source) == (older.recorded_at, f"ledger record {older_id}")


def test_an_identity_known_only_from_probes_is_found_by_prefix_naming_the_prefix(tmp_path: Path) -> None:
    with Ledger.open(tmp_path / "ledger.db") as ledger:
        ledger.append("probe", {"axis": "restart"}, identity="ab" * 32)
        known = load_identity_ref("abab", ledger)
        assert (known.id, known.components, known.source) == ("ab" * 32, {}, "identity abab")
        assert known.notes == ["known only by its id from identity abab: the ledger holds no identity record for it"]
        # two identities behind one prefix, each known only from what was taken under it
        ledger.append("comparison", {"verdict": "same"}, identity="ac" * 32)
        with pytest.raises(InputError) as caught:
            load_identity_ref("a", ledger)
        assert str(caught.value) == "identity prefix 'a' is ambiguous in the ledger: give more characters"
        # a plan names the identity it is for, but nothing was taken under it yet
        ledger.append("plan", {"arms": []}, identity="cd" * 32)
        with pytest.raises(InputError) as caught:
            load_identity_ref("cdcd", ledger)
        assert str(caught.value).startswith("'cdcd' is neither a lock file nor an identity in the ledger")


@pytest.mark.parametrize("kind", ["run", "attach"])
def test_an_identity_known_only_from_harness_runs_is_found_by_prefix(tmp_path: Path, kind: str) -> None:
    """A job's ``execsys run`` verified the lock its TaskProlog pinned on the node: the ledger the
    results were gathered into has the run, not the identity record."""
    with Ledger.open(tmp_path / "ledger.db") as ledger:
        run_id = ledger.append(kind, {"verdict": "clean"}, identity="ef" * 32)
        by_prefix = load_identity_ref("efef", ledger)
        assert (by_prefix.id, by_prefix.components, by_prefix.source) == ("ef" * 32, {}, "identity efef")
        by_record = load_identity_ref(run_id, ledger)
        assert (by_record.id, by_record.source) == ("ef" * 32, f"ledger record {run_id}")


def test_a_ref_the_ledger_refuses_leaves_the_ledger_closed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The ledger load_identity_ref opens itself is closed before the error reaches the caller: SQLite
    removes the write-ahead log beside it only when the last connection closes."""
    ledger_path = tmp_path / "ledger.db"
    monkeypatch.setenv("EXECSYS_LEDGER", str(ledger_path))
    Ledger.open(ledger_path).close()
    wal = tmp_path / "ledger.db-wal"
    assert not wal.exists()
    with pytest.raises(InputError) as caught:
        load_identity_ref("zz")
    assert "is neither a lock file nor an identity" in str(caught.value)
    assert not wal.exists()


# -- the grader, tools and workflow: observed where the harness runs -------------------------------


def _version_in(interpreter: str, distribution: str) -> str:
    done = subprocess.run([interpreter, "-I", "-c", f"from importlib.metadata import version; print(version({distribution!r}))"],
                          capture_output=True, text=True, timeout=30, check=True)
    return done.stdout.strip()


def test_declared_packages_are_read_from_the_harness_interpreter_and_configs_beside_the_declaration(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    harness_python = os.path.realpath(sys.executable)
    project = tmp_path / "eval"
    path = write_project(project, DECLARATION + f'[harness]\ncommands = ["{harness_python} -c pass"]\n'
                                           '[grader]\npackages = ["pytest"]\n[tools]\npackages = ["pytest"]\n'
                                           '[workflow]\npackages = ["pytest"]\nconfig = ["flow.yaml"]\n')
    (project / "flow.yaml").write_text("steps: 3\n")
    empty = tmp_path / "no-python-here"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))  # no python3 on PATH: only the harness's can answer
    monkeypatch.chdir(empty)
    identity = pin(declaration.load(path), require_endpoint=False)
    expected = {"interpreter": harness_python, "versions": {"pytest": _version_in(harness_python, "pytest")}}
    for name in ("grader", "tools", "workflow"):
        assert identity.observed(name)["packages"] == expected, name
    config = identity.observed("workflow")["config"]
    assert [(c["path"], bool(c["digest"])) for c in config] == [(str(project / "flow.yaml"), True)]


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
    monkeypatch.chdir(tmp_path)  # pinned from elsewhere: the servers still start in the declaration's directory
    identity = pin(declaration.load(path))
    assert [(s["name"], s["server"]["name"], [t["name"] for t in s["tools"]])
            for s in identity.observed("tools")["servers"]] == [("a", "mini", ["echo"]), ("b", "mini", ["echo"])]
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
