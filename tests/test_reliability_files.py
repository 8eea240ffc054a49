"""Files execsys writes and reads: never replace a special file, never read one without bound.

Writes (`pin --out`, `init --force`, every `write_output`) refuse a FIFO, a device
or a directory at the target and write a symlink through to its file; reads of a
declaration, lock or env file refuse FIFOs and devices (a FIFO never blocks) and
files over their cap; a declaration with a BOM, `nan`, a TOML date or deep
nesting is accepted or a clear error.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from execsys.errors import InputError
from execsys.fsutil import read_bounded, read_json_object, write_output


@pytest.fixture
def fifo(tmp_path: Path) -> Path:
    path = tmp_path / "a.fifo"
    os.mkfifo(path)
    return path


def test_write_output_refuses_a_fifo_and_leaves_it_a_fifo(fifo: Path) -> None:
    with pytest.raises(InputError, match="FIFO.*not a regular file.*cannot write the lock"):
        write_output(fifo, "{}", "the lock")
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
    assert [p.name for p in fifo.parent.iterdir()] == [fifo.name]  # no temp file left behind


def test_write_output_writes_a_symlink_through_to_its_file(tmp_path: Path) -> None:
    real = tmp_path / "store" / "lock.json"
    real.parent.mkdir()
    real.write_text("old")
    link = tmp_path / "lock.json"
    link.symlink_to(real)
    write_output(link, "new", "the lock")
    assert link.is_symlink() and real.read_text() == "new"
    dangling = tmp_path / "dangling.json"
    dangling.symlink_to(tmp_path / "store" / "created.json")
    write_output(dangling, "made", "the lock")
    assert dangling.is_symlink() and (tmp_path / "store" / "created.json").read_text() == "made"


def test_write_output_refuses_a_symlink_to_a_fifo(tmp_path: Path, fifo: Path) -> None:
    link = tmp_path / "out.json"
    link.symlink_to(fifo)
    with pytest.raises(InputError, match="not a regular file"):
        write_output(link, "x", "the plan")
    assert link.is_symlink() and stat.S_ISFIFO(os.stat(link).st_mode)


def test_pin_out_and_init_force_refuse_a_fifo(cli, tmp_path: Path, fifo: Path, ledger_path: Path) -> None:
    result = cli("pin", "--out", str(fifo), cwd=tmp_path, timeout=60)
    assert result.returncode == 2 and "not a regular file" in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    result = cli("init", "--force", "--config", str(fifo), cwd=tmp_path, timeout=60)
    assert result.returncode == 2 and "not a regular file" in result.stderr, result.stderr
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)


def test_read_bounded_refuses_fifo_device_directory_and_oversize(tmp_path: Path, fifo: Path) -> None:
    for path, words in ((fifo, "FIFO"), (Path("/dev/zero"), "character device"), (tmp_path, "directory")):
        with pytest.raises(InputError, match=words):
            read_bounded(path, 1 << 20, "declaration")  # returns at once: never blocks on the FIFO
    big = tmp_path / "big.toml"
    big.write_bytes(b"#" * 2048)
    with pytest.raises(InputError, match="more than a declaration may have"):
        read_bounded(big, 1024, "declaration")
    assert read_bounded(big, 4096, "declaration") == b"#" * 2048
    with pytest.raises(FileNotFoundError):
        read_bounded(tmp_path / "missing", 10, "lock")


def test_a_result_file_is_sniffed_without_blocking_on_a_fifo(tmp_path: Path, fifo: Path) -> None:
    """What compare and the harness adapters use to tell what a file is: the object, or None."""
    results = tmp_path / "results_2026-12-01T00-00-00.json"
    results.write_text('{"results": {}, "configs": {}}')
    assert read_json_object(results, "lm-eval results file") == {"results": {}, "configs": {}}
    assert read_json_object(fifo, "lm-eval results file") is None  # returns at once: nothing writes to it
    assert read_json_object(tmp_path, "lm-eval results file") is None
    assert read_json_object(tmp_path / "nosuch.json", "lm-eval results file") is None
    for text in ("[1, 2]", "not json", "\udcff", "[" * 100_000):
        results.write_text(text, errors="surrogateescape")
        assert read_json_object(results, "lm-eval results file") is None, text[:10]
    results.write_text('{"a": 1}')
    assert read_json_object(results, "lm-eval results file", limit=4) is None


@pytest.mark.timeout(60)
@pytest.mark.parametrize("source", ["fifo", "/dev/zero"])
def test_special_files_as_declaration_lock_and_env_file_are_clear_errors(cli, tmp_path: Path, fifo: Path,
                                                                          ledger_path: Path, source: str) -> None:
    special = str(fifo) if source == "fifo" else source
    results = [cli("pin", "--config", special, "--out", str(tmp_path / "x.json"), cwd=tmp_path, timeout=50),
               cli("verify", "--lock", special, cwd=tmp_path, timeout=50)]
    (tmp_path / "execsys.toml").write_text(f'[runtime]\nenv_file = "{special}"\n')
    results.append(cli("pin", "--out", str(tmp_path / "y.json"), cwd=tmp_path, timeout=50))
    for result in results:
        assert result.returncode == 2, result.stderr
        assert "not a regular file" in result.stderr and "Traceback" not in result.stderr
    doctor = cli("doctor", "--json", "--env-file", special, cwd=tmp_path, timeout=50)
    assert doctor.returncode in (0, 1), doctor.stderr
    finding = next(f for f in doctor.json()["hazards"] if f["id"] == "unread-env-config")
    assert finding["status"] == "error" and "not a regular file" in finding["summary"]


@pytest.mark.parametrize(("text", "expected"), [
    ("\ufeff[budget]\ntemperature = 0.5\n", None),
    ("[budget]\ntemperature = nan\n", "'budget.temperature' must be a finite number"),
    ("[budget]\ntop_p = inf\n", "'budget.top_p' must be a finite number"),
    ("[tools]\nversions = { grep = 1979-05-27T07:32:00Z }\n", "'tools.versions.grep' is a TOML date/time"),
    ("[tools]\nversions = { grep = 07:32:00 }\n", "is a TOML date/time"),
    ("x = " + "[" * 3000 + "]" * 3000 + "\n", "nested too deeply"),
    ("[" + ".".join(["a"] * 5000) + "]\n", "nested more than 32 levels"),
    ("[model]\nname = {" + "a = {" * 40 + "}" * 41 + "\n", "nested"),
])
def test_declaration_values_json_cannot_hold_are_clear_errors(cli, tmp_path: Path, ledger_path: Path, text: str,
                                                              expected: str | None) -> None:
    (tmp_path / "execsys.toml").write_text(text, encoding="utf-8")
    result = cli("pin", "--json", cwd=tmp_path, timeout=60)
    if expected is None:
        assert result.returncode == 0, result.stderr
        assert result.json()["components"]["budget"]["declared"]["temperature"] == 0.5
    else:
        assert result.returncode == 2, result.stderr
        assert expected in result.stderr and "Traceback" not in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1
        assert not (tmp_path / "execsys.lock.json").exists()


def test_a_lock_nested_100000_deep_is_a_clear_error(cli, tmp_path: Path, ledger_path: Path) -> None:
    lock = tmp_path / "deep.lock.json"
    lock.write_text('{"components": ' + "[" * 100_000 + "]" * 100_000 + "}")
    for args in (["verify", "--lock", str(lock)], ["diff", str(lock), str(lock)]):
        result = cli(*args, cwd=tmp_path, timeout=60)
        assert result.returncode == 2, (args, result.stderr)
        assert "nested too deeply" in result.stderr and "Traceback" not in result.stderr


def test_a_write_that_must_not_follow_symlinks_replaces_a_planted_link_and_spares_its_target(
        tmp_path: Path) -> None:
    from execsys.fsutil import atomic_write_json, prepare_write

    victim = tmp_path / "victim.txt"
    victim.write_text("someone else's\n")
    victim.chmod(0o4755)
    link = tmp_path / "out.execsys.json"
    link.symlink_to(victim)
    atomic_write_json(link, {"ours": True}, follow_symlinks=False)
    assert victim.read_text() == "someone else's\n"
    assert not link.is_symlink() and link.read_text() == '{\n  "ours": true\n}\n'
    assert not link.stat().st_mode & 0o4000  # the mode of whatever the link pointed at is not copied
    # prepared and discarded: nothing there, nothing left; prepared and committed: the new bytes
    with prepare_write(tmp_path / "never.json", b"x", follow_symlinks=False):
        pass
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.execsys.json", "victim.txt"]


def test_pin_out_dev_null_refuses_before_it_records_anything(cli, tmp_path: Path, ledger_path: Path) -> None:
    result = cli("pin", "--out", "/dev/null", cwd=tmp_path, timeout=60)
    assert result.returncode == 2, result.stderr
    [line] = result.stderr.strip().splitlines()
    assert "/dev/null" in line and "character device" in line and "cannot write the lock" in line
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)
    from execsys.ledger import Ledger

    if ledger_path.exists():  # "nothing written": no identity row for a lock that was never written
        with Ledger.open(ledger_path) as ledger:
            assert ledger.count(kind="identity") == 0


def test_attach_with_an_unusable_ledger_writes_no_sidecar(cli, tmp_path: Path, ledger_path: Path) -> None:
    assert cli("pin", cwd=tmp_path, timeout=60).returncode == 0
    result_file = tmp_path / "scores.json"
    result_file.write_text('{"score": 1}\n')
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"not a database\n" * 100)
    result = cli("attach", str(result_file), "--ledger", str(garbage), cwd=tmp_path, timeout=60)
    assert result.returncode == 2, result.stderr
    [line] = result.stderr.strip().splitlines()
    assert str(garbage) in line and "not a usable execsys ledger" in line
    assert not (tmp_path / "scores.json.execsys.json").exists()
    assert garbage.read_bytes() == b"not a database\n" * 100


def _one_refusal(result, *words: str) -> str:
    """The documented refusal: exit 2, one line on stderr naming the problem, no traceback."""
    assert result.returncode == 2, (result.returncode, result.stderr)
    [line] = result.stderr.strip().splitlines()
    for word in words:
        assert word in line, line
    return line


@pytest.mark.timeout(120)
@pytest.mark.parametrize("name", ["cases.jsonl", "samples_gsm8k_2026-12-01T10-00-00.jsonl", "log.json", "/dev/zero"])
def test_probe_grader_refuses_a_fifo_or_device_as_its_cases_at_once(cli, tmp_path: Path, ledger_path: Path,
                                                                    name: str) -> None:
    """Plain cases, an lm-eval samples file and an Inspect log are each read bounded: a FIFO never
    blocks the read and /dev/zero is never read to the end (both hung before)."""
    (tmp_path / "execsys.toml").write_text('[grader]\ncommand = "echo correct"\n')
    special = Path(name) if name.startswith("/") else tmp_path / name
    if not name.startswith("/"):
        os.mkfifo(special)
    result = cli("probe", "grader", "--trust", "--cases", str(special), cwd=tmp_path, timeout=60)
    _one_refusal(result, str(special), "not a regular file")
    assert name.startswith("/") or stat.S_ISFIFO(os.stat(special).st_mode)
    assert not ledger_path.exists() or _ledger_count(ledger_path) == 0  # nothing recorded


def _ledger_count(path: Path) -> int:
    from execsys.ledger import Ledger

    with Ledger.open(path) as ledger:
        return ledger.count()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("source", ["fifo", "/dev/zero"])
def test_scope_contract_refuses_a_fifo_or_device_before_measuring(cli, tmp_path: Path, fifo: Path,
                                                                 ledger_path: Path, source: str) -> None:
    assert cli("pin", cwd=tmp_path, timeout=60).returncode == 0
    special = str(fifo) if source == "fifo" else source
    result = cli("scope", "--contract", special, cwd=tmp_path, timeout=60)
    _one_refusal(result, f"contract {special}", "not a regular file")
    assert stat.S_ISFIFO(os.stat(fifo).st_mode) and stat.S_ISCHR(os.stat("/dev/zero").st_mode)


@pytest.mark.timeout(120)
def test_compare_refuses_a_fifo_named_like_an_lm_eval_samples_file(cli, tmp_path: Path, ledger_path: Path) -> None:
    """compare reads the samples beside an lm-eval results file for its per-case outcomes: a FIFO of
    that name is refused at once (it hung before), naming the samples file."""
    stamp = "2026-12-01T10-00-00"
    results = []
    for side in ("a", "b"):
        (tmp_path / side).mkdir()
        path = tmp_path / side / f"results_{stamp}.json"
        path.write_text('{"results": {"gsm8k": {"exact_match,none": 0.5}}, '
                        '"configs": {"gsm8k": {"metric_list": [{"metric": "exact_match"}]}}}')
        results.append(str(path))
    samples = tmp_path / "a" / f"samples_gsm8k_{stamp}.jsonl"
    os.mkfifo(samples)
    (tmp_path / "b" / f"samples_gsm8k_{stamp}.jsonl").write_text('{"doc_id": 0, "exact_match": 1}\n')
    result = cli("compare", *results, cwd=tmp_path, timeout=60)
    _one_refusal(result, str(samples), "FIFO", "not a regular file")


@pytest.mark.timeout(120)
@pytest.mark.parametrize("source", ["fifo", "/dev/zero"])
def test_node_check_env_from_a_fifo_or_device_is_could_not_check_at_once(cli, tmp_path: Path, fifo: Path,
                                                                         ledger_path: Path, source: str) -> None:
    """npd's "unknown" (exit 2) with the reason on its one line, well inside the watchdog: /dev/zero
    was read until memory or the 45 s watchdog ran out."""
    import time

    special = fifo.name if source == "fifo" else source  # relative: the reason fits npd's 80-byte line
    started = time.monotonic()
    result = cli("doctor", "--node-check", "npd", "--env-from", special, cwd=tmp_path, timeout=60)
    assert time.monotonic() - started < 30
    assert result.returncode == 2, (result.stdout, result.stderr)
    [line] = result.stdout.strip().splitlines()
    assert line.startswith("unknown:") and "not a regular file" in line and "Traceback" not in result.stderr


def test_a_symlink_loop_as_an_output_is_refused_and_kept(cli, tmp_path: Path, ledger_path: Path) -> None:
    """``fleet --prom LOOP`` was exit 3 (RuntimeError from resolve()); ``scope --contract LOOP`` replaced
    the user's link with a file. A loop has nothing to write through to: exit 2, one line, the links kept."""
    (tmp_path / "loop1").symlink_to("loop2")
    (tmp_path / "loop2").symlink_to("loop1")
    with pytest.raises(InputError, match="symlink loop"):
        write_output(tmp_path / "loop1", "x", "the plan")
    assert cli("pin", cwd=tmp_path, timeout=60).returncode == 0
    for args in (["fleet", "execsys.lock.json", "--prom", "loop1"], ["scope", "--contract", "loop1"]):
        result = cli(*args, cwd=tmp_path, timeout=60)
        _one_refusal(result, "loop1", "symlink loop")
        assert os.readlink(tmp_path / "loop1") == "loop2" and os.readlink(tmp_path / "loop2") == "loop1"


