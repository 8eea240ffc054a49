"""The documentation site (issue 30): the JSON Schema files under docs/schemas/ describe what the real CLI
prints, the CLI reference is the parsers' own --help, and ``mkdocs build --strict`` succeeds offline.

The records validated are the real CLI's output, run as a user runs it (``python -m execsys``) in one
small project: a declaration with a 7-byte artifact, its own ledger and trust store, a real harness
program for ``execsys run`` (two results, signed receipts, two shards of one job), the compare tests'
result files, and a probe and a paired plan run against the suite's in-process HTTP endpoint
(``FlipEndpoint``: a real server on a loopback port, no engine)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import jsonschema  # the test extra: a missing one fails the module, never skips it
import pytest

from tests.fixtures.common import run_cli
from tests.fixtures.compare_records import BASE, OUT_A, OUT_B, write_lock, write_result
from tests.fixtures.identity_project import write_project
from tests.fixtures.llama import FlipEndpoint

# one worker runs this module under pytest-xdist, so the records below are produced once
pytestmark = pytest.mark.xdist_group("docs")

ROOT = Path(__file__).resolve().parents[1]
SCHEMAS = ROOT / "docs" / "schemas"

# a small real harness: a score file and a per-case file, as lm-eval's results and samples are
# a real grader command that flips its verdict on case b from one grading to the next (a count file per case)
GRADER = ("import json, os, sys\n"
          "case = json.loads(sys.stdin.read())\n"
          "count = 'count-' + case['id']\n"
          "calls = int(open(count).read()) + 1 if os.path.exists(count) else 1\n"
          "open(count, 'w').write(str(calls))\n"
          "print('1' if case['id'] != 'b' or calls % 2 else '0')\n")

HARNESS = ("import json, sys\n"
           "open(sys.argv[1], 'w').write(json.dumps({'score': 0.5}) + '\\n')\n"
           "open(sys.argv[2], 'w').write(''.join(json.dumps({'case': i, 'ok': i % 2 == 0}) + '\\n' "
           "for i in range(4)))\n")


def _schema_files() -> list[Path]:
    return sorted(SCHEMAS.glob("*.schema.json"))


def _keypair(where: Path) -> tuple[Path, Path]:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ed25519

    key = ed25519.Ed25519PrivateKey.generate()
    private, public = where / "signer.pem", where / "signer.pub"
    private.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                          serialization.NoEncryption()))
    public.write_bytes(key.public_key().public_bytes(serialization.Encoding.PEM,
                                                     serialization.PublicFormat.SubjectPublicKeyInfo))
    return private, public


def _signed_model_project(project: Path) -> Path:
    """A declaration whose artifact directory holds an OpenSSF model-signing bundle (model.sig), signed
    with an EC key by model-signing itself, and whose [artifact] signature_key names the public key."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from model_signing import hashing, signing

    model = project / "model"
    model.mkdir(parents=True)
    (model / "config.json").write_text('{"model_type": "llama"}\n')
    (model / "weights.bin").write_bytes(bytes(range(256)))
    key = ec.generate_private_key(ec.SECP256R1())
    (project / "signer.pem").write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                           serialization.NoEncryption()))
    (project / "signer.pub").write_bytes(key.public_key().public_bytes(serialization.Encoding.PEM,
                                                                       serialization.PublicFormat.SubjectPublicKeyInfo))
    signing.Config().use_elliptic_key_signer(private_key=project / "signer.pem").set_hashing_config(
        hashing.Config().set_ignored_paths(paths=["model.sig"])).sign(model, model / "model.sig")
    (project / "execsys.toml").write_text('[artifact]\npath = "model"\nsignature_key = "signer.pub"\n')
    return project


