"""Probe cases (probes/cases.py): what is refused and with which line, what `--n`/`--sample` choose,
the order each pass sends, and the cases' digest checked against `b3sum`.

Real files throughout: JSON Lines written to tmp_path, a FIFO, a directory; the digest's golden value is
b3sum's over the canonical lines written out by hand.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from execsys.probes.cases import (
    MAX_LINE_BYTES,
    Case,
    CaseFile,
    CaseView,
    cases_digest,
    load_cases,
    pass_indices,
    pass_order,
    select,
)

from execsys.errors import InputError


def write_lines(path: Path, *lines: str | bytes) -> Path:
    path.write_bytes(b"".join((line if isinstance(line, bytes) else line.encode()) + b"\n" for line in lines))
    return path


def refused(path: Path) -> str:
    with pytest.raises(InputError) as caught:
        load_cases(path)
    return str(caught.value)


@pytest.mark.parametrize(("line", "problem"), [
    ('[1, 2]', 'a case must be a JSON object, got list'),
    ('"text"', 'a case must be a JSON object, got str'),
    ('{"prompt": "x"}', 'every case needs an "id" (a string or integer)'),
    ('{"id": true, "prompt": "x"}', 'every case needs an "id" (a string or integer)'),
    ('{"id": "", "prompt": "x"}', 'every case needs an "id" (a string or integer)'),
    ('{"id": 1.5, "prompt": "x"}', 'every case needs an "id" (a string or integer)'),
    ('{"id": "q", "prompt": "x", "messages": []}', 'case q needs exactly one of "prompt" or "messages"'),
    ('{"id": "q"}', 'case q needs exactly one of "prompt" or "messages"'),
    ('{"id": "q", "prompt": 5}', 'case q: "prompt" must be a string'),
    ('{"id": "q", "prompt": null}', 'case q: "prompt" must be a string'),
    ('{"id": "q", "messages": ["hi"]}', 'case q: "messages" must be a list of objects'),
    ('{"id": "q", "messages": {"role": "user"}}', 'case q: "messages" must be a list of objects'),
    ('{"id": "q", "prompt": "x", "max_tokens": 0}', 'case q: "max_tokens" must be a positive integer'),
    ('{"id": "q", "prompt": "x", "max_tokens": -3}', 'case q: "max_tokens" must be a positive integer'),
    ('{"id": "q", "prompt": "x", "max_tokens": true}', 'case q: "max_tokens" must be a positive integer'),
    ('{"id": "q", "prompt": "x", "max_tokens": "8"}', 'case q: "max_tokens" must be a positive integer'),
    ('{"id": "q", "prompt": "x", "params": [1]}', 'case q: "params" must be an object'),
    ('{"id": "q", "prompt": "x", "params": "t=0"}', 'case q: "params" must be an object'),
    ('{"id": "q", "prompt"', 'not valid JSON (Expecting \':\' delimiter)'),
])
def test_a_bad_case_is_refused_naming_the_file_and_line(tmp_path: Path, line: str, problem: str) -> None:
    path = write_lines(tmp_path / "cases.jsonl", '{"id": "ok", "prompt": "fine"}', "", line)
    assert refused(path) == f"{path} line 3: {problem}"  # the blank line 2 still counts


def test_what_a_valid_case_keeps(tmp_path: Path) -> None:
    path = write_lines(
        tmp_path / "cases.jsonl",
        '{"id": 0, "prompt": "p0"}',
        '{"id": "chat", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1, '
        '"params": {"temperature": 0}, "expected": 0}',
        '{"id": "x", "prompt": "", "params": null, "expected": false}',
        '{"id": "y", "prompt": "p", "params": []}',
    )
    cases = load_cases(path)
    assert [case.id for case in cases] == ["0", "chat", "x", "y"]  # file order; an integer id as text
    assert [case.kind for case in cases] == ["completion", "chat", "completion", "completion"]
    assert cases[0].to_json() == {"id": "0", "prompt": "p0"}
    assert cases[1].to_json() == {"id": "chat", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1,
                                  "params": {"temperature": 0}, "expected": 0}
    assert cases[2].to_json() == {"id": "x", "prompt": "", "expected": False}
    assert cases[3].params == {} and cases[3].to_json() == {"id": "y", "prompt": "p"}


def test_files_that_are_not_cases_are_refused(tmp_path: Path) -> None:
    missing = tmp_path / "missing.jsonl"
    assert refused(missing) == f"cases file {missing}: not found"
    assert refused(tmp_path) == f"cases file {tmp_path}: is a directory, expected a JSON Lines file"
    fifo = tmp_path / "cases.fifo"
    os.mkfifo(fifo)
    assert refused(fifo) == f"cases file {fifo}: is a FIFO (named pipe), not a regular file"
    looped = tmp_path / "looped.jsonl"
    looped.symlink_to(looped)
    assert refused(looped) == f"cases file {looped}: Too many levels of symbolic links"
    empty = write_lines(tmp_path / "empty.jsonl", "", "   ")
    assert refused(empty) == (f"cases file {empty}: no cases (expected JSON Lines with \"id\" and \"prompt\" "
                              "or \"messages\")")
    latin = write_lines(tmp_path / "latin.jsonl", '{"id": "a", "prompt": "ok"}', b'{"id": "b", "prompt": "\xe9"}')
    assert refused(latin) == f"{latin} line 2: not UTF-8 text"
    duplicate = write_lines(tmp_path / "dup.jsonl", '{"id": "a", "prompt": "1"}', '{"id": "b", "prompt": "2"}',
                            '{"id": "a", "prompt": "3"}')
    assert refused(duplicate) == f"{duplicate}: case id 'a' appears more than once"
    as_number = write_lines(tmp_path / "dup2.jsonl", '{"id": 7, "prompt": "1"}', '{"id": "7", "prompt": "2"}')
    assert refused(as_number) == f"{as_number}: case id '7' appears more than once"


def test_a_line_longer_than_the_limit_is_not_a_case(tmp_path: Path) -> None:
    path = tmp_path / "big.jsonl"
    prompt_at_limit = "x" * (MAX_LINE_BYTES - len('{"id": "b", "prompt": ""}\n'))
    write_lines(path, '{"id": "a", "prompt": "1"}', '{"id": "b", "prompt": "' + prompt_at_limit + '"}')
    assert [len(case.prompt or "") for case in load_cases(path)] == [1, len(prompt_at_limit)]  # exactly 16 MiB
    write_lines(path, '{"id": "a", "prompt": "1"}', '{"id": "b", "prompt": "' + prompt_at_limit + 'x"}')
    assert refused(path) == f"{path} line 2: longer than 16 MiB; a case is one JSON object per line"


def test_a_case_file_reads_each_case_back_by_position(tmp_path: Path) -> None:
    lines = [json.dumps({"id": f"c{i}", "prompt": "é" * i}) for i in range(6)]
    path = write_lines(tmp_path / "cases.jsonl", lines[0], "", *lines[1:])
    cases = CaseFile(path)
    assert len(cases) == 6
    assert [cases[i].prompt for i in range(6)] == ["é" * i for i in range(6)]
    assert cases[-1].id == "c5"
    view = cases[1:5:2]
    assert isinstance(view, CaseView) and [case.id for case in view] == ["c1", "c3"]
    assert [case.id for case in view[1:]] == ["c3"] and view[0].id == "c1" and len(view) == 2
    cases.close()
    assert cases[2].id == "c2"  # closed: still readable, by opening the file again
    cases.close()


def test_a_cases_file_replaced_under_the_probe_is_still_read_as_validated(tmp_path: Path) -> None:
    """An editor saves by writing a new file and renaming it over the old one: the probe keeps sending
    the cases it validated (and counted in its digest), not the new file's."""
    path = write_lines(tmp_path / "cases.jsonl", '{"id": "a", "prompt": "first"}', '{"id": "b", "prompt": "2"}')
    cases = CaseFile(path)
    replacement = write_lines(tmp_path / "new.jsonl", '{"id": "a", "prompt": "other"}', '{"id": "b", "prompt": "3"}')
    os.replace(replacement, path)
    assert [case.prompt for case in cases] == ["first", "2"]
    cases.close()


