"""The plan's schedule as tables, in process: what an arm name may be, how ARM=VALUE flags parse, which
host is this machine, the counterbalance each design gives, how a plan file is read back (each
malformed field named), and what registration and its verification refuse.

Every row is something a user would notice: a plan refused for a good arm name (or accepted for a bad
one), an error that names the wrong field, a schedule that is not balanced, a plan edited after
registration that still runs. tests/test_plan_golden.py pins the digests and seeded orders byte for
byte; tests/test_plan.py runs ``execsys plan`` end to end.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from execsys.canonical import content_id
from execsys.errors import InputError, UsageError
from execsys.ledger import Ledger
from execsys.plan import schedule
from execsys.plan.schedule import (
    NO_PLAN_IDENTITY,
    NewPlanOptions,
    Plan,
    check_arms,
    is_local,
    load_plan,
    load_registered_cases,
    make_plan,
    new_plan,
    parse_assignments,
    placement_flag,
    plan_from_json,
    plan_record_id,
    register_plan,
    unpinned_reason,
    validate_schedule,
    verify_registration,
)
from execsys.sources import no_identity_reason


def write_cases(path: Path, ids: list[str], *, without_expected: tuple[str, ...] = ()) -> Path:
    rows = []
    for case_id in ids:
        row: dict = {"id": case_id, "prompt": f"Item {case_id} says", "max_tokens": 8}
        if case_id not in without_expected:
            row["expected"] = "nothing"
        rows.append(json.dumps(row))
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    return path


@pytest.fixture
def ledger(tmp_path):
    with Ledger.open(tmp_path / "ledger.sqlite3") as opened:
        yield opened


# -- why a plan counts toward no scope, and which host is this machine ---------------------------------

def test_the_reason_without_a_lock_path() -> None:
    assert unpinned_reason(None) == "no pinned identity: this plan will not count toward any scope"


def test_the_reason_names_the_lock_looked_for(tmp_path) -> None:
    lock = tmp_path / "execsys.lock.json"
    assert unpinned_reason(lock) == no_identity_reason(lock, "this plan")
    assert unpinned_reason(str(lock)) == (f"no pinned identity (looked for {lock}): this plan will not count "
                                          "toward any scope")


@pytest.mark.parametrize(("host", "local"), [
    pytest.param(None, True, id="none"),
    pytest.param("", True, id="empty"),
    pytest.param("local", True, id="local"),
    pytest.param("localhost", True, id="loopback-name"),
    pytest.param("127.0.0.1", True, id="ipv4-loopback"),
    pytest.param("::1", True, id="ipv6-loopback"),
    pytest.param("gpu1", False, id="a-named-machine"),
    pytest.param("127.0.0.2", False, id="another-loopback-address-is-not-listed"),
    pytest.param("LOCAL", False, id="exact-spelling-only"),
])
def test_is_local(host, local) -> None:
    assert is_local(host) is local


def test_the_record_id_is_the_digest_s_first_24_characters() -> None:
    assert plan_record_id("0123456789abcdef" * 4) == "plan-0123456789abcdef01234567"


# -- the plan's own questions ------------------------------------------------------------------------

def test_first_counts_other_and_the_expected_sequence() -> None:
    plan = Plan(["A", "B"], [{"case": "x", "first": "B"}, {"case": "y", "first": "B"}, {"case": "z", "first": "A"}],
                "abba", 0, {}, {})
    assert plan.first_counts() == {"A": 1, "B": 2}
    assert (plan.other("A"), plan.other("B")) == ("B", "A")
    assert plan.expected_sequence() == [("x", "B"), ("x", "A"), ("y", "B"), ("y", "A"), ("z", "A"), ("z", "B")]


def test_an_arm_that_never_goes_first_still_counts_zero() -> None:
    plan = Plan(["A", "B"], [{"case": "x", "first": "A"}], "abba", 0, {}, {})
    assert plan.first_counts() == {"A": 1, "B": 0}


@pytest.mark.parametrize(("placement", "remote"), [
    pytest.param({}, None, id="unplaced-is-this-machine"),
    pytest.param({"A": "localhost"}, None, id="loopback-name-is-this-machine"),
    pytest.param({"A": "gpu1"}, "gpu1", id="a-named-machine"),
    pytest.param({"B": "gpu1"}, None, id="the-other-arm-s-machine"),
])
def test_the_machine_an_arm_runs_on(placement, remote) -> None:
    plan = Plan(["A", "B"], [], "abba", 0, placement, {})
    assert plan.remote_host("A") == remote


def test_the_cases_file(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "plans").mkdir()
    (tmp_path / "plans" / "cases.jsonl").write_text("")
    (tmp_path / "here.jsonl").write_text("")

    def plan(source):
        return Plan(["A", "B"], [], "abba", 0, {}, {"file": source})

    assert plan(None).cases_file(tmp_path / "plans") is None
    assert plan("").cases_file() is None
    assert plan("cases.jsonl").cases_file() == Path("cases.jsonl")  # no plan directory: as written
    assert plan("cases.jsonl").cases_file(tmp_path / "plans") == tmp_path / "plans" / "cases.jsonl"
    assert plan("here.jsonl").cases_file(tmp_path / "plans") == Path("here.jsonl")  # found from here first
    absolute = str(tmp_path / "missing.jsonl")
    assert plan(absolute).cases_file(tmp_path / "plans") == Path(absolute)


def test_the_digest_body_carries_a_reason_only_when_there_is_one() -> None:
    plan = new_plan(["A", "B"], ["x"], identity_reason="no lock here")
    assert plan.digest_body()["identity_reason"] == "no lock here"
    assert "identity_reason" not in new_plan(["A", "B"], ["x"]).digest_body()
    body = plan.to_json()
    assert (body["digest"], body["registered_at"]) == (plan.digest, None)
    assert plan.record_id == f"plan-{plan.digest[:24]}"


# -- ARM=VALUE flags ---------------------------------------------------------------------------------

def test_assignments_parse() -> None:
    assert parse_assignments(["A=gpu1", "B=http://h:8000/v1?x=1"], "--arm", "URL", "A=http://...") == {
        "A": "gpu1", "B": "http://h:8000/v1?x=1"}
    assert parse_assignments(None, "--arm", "URL", "e") == {}
    assert parse_assignments(["A=1", "A=2"], "--arm-params", "JSON", "e") == {"A": "2"}  # the last wins


@pytest.mark.parametrize("item", ["A", "=gpu1", "A=", "="])
def test_an_assignment_without_arm_or_value_is_refused(item) -> None:
    with pytest.raises(UsageError) as err:
        parse_assignments([item], "--placement", "HOST", "A=gpu1")
    assert str(err.value) == f"--placement {item!r}: expected ARM=HOST (e.g. A=gpu1)"


def test_an_arm_placed_twice_is_refused_when_once() -> None:
    with pytest.raises(UsageError) as err:
        parse_assignments(["A=gpu1", "A=gpu2"], "--placement", "HOST", "A=gpu1", once=True)
    assert str(err.value) == "--placement: arm 'A' placed twice"
    assert parse_assignments(["A=gpu1", "B=gpu1"], "--placement", "HOST", "e", once=True) == {"A": "gpu1", "B": "gpu1"}


def test_check_arms_names_the_unknown_arm_and_the_list() -> None:
    check_arms({"A": 1, "B": 2}, ["A", "B"], lambda arm, value: "x ")
    with pytest.raises(InputError) as err:
        check_arms({"A": 1, "C": 3}, ["A", "B"], lambda arm, value: f"--arm '{arm}={value}': ")
    assert str(err.value) == "--arm 'C=3': unknown arm 'C' (arms: A, B)"
    with pytest.raises(UsageError) as usage:
        check_arms({"C": 3}, ["A", "B"], lambda arm, value: "", error=UsageError, listed="the plan's arms")
    assert str(usage.value) == "unknown arm 'C' (the plan's arms: A, B)"


def test_placement_flag() -> None:
    assert placement_flag("C", "gpu1") == "--placement 'C=gpu1': "


# -- the schedule's inputs ---------------------------------------------------------------------------

TWO_ARMS = "--arms takes exactly two distinct arm names (e.g. --arms A B)"


@pytest.mark.parametrize("arms", [["A"], ["A", "B", "C"], ["A", "A"], []])
def test_exactly_two_distinct_arms(arms) -> None:
    with pytest.raises(UsageError) as err:
        validate_schedule(arms, "abba", {})
    assert str(err.value) == TWO_ARMS


@pytest.mark.parametrize(("name", "ok"), [
    pytest.param("A", True, id="one-letter"),
    pytest.param("7", True, id="one-digit"),
    pytest.param("base_v1.2-q4", True, id="underscore-dot-dash-inside"),
    pytest.param("a" * 64, True, id="64-characters"),
    pytest.param("a" * 65, False, id="65-characters"),
    pytest.param("_a", False, id="starts-with-underscore"),
    pytest.param("-a", False, id="starts-with-dash"),
    pytest.param(".a", False, id="starts-with-dot"),
    pytest.param("a b", False, id="a-space"),
    pytest.param("a/b", False, id="a-slash"),
    pytest.param("a=b", False, id="an-equals-sign"),
    pytest.param("", False, id="empty"),
    pytest.param("a\n", False, id="a-trailing-newline"),
])
def test_arm_names(name, ok) -> None:
    arms = [name, "other"]
    if ok:
        validate_schedule(arms, "abba", {})
        return
    with pytest.raises(UsageError) as err:
        validate_schedule(arms, "abba", {})
    assert str(err.value) == f"arm name {name!r}: letters, digits, '_', '.', '-' only"


def test_the_second_arm_name_is_checked_too() -> None:
    with pytest.raises(UsageError, match="arm name 'b b'"):
        validate_schedule(["A", "b b"], "abba", {})


@pytest.mark.parametrize("design", ["abba", "random"])
def test_the_known_designs(design) -> None:
    validate_schedule(["A", "B"], design, {})


def test_an_unknown_design() -> None:
    with pytest.raises(UsageError) as err:
        validate_schedule(["A", "B"], "ABBA", {})
    assert str(err.value) == "--design 'ABBA': expected one of abba, random"


def test_placement_of_an_unknown_arm() -> None:
    with pytest.raises(InputError) as err:
        validate_schedule(["A", "B"], "abba", {"C": "gpu1"})
    assert str(err.value) == "placement names unknown arm 'C' (arms: A, B)"
    with pytest.raises(InputError) as flagged:
        validate_schedule(["A", "B"], "abba", {"C": "gpu1"}, placement_flag)
    assert str(flagged.value) == "--placement 'C=gpu1': unknown arm 'C' (arms: A, B)"


# -- the schedule ------------------------------------------------------------------------------------

@pytest.mark.parametrize("design", ["abba", "random"])
@pytest.mark.parametrize("n", [1, 2, 3, 4, 5])
def test_each_arm_first_in_half_the_cases(design, n) -> None:
    for seed in range(8):
        counts = new_plan(["A", "B"], [f"c{i}" for i in range(n)], design, seed).first_counts()
        assert sorted(counts.values()) == [n // 2, n - n // 2]


def test_abba_starts_with_either_arm_by_the_seed() -> None:
    starts = {new_plan(["A", "B"], ["x", "y", "z", "w"], "abba", seed).order[0]["first"] for seed in range(12)}
    assert starts == {"A", "B"}
    for seed in range(12):
        firsts = [e["first"] for e in new_plan(["A", "B"], ["x", "y", "z", "w", "v"], "abba", seed).order]
        x, y = firsts[0], "B" if firsts[0] == "A" else "A"
        assert firsts == [x, y, y, x, x]


def test_the_odd_case_of_a_random_design_goes_to_either_arm_by_the_seed() -> None:
    majority = set()
    for seed in range(16):
        counts = new_plan(["A", "B"], ["x", "y", "z"], "random", seed).first_counts()
        majority.add(max(counts, key=lambda arm: counts[arm]))
    assert majority == {"A", "B"}


def test_the_random_design_is_not_abba() -> None:
    orders = {tuple(e["first"] for e in new_plan(["A", "B"], [f"c{i}" for i in range(8)], "random", s).order)
              for s in range(6)}
    assert len(orders) > 2  # abba gives only two first-arm patterns


def test_plan_from_case_objects_and_ids() -> None:
    @dataclass
    class Item:
        id: str

    plan = new_plan(["A", "B"], [Item("x"), "y", 3], "abba", 0)
    assert sorted(e["case"] for e in plan.order) == ["3", "x", "y"]
    assert plan.cases == {"file": None, "digest": content_id(["x", "y", "3"]), "n": 3}
    assert (plan.design, plan.seed, plan.placement, plan.identity) == ("abba", 0, {}, None)
    assert plan.digest == plan.compute_digest()


def test_the_defaults_are_abba_and_seed_0() -> None:
    assert new_plan(["A", "B"], ["x", "y", "z"]).to_json() == new_plan(["A", "B"], ["x", "y", "z"], "abba", 0).to_json()


def test_placement_identity_and_its_reason() -> None:
    placed = {"A": "gpu1"}
    plan = new_plan(("A", "B"), ["x"], placement=placed, identity="f" * 64, identity_reason="ignored")
    assert (plan.arms, plan.placement, plan.identity, plan.identity_reason) == (["A", "B"], placed, "f" * 64, None)
    placed["A"] = "gpu2"
    assert plan.placement == {"A": "gpu1"}  # a copy: the caller's dict is not the plan's
    unpinned = new_plan(["A", "B"], ["x"], identity_reason="no lock")
    assert (unpinned.identity, unpinned.identity_reason) == (None, "no lock")


def test_duplicate_ids_and_no_cases_are_refused() -> None:
    with pytest.raises(InputError) as dup:
        new_plan(["A", "B"], ["x", "y", "x"])
    assert str(dup.value) == "case ids must be unique"
    with pytest.raises(InputError) as empty:
        new_plan(["A", "B"], [])
    assert str(empty.value) == "a plan needs at least one case"


def test_bad_inputs_are_refused_before_the_cases() -> None:
    with pytest.raises(UsageError, match="--design"):
        new_plan(["A", "B"], [], "zigzag")


def test_a_plan_from_a_cases_file(tmp_path) -> None:
    from execsys.probes.cases import cases_digest, load_cases

    path = write_cases(tmp_path / "cases.jsonl", ["c0", "c1", "c2"])
    plan = new_plan(["A", "B"], path, "random", 4)
    assert plan.cases == {"file": str(path), "digest": cases_digest(load_cases(path)), "n": 3}
    assert sorted(e["case"] for e in plan.order) == ["c0", "c1", "c2"]
    assert new_plan(["A", "B"], str(path), "random", 4).digest == plan.digest


def test_an_empty_cases_file_is_refused(tmp_path) -> None:
    path = tmp_path / "cases.jsonl"
    path.write_text("")
    with pytest.raises(InputError):
        new_plan(["A", "B"], path)


# -- a plan file read back ---------------------------------------------------------------------------

def good_json(**changes) -> dict:
    data = new_plan(["A", "B"], ["x", "y"], "abba", 2, {"A": "gpu1"}, identity="e" * 64).to_json()
    data.update(changes)
    return data


def test_a_plan_round_trips() -> None:
    original = new_plan(["A", "B"], ["x", "y"], "abba", 2, {"A": "gpu1"}, identity_reason="why")
    original.registered_at = "2026-01-01T00:00:00.000Z"
    read = plan_from_json(json.loads(json.dumps(original.to_json())))
    assert read == original
    assert read.compute_digest() == read.digest


@pytest.mark.parametrize("data", [None, [], "plan", {"schema": "execsys.plan/2"}, {"arms": ["A", "B"]}])
def test_not_a_plan(data) -> None:
    with pytest.raises(InputError) as err:
        plan_from_json(data, "p.json")
    assert str(err.value) == "p.json: not an execsys.plan/1 plan"


@pytest.mark.parametrize(("name", "value", "expected"), [
    pytest.param("arms", None, "a list of two arm names", id="arms-missing"),
    pytest.param("arms", "AB", "a list of two arm names", id="arms-a-string"),
    pytest.param("order", None, 'a list of {"case": ID, "first": ARM} objects', id="order-missing"),
    pytest.param("order", {"case": "x"}, 'a list of {"case": ID, "first": ARM} objects', id="order-an-object"),
    pytest.param("order", [{"case": "x"}], 'a list of {"case": ID, "first": ARM} objects', id="order-without-first"),
    pytest.param("order", ["x"], 'a list of {"case": ID, "first": ARM} objects', id="order-of-strings"),
    pytest.param("design", None, "a design name", id="design-missing"),
    pytest.param("design", 1, "a design name", id="design-a-number"),
    pytest.param("seed", None, "a seed", id="seed-missing"),
    pytest.param("placement", ["A"], "an object of ARM: HOST", id="placement-a-list"),
    pytest.param("cases", "cases.jsonl", "an object", id="cases-a-string"),
    pytest.param("digest", None, "a digest", id="digest-missing"),
    pytest.param("digest", 7, "a digest", id="digest-a-number"),
    pytest.param("identity_reason", 3, "a sentence", id="reason-a-number"),
])
def test_a_malformed_field_is_named(name, value, expected) -> None:
    data = good_json()
    if value is None:
        del data[name]
    else:
        data[name] = value
    with pytest.raises(InputError) as err:
        plan_from_json(data, "p.json")
    assert str(err.value) == f"p.json: malformed plan: field '{name}' is missing or not {expected}"


def test_the_default_where_is_plan() -> None:
    with pytest.raises(InputError) as err:
        plan_from_json({})
    assert str(err.value) == "plan: not an execsys.plan/1 plan"
    data = good_json()
    del data["design"]
    with pytest.raises(InputError) as field:
        plan_from_json(data)
    assert str(field.value) == "plan: malformed plan: field 'design' is missing or not a design name"


def test_the_optional_fields_default() -> None:
    data = good_json()
    for name in ("placement", "cases", "identity_reason", "identity", "registered_at"):
        data.pop(name, None)
    plan = plan_from_json(data)
    assert (plan.placement, plan.cases, plan.identity_reason, plan.identity, plan.registered_at) == (
        {}, {}, None, None, None)
    nulls = plan_from_json(good_json(placement=None, cases=None, identity_reason=None))
    assert (nulls.placement, nulls.cases, nulls.identity_reason) == ({}, {}, None)


def test_the_fields_read() -> None:
    plan = plan_from_json(good_json(seed="s", registered_at="2026-01-01T00:00:00Z", identity_reason="r",
                                    order=[{"case": 1, "first": "A"}]))
    assert plan.seed == "s" and plan.registered_at == "2026-01-01T00:00:00Z" and plan.identity_reason == "r"
    assert plan.order == [{"case": "1", "first": "A"}]
    assert plan.identity == "e" * 64 and plan.placement == {"A": "gpu1"} and plan.design == "abba"
    assert plan.digest == good_json()["digest"]


@pytest.mark.parametrize("arms", [["A"], ["A", "B", "C"]])
def test_a_plan_file_with_other_than_two_arms(arms) -> None:
    with pytest.raises(InputError) as err:
        plan_from_json(good_json(arms=arms, order=[]), "p.json")
    assert str(err.value) == "p.json: a plan has exactly two arms"


def test_an_order_naming_an_unknown_arm() -> None:
    with pytest.raises(InputError) as err:
        plan_from_json(good_json(order=[{"case": "x", "first": "A"}, {"case": "y", "first": "C"}]), "p.json")
    assert str(err.value) == "p.json: order names unknown arm 'C' (arms: A, B)"


def test_placement_naming_an_unknown_arm() -> None:
    with pytest.raises(InputError) as err:
        plan_from_json(good_json(placement={"C": "gpu1"}), "p.json")
    assert str(err.value) == "p.json: placement names unknown arm 'C' (arms: A, B)"


def test_load_plan(tmp_path) -> None:
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(good_json()))
    assert load_plan(path).digest == good_json()["digest"]
    with pytest.raises(InputError) as missing:
        load_plan(tmp_path / "none.json")
    assert str(missing.value) == f"{tmp_path / 'none.json'}: no such plan file"
    path.write_text("{not json")
    with pytest.raises(InputError, match=r"plan\.json: not a readable JSON plan \("):
        load_plan(path)
    path.write_bytes(b"\xff\xfe")
    with pytest.raises(InputError, match="not a readable JSON plan"):
        load_plan(path)
    path.write_text(json.dumps({"schema": "other"}))
    with pytest.raises(InputError) as other:
        load_plan(path)
    assert str(other.value) == f"{path}: not an execsys.plan/1 plan"


def test_a_plan_that_is_not_a_regular_file_is_named_as_the_plan(tmp_path) -> None:
    with pytest.raises(InputError) as err:
        load_plan(tmp_path)
    assert str(err.value) == f"plan {tmp_path}: is a directory, not a regular file"


# -- registration ------------------------------------------------------------------------------------

def test_register_stamps_the_time_and_records_the_plan(ledger) -> None:
    plan = new_plan(["A", "B"], ["x", "y"], identity="f" * 64)
    assert register_plan(plan, ledger) is plan
    assert plan.registered_at
    record = ledger.get(plan.record_id)
    assert (record.kind, record.identity, record.body["digest"]) == ("plan", "f" * 64, plan.digest)
    assert record.body["registered_at"] == plan.registered_at


def test_registering_the_same_plan_again_keeps_the_first_registration(ledger) -> None:
    first = register_plan(new_plan(["A", "B"], ["x", "y"]), ledger)
    again = new_plan(["A", "B"], ["x", "y"])
    register_plan(again, ledger)
    assert again.registered_at == first.registered_at
    assert ledger.count(kind="plan") == 1


def test_an_edited_plan_is_not_registered(ledger) -> None:
    plan = new_plan(["A", "B"], ["x", "y"])
    plan.seed = 9
    with pytest.raises(InputError) as err:
        register_plan(plan, ledger)
    assert str(err.value) == "the plan's digest does not match its content: it was edited"
    assert ledger.count() == 0


def test_a_record_of_another_kind_under_the_plan_s_id_is_not_its_registration(ledger) -> None:
    plan = new_plan(["A", "B"], ["x", "y"])
    ledger.append("note", {"digest": plan.digest, "registered_at": "2020-01-01T00:00:00Z"}, record_id="other-id")
    ledger.append("note", {"digest": "z", "registered_at": "2020-01-01T00:00:00Z"}, record_id=plan.record_id + "x")
    register_plan(plan, ledger)  # the unique prefix match is another record: registered anew under its own id
    assert plan.registered_at != "2020-01-01T00:00:00Z"
    assert ledger.get(plan.record_id).kind == "plan"


def test_verify_returns_the_record_and_its_time(ledger) -> None:
    plan = register_plan(new_plan(["A", "B"], ["x", "y"]), ledger)
    assert verify_registration(plan, ledger) == (plan.record_id, plan.registered_at)
    unstamped = new_plan(["A", "B"], ["x", "y"])  # registered_at not yet read back: the ledger's is taken
    assert verify_registration(unstamped, ledger) == (plan.record_id, plan.registered_at)


def test_verify_refuses_an_edited_plan(ledger) -> None:
    plan = register_plan(new_plan(["A", "B"], ["x", "y"]), ledger)
    registered = plan.digest
    plan.placement = {"A": "gpu9"}
    with pytest.raises(InputError) as err:
        verify_registration(plan, ledger, "p.json")
    actual = plan.compute_digest()
    assert str(err.value) == (f"p.json was edited after registration: its content digest is {actual[:16]}, "
                              f"the registered digest {registered[:16]}")


def test_verify_refuses_an_unregistered_plan(ledger) -> None:
    plan = new_plan(["A", "B"], ["x", "y"])
    with pytest.raises(InputError) as err:
        verify_registration(plan, ledger)
    assert str(err.value) == (f"plan is not registered in the ledger {ledger.path} "
                              "(register it with 'execsys plan new')")


@pytest.mark.parametrize(("kind", "same_digest"), [("note", True), ("plan", False)])
def test_verify_refuses_a_record_that_is_not_this_plan_s(ledger, kind, same_digest) -> None:
    plan = new_plan(["A", "B"], ["x", "y"])
    ledger.append(kind, {"digest": plan.digest if same_digest else "0" * 64}, record_id=plan.record_id)
    with pytest.raises(InputError) as err:
        verify_registration(plan, ledger, "p.json")
    assert str(err.value) == f"p.json: ledger record {plan.record_id} is not this plan's registration"


def test_verify_refuses_a_registration_time_that_differs(ledger) -> None:
    plan = register_plan(new_plan(["A", "B"], ["x", "y"]), ledger)
    true_time = plan.registered_at
    plan.registered_at = "2020-01-01T00:00:00.000Z"
    with pytest.raises(InputError) as err:
        verify_registration(plan, ledger, "p.json")
    assert str(err.value) == f"p.json: registered_at 2020-01-01T00:00:00.000Z differs from the ledger's {true_time}"


def test_verify_falls_back_to_the_record_s_creation_time(ledger) -> None:
    plan = new_plan(["A", "B"], ["x", "y"])
    ledger.append("plan", {"digest": plan.digest}, record_id=plan.record_id)
    record_id, registered_at = verify_registration(plan, ledger)
    assert (record_id, registered_at) == (plan.record_id, ledger.get(plan.record_id).created_at)
    again = new_plan(["A", "B"], ["x", "y"])
    register_plan(again, ledger)
    assert again.registered_at == ledger.get(plan.record_id).created_at


def test_the_registration_time_is_the_record_s_own_not_its_creation(ledger) -> None:
    plan = new_plan(["A", "B"], ["x", "y"])
    ledger.append("plan", {"digest": plan.digest, "registered_at": "2020-01-01T00:00:00.000Z"},
                  record_id=plan.record_id)
    assert verify_registration(plan, ledger) == (plan.record_id, "2020-01-01T00:00:00.000Z")
    again = new_plan(["A", "B"], ["x", "y"])
    assert register_plan(again, ledger).registered_at == "2020-01-01T00:00:00.000Z"
    assert ledger.count(kind="plan") == 1


# -- the registered cases ----------------------------------------------------------------------------

def test_the_registered_cases_by_id(tmp_path) -> None:
    path = write_cases(tmp_path / "cases.jsonl", ["c0", "c1", "c2"])
    plan = new_plan(["A", "B"], path)
    assert sorted(load_registered_cases(plan, path)) == ["c0", "c1", "c2"]


def test_cases_changed_since_registration_are_refused(tmp_path) -> None:
    path = write_cases(tmp_path / "cases.jsonl", ["c0", "c1"])
    plan = new_plan(["A", "B"], path)
    write_cases(path, ["c0", "c1"], without_expected=("c1",))
    with pytest.raises(InputError) as err:
        load_registered_cases(plan, path)
    assert str(err.value) == f"cases file {path} changed since the plan was registered (digest mismatch)"


def test_cases_lacking_planned_ones_are_refused_naming_five(tmp_path) -> None:
    ids = [f"c{i}" for i in range(8)]
    plan = new_plan(["A", "B"], ids)  # from ids: no digest to hold the file to
    path = write_cases(tmp_path / "cases.jsonl", ["c0"])
    with pytest.raises(InputError) as err:
        load_registered_cases(plan, path)
    missing = [e["case"] for e in plan.order if e["case"] != "c0"]
    assert str(err.value) == f"cases file {path} lacks planned case(s) {', '.join(missing[:5])}"
    full = write_cases(tmp_path / "full.jsonl", ids + ["extra"])
    assert len(load_registered_cases(plan, full)) == 9


def test_a_plan_from_a_file_without_a_digest_is_not_held_to_one(tmp_path) -> None:
    path = write_cases(tmp_path / "cases.jsonl", ["c0", "c1"])
    plan = new_plan(["A", "B"], path)
    plan.cases = {"file": str(path), "digest": None, "n": 2}
    write_cases(path, ["c0", "c1"], without_expected=("c0",))
    assert sorted(load_registered_cases(plan, path)) == ["c0", "c1"]


# -- execsys plan new --------------------------------------------------------------------------------

@dataclass
class FakeLock:
    id: str


def test_options_default_and_copy() -> None:
    options = NewPlanOptions.from_sources(None, None, arms=["A", "B"], cases=["x", "y"])
    assert options == NewPlanOptions(arms=("A", "B"), cases=("x", "y"), design="abba", seed=0, placement={},
                                     identity=None, identity_reason=unpinned_reason(None), ledger=None)


def test_options_identity_from_the_flag_over_the_lock() -> None:
    given = NewPlanOptions.from_sources(None, FakeLock("L" * 64), arms=["A", "B"], cases="c.jsonl", identity="I")
    assert (given.identity, given.identity_reason, given.cases) == ("I", None, "c.jsonl")
    locked = NewPlanOptions.from_sources(None, FakeLock("L" * 64), arms=["A", "B"], cases=Path("c.jsonl"),
                                         lock_path="x.lock.json")
    assert (locked.identity, locked.identity_reason, locked.cases) == ("L" * 64, None, Path("c.jsonl"))
    none = NewPlanOptions.from_sources(None, None, arms=["A", "B"], cases=["x"], lock_path="x.lock.json")
    assert (none.identity, none.identity_reason) == (None, unpinned_reason("x.lock.json"))


def test_options_take_the_flags(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    options = NewPlanOptions.from_sources(None, None, arms=("A", "B"), cases=["x"], design="random", seed=7,
                                          placement={"B": "gpu1"}, ledger="~/l.sqlite3")
    assert (options.design, options.seed, options.placement, options.ledger) == (
        "random", 7, {"B": "gpu1"}, tmp_path / "l.sqlite3")


def test_options_refuse_bad_inputs_as_the_flags_spell_them() -> None:
    with pytest.raises(InputError) as err:
        NewPlanOptions.from_sources(None, None, arms=["A", "B"], cases=["x"], placement={"C": "gpu1"})
    assert str(err.value) == "--placement 'C=gpu1': unknown arm 'C' (arms: A, B)"
    with pytest.raises(UsageError, match="--design 'x'"):
        NewPlanOptions.from_sources(None, None, arms=["A", "B"], cases=["x"], design="x")
    with pytest.raises(UsageError, match="exactly two"):
        NewPlanOptions.from_sources(None, None, arms=["A"], cases=["x"])


def test_make_plan_registers_and_lists_cases_without_an_answer(tmp_path, ledger) -> None:
    path = write_cases(tmp_path / "cases.jsonl", ["c0", "c1", "c2"], without_expected=("c2", "c0"))
    options = NewPlanOptions.from_sources(None, None, arms=["A", "B"], cases=path, seed=3)
    made = make_plan(options, ledger)
    assert made.record_id == made.plan.record_id == ledger.get(made.plan.record_id).id
    assert made.without_expected == ["c0", "c2"]
    assert made.to_json() == made.plan.to_json()
    assert made.plan.identity_reason == unpinned_reason(None)
    assert made.plan.digest == new_plan(["A", "B"], path, "abba", 3, identity_reason=unpinned_reason(None)).digest


def test_make_plan_keeps_the_placement(ledger) -> None:
    options = NewPlanOptions.from_sources(None, None, arms=["A", "B"], cases=["x", "y"], placement={"B": "gpu1"})
    made = make_plan(options, ledger)
    assert made.plan.placement == {"B": "gpu1"}
    assert ledger.get(made.record_id).body["placement"] == {"B": "gpu1"}


def test_make_plan_from_ids_into_the_named_ledger(tmp_path) -> None:
    options = NewPlanOptions.from_sources(None, None, arms=["A", "B"], cases=["x", "y"], identity="f" * 64,
                                          ledger=tmp_path / "own.sqlite3")
    made = make_plan(options)
    assert made.without_expected == []
    with Ledger.open(tmp_path / "own.sqlite3") as own:
        assert own.get(made.record_id).body["identity"] == "f" * 64


def test_the_constants() -> None:
    assert schedule.SCHEMA == "execsys.plan/1"
    assert NO_PLAN_IDENTITY == ("the plan was registered without a pinned identity: this plan will not count "
                                "toward any scope")