@pytest.fixture(scope="module")
def outputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict]]:
    """schema file name -> the real outputs that must validate against it."""
    base = tmp_path_factory.mktemp("docs-records")
    project = base / "project"
    write_project(project)
    env = {"EXECSYS_LEDGER": str(base / "ledger.sqlite3"), "EXECSYS_DATA_DIR": str(base / "data")}
    found: dict[str, list[dict]] = {}

    def record(schema: str, *args: str, codes: tuple[int, ...] = (0,), cwd: Path = project,
               timeout: float = 180) -> dict:
        cut = args.index("--") if "--" in args else len(args)  # --json is execsys's, not the harness's
        result = run_cli(*args[:cut], "--json", *args[cut:], cwd=cwd, env=env, timeout=timeout)
        assert result.returncode in codes, (args, result.returncode, result.stderr)
        data = json.loads(result.stdout)
        found.setdefault(schema, []).append(data)
        return data

    record("doctor-1", "doctor")
    record("identity-2", "pin")
    found["identity-2"].append(json.loads((project / "execsys.lock.json").read_text()))
    record("verify-1", "verify")
    record("scope-1", "scope")  # the ledger holds this identity and nothing measured about it

    compared = base / "compare"
    compared.mkdir()
    write_lock(compared / "a.lock.json", **BASE)
    write_lock(compared / "b.lock.json", **{**BASE, "runtime": {"engine": "vllm", "version": "0.11.0"}})
    write_result(compared / "a.json", compared / "a.lock.json", OUT_A)
    write_result(compared / "b.json", compared / "b.lock.json", OUT_B)
    found["result-1"] = [json.loads((compared / name).read_text()) for name in ("a.json", "b.json")]
    record("diff-1", "diff", "a.lock.json", "b.lock.json", cwd=compared)
    record("comparison-1", "compare", "a.json", "b.json", codes=(0, 1), cwd=compared)
    record("explain-1", "explain", "a.json", "b.json", codes=(0, 1), cwd=compared)
    record("scope-audit-1", "scope", "--audit", codes=(0, 1))  # the comparison just recorded

    private, public = _keypair(base)
    (project / "harness.py").write_text(HARNESS)
    runs = []
    for where, extra in (("res", ("--sign-key", str(private))), ("s0", ("--shard", "0/2@J1")),
                         ("s1", ("--shard", "1/2@J1"))):
        (project / where).mkdir()
        runs.append(record("run-3", "run", "--gate", "off", "--watch", "0", "--result", f"{where}/*", *extra,
                           "--", sys.executable, "harness.py", f"{where}/scores.json", f"{where}/samples.jsonl"))
    # the sidecar beside each result is the run record too, with `result` and `previous` added
    found["run-3"].append(json.loads((project / "res" / "scores.json.execsys.json").read_text()))
    (project / "later.txt").write_text("made without execsys run\n")
    record("attach-1", "attach", "later.txt")
    record("receipt-verify", "receipt", "verify", "res/scores.json.execsys.intoto.json", "--key", str(public))
    record("shards-1", "shards", runs[1]["id"], runs[2]["id"])
    record("shards-1", "shards", "s0/scores.json.execsys.intoto.json", "s1/scores.json.execsys.intoto.json")

    signed = _signed_model_project(base / "signed")  # a model shipping a model-signing bundle, and its key
    record("identity-2", "pin", cwd=signed)
    record("verify-1", "verify", cwd=signed)
    (signed / "model" / "weights.bin").write_bytes(b"edited")
    record("verify-1", "verify", codes=(1,), cwd=signed)

    (base / "doctor.json").write_text(json.dumps(found["doctor-1"][0]))
    (base / "pin.json").write_text(json.dumps(found["identity-2"][0]))
    record("fleet-2", "fleet", str(base / "doctor.json"), str(base / "pin.json"), codes=(0, 1))
    record("node-check-1", "doctor", "--node-check", "npd", codes=(0, 1, 2))
    from execsys.fleet import host_facts  # what the Ansible module returns for this host

    found["facts-1"] = [json.loads(json.dumps(host_facts(str(project / "execsys.toml"))))]
    trusted = run_cli("trust", cwd=project, env=env)
    assert trusted.returncode == 0, trusted.stderr
    found["trust-1"] = [json.loads((base / "data" / "trust.json").read_text())]

    cases = project / "cases.jsonl"
    cases.write_text("".join(json.dumps({"id": f"c{i}", "prompt": f"Item {i} says", "max_tokens": 8,
                                         "expected": "x"}) + "\n" for i in range(6)))
    endpoint = FlipEndpoint().start()
    try:
        record("probe-2", "probe", "session", "--endpoint", endpoint.base_url, "--cases", "cases.jsonl",
               codes=(0, 1))
        made = run_cli("plan", "new", "--arms", "A", "B", "--cases", "cases.jsonl", "--out", "plan.json",
                       cwd=project, env=env)
        assert made.returncode == 0, made.stderr
        found.setdefault("plan-1", []).append(json.loads((project / "plan.json").read_text()))
        record("plan-run-2", "plan", "run", "plan.json", "--arm", f"A={endpoint.base_url}",
               "--arm", f"B={endpoint.base_url}", "--log", "plan-log.jsonl", codes=(0, 1))
        header = (project / "plan-log.jsonl").read_text().splitlines()[0]
        found.setdefault("plan-log-1", []).append(json.loads(header))
        record("plan-check-1", "plan", "check", "plan.json", codes=(0, 1))
    finally:
        endpoint.stop()

    grading = base / "grader"
    grading.mkdir()
    (grading / "grade.py").write_text(GRADER)
    (grading / "execsys.toml").write_text(f'[grader]\ncommand = "{sys.executable} grade.py"\n')
    trusted = run_cli("trust", cwd=grading, env=env)  # the test's own grader command: its author trusts it
    assert trusted.returncode == 0, trusted.stderr
    (grading / "graded.jsonl").write_text("".join(json.dumps({"id": cid, "prompt": f"question {cid}", "output": "4",
                                                              "expected": "4"}) + "\n" for cid in ("a", "b", "c")))
    graded = record("probe-grader-2", "probe", "grader", "--cases", "graded.jsonl", codes=(1,), cwd=grading)
    assert [case["id"] for case in graded["flipped"]] == ["b"] and (graded["m"], graded["n"]) == (2, 3)
    # the probe-run rows the session probe and the grader probe opened, as the ledger holds them
    exported = run_cli("ledger", "export", "--kind", "probe-run", "--json", cwd=project, env=env)
    assert exported.returncode == 0, exported.stderr
    found["probe-run-1"] = [row["body"] for row in exported.json()]
    assert sorted(body["parameters"]["axis"] for body in found["probe-run-1"]) == ["grader", "session"]
    return found