def test_closing_a_case_file_releases_its_descriptor(tmp_path: Path) -> None:
    """The TUI opens a case file per probe it starts: each close must give its descriptor back."""
    path = write_lines(tmp_path / "cases.jsonl", '{"id": "a", "prompt": "1"}')

    def open_descriptors() -> int:
        return len(os.listdir("/proc/self/fd"))

    before = open_descriptors()
    files = [CaseFile(path) for _ in range(5)]
    assert open_descriptors() == before + 5
    for case_file in files:
        case_file.close()
    assert open_descriptors() == before


def test_a_cases_file_changed_under_the_probe_is_named(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "cases.jsonl", '{"id": "a", "prompt": "1"}', '{"id": "b", "prompt": "2"}')
    cases = CaseFile(path)
    path.write_bytes(b'{"id": "a", "prompt": "1"}\n{"id": "b", "prompt" "2"}\n')  # same length, not JSON
    assert cases[0].id == "a"
    with pytest.raises(InputError, match=f"cases file {path} changed while the probe was reading it"):
        cases[1]
    cases.close()


def test_n_takes_the_first_cases_and_a_seed_a_sample_in_file_order(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "cases.jsonl", *(json.dumps({"id": f"c{i}", "prompt": str(i)}) for i in range(10)))
    listed = load_cases(path)
    on_disk = CaseFile(path)
    for cases in (listed, on_disk):
        assert [c.id for c in select(cases, None)] == [f"c{i}" for i in range(10)]
        assert [c.id for c in select(cases, 10)] == [f"c{i}" for i in range(10)]
        assert [c.id for c in select(cases, 25)] == [f"c{i}" for i in range(10)]
        assert [c.id for c in select(cases, 3)] == ["c0", "c1", "c2"]
        assert [c.id for c in select(cases, 1)] == ["c0"]
        # the sample --sample 7 --n 4 draws: sorted(random.Random(7).sample(range(10), 4)) = [2, 5, 6, 9]
        assert [c.id for c in select(cases, 4, 7)] == ["c2", "c5", "c6", "c9"]
        for bad in (0, -1):
            with pytest.raises(InputError, match="^--n must be at least 1$"):
                select(cases, bad)
    assert isinstance(select(listed, 3), list) and isinstance(select(listed, 4, 7), list)
    assert isinstance(select(on_disk, 3), CaseView) and isinstance(select(on_disk, 4, 7), CaseView)
    # every case of a file stays on disk (a 50,000-case probe must not parse them all up front)
    assert select(on_disk, None) is on_disk and select(on_disk, 25) is on_disk
    on_disk.close()