def _glob_without_end(root: Path) -> Path:
    """Two links back to their own directory: glob's ``**`` follows each, 2**40 paths deep."""
    root.mkdir()
    (root / "a").symlink_to(".")
    (root / "b").symlink_to(".")
    return root


def test_a_result_glob_without_end_is_said_within_its_budget(tmp_path: Path) -> None:
    import time

    from execsys.run.results import check_pattern_finishes

    loops = _glob_without_end(tmp_path / "loops")
    started = time.monotonic()
    with pytest.raises(InputError, match="still matching after 1 s"):
        check_pattern_finishes(str(loops / "**" / "*.json"), budget_s=1)
    assert time.monotonic() - started < 5
    check_pattern_finishes(str(tmp_path / "*.json"), budget_s=1)  # an ordinary glob passes


@pytest.mark.timeout(120)
def test_run_refuses_a_result_glob_without_end_before_anything_runs(cli, tmp_path: Path, ledger_path: Path) -> None:
    """It walked for ever before the harness started, printing nothing; now exit 2, one line, after
    the check's 20 s budget, the harness never started and nothing recorded."""
    loops = _glob_without_end(tmp_path / "loops")
    result = cli("run", "--gate", "off", "--result", str(loops / "**" / "*.json"), "--", "touch", "ran",
                 cwd=tmp_path, timeout=100)
    _one_refusal(result, "still matching after 20 s")
    assert not (tmp_path / "ran").exists()
    assert not ledger_path.exists() or _ledger_count(ledger_path) == 0