def test_every_schema_file_is_a_valid_json_schema() -> None:
    assert _schema_files(), "docs/schemas/ holds no schema"
    for path in _schema_files():
        schema = json.loads(path.read_text())
        jsonschema.Draft202012Validator.check_schema(schema)
        assert schema["$id"] == path.name and schema["description"], path.name


@pytest.mark.parametrize("path", _schema_files(), ids=lambda path: path.name.removesuffix(".schema.json"))
def test_real_outputs_validate_against_their_schema(path: Path, outputs: dict[str, list[dict]]) -> None:
    name = path.name.removesuffix(".schema.json")
    assert outputs.get(name), f"no real output is checked against {path.name}: produce one in outputs()"
    validator = jsonschema.Draft202012Validator(json.loads(path.read_text()))
    for data in outputs[name]:
        errors = sorted(validator.iter_errors(data), key=lambda error: list(error.absolute_path))
        assert not errors, "\n".join(f"{path.name}: {'/'.join(map(str, e.absolute_path))}: {e.message}"
                                     for e in errors[:10])


def test_a_schema_names_the_version_it_describes(outputs: dict[str, list[dict]]) -> None:
    """``identity-2.schema.json`` is execsys.identity/2: the file name and the record's version agree, and a
    new version of a record (a new "schema" string) fails the validation until its own file is added."""
    for path in _schema_files():
        const = json.loads(path.read_text())["properties"].get("schema", {}).get("const")
        if const is None:
            continue  # receipt verify's output carries no schema field
        record, version = const.removeprefix("execsys.").split("/")
        assert path.name == f"{record}-{version}.schema.json"


def test_a_changed_record_fails_its_schema(outputs: dict[str, list[dict]]) -> None:
    """The schemas are not vacuous: a record of another version, or missing a field, or with a field
    retyped, is refused."""
    validator = jsonschema.Draft202012Validator(json.loads((SCHEMAS / "run-3.schema.json").read_text()))
    run = outputs["run-3"][0]
    assert validator.is_valid(run)
    assert not validator.is_valid({**run, "schema": "execsys.run/2"})
    assert not validator.is_valid({key: value for key, value in run.items() if key != "verdict"})
    assert not validator.is_valid({**run, "doctor": {**{k: v for k, v in run["doctor"].items() if k != "gate_mode"},
                                                     "gate": run["doctor"]["gate_mode"]}})  # the /2 spelling
    assert not validator.is_valid({**run, "exit_code": "0"})
    grader = jsonschema.Draft202012Validator(json.loads((SCHEMAS / "probe-grader-2.schema.json").read_text()))
    graded = outputs["probe-grader-2"][0]
    assert grader.is_valid(graded)
    assert not grader.is_valid({**graded, "schema": "execsys.probe-grader/1"})
    assert not grader.is_valid({**graded, "flipped": [{k: v for k, v in graded["flipped"][0].items() if k != "verdicts"}]})
    assert not grader.is_valid({**graded, "agreement": "most"})
    probe_run = jsonschema.Draft202012Validator(json.loads((SCHEMAS / "probe-run-1.schema.json").read_text()))
    opened = outputs["probe-run-1"][0]
    assert probe_run.is_valid(opened) and not probe_run.is_valid({**opened, "match": "not a digest"})
    assert not probe_run.is_valid({key: value for key, value in opened.items() if key != "parameters"})
    identity = jsonschema.Draft202012Validator(json.loads((SCHEMAS / "identity-2.schema.json").read_text()))
    lock = outputs["identity-2"][0]
    components = {key: value for key, value in lock["components"].items() if key != "grader"}
    assert not identity.is_valid({**lock, "components": components})