@pytest.mark.skipif(shutil.which("b3sum") is None, reason="b3sum is installed by scripts/test.sh")
def test_the_cases_digest_is_b3sum_of_the_canonical_lines(tmp_path: Path) -> None:
    cases = [Case("a", prompt="2+2?", expected="4"),
             Case("b", messages=[{"role": "user", "content": "é"}], max_tokens=8, params={"temperature": 0})]
    spelled = ('{"expected":"4","id":"a","prompt":"2+2?"}\n'
               '{"id":"b","max_tokens":8,"messages":[{"content":"é","role":"user"}],"params":{"temperature":0}}\n')
    done = subprocess.run(["b3sum", "--no-names"], input=spelled.encode(), capture_output=True, timeout=30,
                          check=True)
    assert cases_digest(cases) == done.stdout.decode().strip()
    assert cases_digest(cases[:1]) != cases_digest(cases) != cases_digest(cases[::-1])


def test_pass_zero_is_file_order_and_each_later_pass_another_order() -> None:
    assert list(pass_indices(6, 11, 0)) == [0, 1, 2, 3, 4, 5]
    # the shuffles are a contract: a resumed probe must send the order its first run recorded. Each is
    # random.Random(seed * 1_000_003 + pass).shuffle(range(6)), computed outside execsys
    assert list(pass_indices(6, 11, 1)) == [0, 5, 4, 3, 2, 1]
    assert list(pass_indices(6, 11, 2)) == [3, 1, 0, 4, 5, 2]
    assert list(pass_indices(6, 12, 1)) == [4, 5, 2, 3, 0, 1]
    assert list(pass_indices(1, 11, 3)) == [0] and list(pass_indices(0, 11, 1)) == []
    for count in (2, 3):
        for seed in range(40):
            orders = [list(pass_indices(count, seed, k)) for k in range(6)]
            assert orders[0] == list(range(count))
            for k in range(1, 6):
                assert orders[k] != orders[k - 1], (count, seed, k)  # never the same order twice running
                assert sorted(orders[k]) == list(range(count))  # every case once


def test_pass_order_sends_the_cases_in_that_order() -> None:
    cases = [Case(f"c{i}", prompt=str(i)) for i in range(6)]
    assert [c.id for c in pass_order(cases, 11, 1)] == ["c0", "c5", "c4", "c3", "c2", "c1"]
    assert [c.id for c in pass_order(cases, 11, 0)] == [f"c{i}" for i in range(6)]