# -- the CLI reference is --help ---------------------------------------------------------------------

def _gen_cli():
    """docs/gen_cli.py, loaded from its file: it is the site's build script, not an installed module."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("gen_cli", ROOT / "docs" / "gen_cli.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("argv", [["--help"], ["doctor", "--help"], ["plan", "run", "--help"],
                                  ["probe", "restart", "--help"], ["ledger", "show", "--help"]])
def test_the_cli_reference_holds_each_command_help_verbatim(argv: list[str]) -> None:
    page = _gen_cli().render()
    shown = run_cli(*argv, env={"COLUMNS": _gen_cli().WIDTH})
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.strip() in page, f"execsys {' '.join(argv)} differs from docs/gen_cli.py's page"


def test_the_cli_reference_has_a_section_for_every_command() -> None:
    from execsys.cli import COMMANDS
    from execsys.commands import probe

    page = _gen_cli().render()
    for name in COMMANDS:
        assert f"## `execsys {name}`" in page, name
    for axis in probe.AXIS_LINES:
        assert f"## `execsys probe {axis}`" in page, axis


# -- mkdocs build --strict ---------------------------------------------------------------------------

def test_the_site_builds_strictly_and_offline(tmp_path: Path) -> None:
    mkdocs = shutil.which("mkdocs", path=os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]]))
    if mkdocs is None:
        pytest.fail("mkdocs is not installed: it is in the test extra (pip install -e '.[test]')")
    site = tmp_path / "site"
    # a copy of the sources, so the build writes nothing into the repository
    source = tmp_path / "src"
    for part in ("docs", "examples", "screenshots"):
        shutil.copytree(ROOT / part, source / part, ignore=shutil.ignore_patterns("__pycache__"))
    for part in ("mkdocs.yml", "QUICKSTART.md"):
        shutil.copy2(ROOT / part, source / part)
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "http_proxy": "http://127.0.0.1:9",
           "https_proxy": "http://127.0.0.1:9", "HTTP_PROXY": "http://127.0.0.1:9", "HTTPS_PROXY": "http://127.0.0.1:9"}
    done = subprocess.run([mkdocs, "build", "--strict", "-f", str(source / "mkdocs.yml"), "-d", str(site)],
                          capture_output=True, text=True, env=env, cwd=source, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "WARNING" not in done.stderr, done.stderr
    cli_page = (site / "reference" / "cli" / "index.html").read_text()
    assert "--node-check" in cli_page and "execsys probe restart" in cli_page
    assert (site / "schemas" / "identity-2.schema.json").is_file()
    assert (site / "QUICKSTART" / "index.html").is_file() and (site / "examples" / "make_tiny_model.py").is_file()
    front = (site / "index.html").read_text()
    assert "fonts.googleapis.com" not in front and "fonts.gstatic.com" not in front


# -- one schema file per record schema, at its current version ---------------------------------------


def test_every_current_record_schema_in_the_code_has_its_file() -> None:
    """Each ``"execsys.NAME/N"`` the package writes, at its newest N, has docs/schemas/NAME-N.schema.json:
    a record that gains a version (``execsys.run/3``) fails here until its schema is written."""
    import re

    pattern = re.compile(r'"execsys\.([a-z-]+)/(\d+)"')
    newest: dict[str, int] = {}
    for folder in ("execsys", "doctor", "probes", "tui"):
        for path in (ROOT / folder).rglob("*.py"):
            for name, version in pattern.findall(path.read_text(encoding="utf-8")):
                newest[name] = max(newest.get(name, 0), int(version))
    from execsys.identity import SCHEMA  # built from a constant, not a literal

    name, version = SCHEMA.removeprefix("execsys.").split("/")
    newest[name] = max(newest.get(name, 0), int(version))
    assert {"run", "probe", "probe-grader", "probe-run", "identity", "doctor", "scope"} <= set(newest), newest
    missing = sorted(f"{name}-{version}.schema.json" for name, version in newest.items()
                     if not (SCHEMAS / f"{name}-{version}.schema.json").is_file())
    assert not missing, f"no schema file for the current record version: {missing}"
