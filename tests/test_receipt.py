"""Receipts (issue 31): every ``execsys run`` and ``attach`` leaves an in-toto Statement in a DSSE
envelope beside each result, and ``execsys receipt verify`` checks it with only the files, the
receipt and a public key. Keys are real ones made here; envelopes are checked again with the
in-toto project's own libraries (securesystemslib, in-toto-attestation), not with execsys's code."""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
import sys
from pathlib import Path

import blake3
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

from tests.fixtures.common import run_cli

PREDICATE_TYPE = "https://execsys.dev/run/v1"
PAYLOAD_TYPE = "application/vnd.in-toto+json"
# a small real harness: writes a score file and a per-case file, as lm-eval's results and samples are
HARNESS = ("import json, sys\n"
           "open(sys.argv[1], 'w').write(json.dumps({'score': 0.5}) + '\\n')\n"
           "open(sys.argv[2], 'w').write(''.join(json.dumps({'case': i, 'ok': i % 2 == 0}) + '\\n' "
           "for i in range(4)))\n")


def _keypair(where: Path, name: str = "signer", kind: str = "ed25519") -> tuple[Path, Path]:
    """A private key (PKCS#8 PEM, unencrypted) and its public key (SubjectPublicKeyInfo PEM), made now."""
    if kind == "ed25519":
        key = ed25519.Ed25519PrivateKey.generate()
    elif kind == "ecdsa":
        key = ec.generate_private_key(ec.SECP256R1())
    else:
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    private, public = where / f"{name}.pem", where / f"{name}.pub"
    private.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                          serialization.NoEncryption()))
    public.write_bytes(key.public_key().public_bytes(serialization.Encoding.PEM,
                                                     serialization.PublicFormat.SubjectPublicKeyInfo))
    return private, public


def _run(tmp_path: Path, *args: str, env: dict | None = None, gate: str = "off"):
    """``execsys run --json`` of the harness, writing res/scores.json and res/samples.jsonl."""
    res = tmp_path / "res"
    res.mkdir(exist_ok=True)
    result = run_cli("run", "--json", "--gate", gate, "--watch", "0", "--result", "res/*", *args, "--",
                     sys.executable, "-c", HARNESS, str(res / "scores.json"), str(res / "samples.jsonl"),
                     cwd=tmp_path, env=env, timeout=180)
    assert result.stdout.strip(), result.stderr
    return result, json.loads(result.stdout)


def _receipt(result: Path) -> Path:
    return result.with_name(result.name + ".execsys.intoto.json")


def _statement(envelope: dict) -> dict:
    return json.loads(base64.b64decode(envelope["payload"]))


def _verify(receipt: Path, *args: str, cwd: Path):
    return run_cli("receipt", "verify", str(receipt), *args, cwd=cwd)


def _one_line(result) -> str:
    lines = (result.stdout + result.stderr).strip().splitlines()
    assert len(lines) == 1, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    return lines[0]


def test_a_signed_run_leaves_a_receipt_anyone_can_verify_with_the_files_and_the_public_key(tmp_path, ledger_path):
    private, public = _keypair(tmp_path)
    result, record = _run(tmp_path, "--sign-key", str(private), gate="fail")
    assert result.returncode == 0, result.stderr
    scores, samples = tmp_path / "res" / "scores.json", tmp_path / "res" / "samples.jsonl"
    assert sorted(Path(r["path"]) for r in record["results"]) == [samples, scores]
    assert sorted(record["receipts"]) == sorted(str(_receipt(p)) for p in (scores, samples))
    envelope = json.loads(_receipt(scores).read_text())
    assert envelope["payloadType"] == PAYLOAD_TYPE and len(envelope["signatures"]) == 1

    # the envelope and the Statement, read back by the in-toto project's own libraries
    from google.protobuf import json_format
    from in_toto_attestation.v1 import statement_pb2
    from in_toto_attestation.v1.statement import Statement
    from securesystemslib.dsse import Envelope
    from securesystemslib.signer import SSlibKey

    key = SSlibKey.from_crypto(serialization.load_pem_public_key(public.read_bytes()))
    wrapped = Envelope.from_dict(json.loads(_receipt(scores).read_text()))
    assert list(wrapped.verify([key], 1)) == [key.keyid]
    # and the signature over DSSE's pre-authentication encoding, checked by cryptography alone
    signature = base64.b64decode(envelope["signatures"][0]["sig"])
    serialization.load_pem_public_key(public.read_bytes()).verify(signature, wrapped.pae())  # type: ignore[call-arg]
    statement = _statement(envelope)
    Statement.copy_from_pb(json_format.ParseDict(statement, statement_pb2.Statement())).validate()
    assert statement["_type"] == "https://in-toto.io/Statement/v1" and statement["predicateType"] == PREDICATE_TYPE
    subjects = {s["name"]: s["digest"] for s in statement["subject"]}
    for path in (scores, samples):
        data = path.read_bytes()
        assert subjects[path.name] == {"sha256": hashlib.sha256(data).hexdigest(),
                                       "blake3": blake3.blake3(data).hexdigest()}
    predicate = statement["predicate"]
    lock = tmp_path / "execsys.lock.json"
    assert predicate["id"] == record["id"] and predicate["verdict"] == "clean" and predicate["exit_code"] == 0
    assert predicate["identity"]["id"] == json.loads(lock.read_text())["id"]
    assert predicate["identity"]["lock_digest"]["sha256"] == hashlib.sha256(lock.read_bytes()).hexdigest()
    assert predicate["doctor"]["gate_mode"] == "fail" and predicate["doctor"]["verdict"] and predicate["drift"] == [] and predicate["attached_after"] is False
    assert predicate["verify_after"]["verdict"] == "same-system"

    verified = _verify(_receipt(scores), "--key", str(public), "--lock", str(lock), cwd=tmp_path)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    line = _one_line(verified)
    assert "verified: 2 subjects" in line and key.keyid in line and "signature verified" in line
    assert "is the lock's" in line
    assert f"2 receipts, signed by {key.keyid}" in result.stderr

    # someone who has only the files and the receipt, somewhere else: still verified
    elsewhere = tmp_path / "elsewhere"
    shutil.copytree(tmp_path / "res", elsewhere)
    shutil.rmtree(tmp_path / "res")
    moved = _verify(_receipt(elsewhere / "samples.jsonl"), "--key", str(public), cwd=tmp_path)
    assert moved.returncode == 0 and "verified: 2 subjects" in moved.stdout, moved.stdout + moved.stderr

    # the ledger keeps each receipt as it was written, under the run
    export = run_cli("ledger", "export", "--kind", "receipt", "--json", cwd=tmp_path)
    rows = {r["body"]["path"]: r for r in export.json()}
    assert set(rows) == set(record["receipts"])
    assert rows[str(_receipt(scores))]["body"]["envelope"] == envelope
    assert {r["parent"] for r in rows.values()} == {record["id"]}


def test_a_flipped_byte_in_a_result_is_named_and_a_wrong_key_is_a_bad_signature(tmp_path, ledger_path):
    private, public = _keypair(tmp_path)
    _other, other_public = _keypair(tmp_path, "someone-else")
    result, _record = _run(tmp_path, "--sign-key", str(private))
    assert result.returncode == 0, result.stderr
    scores = tmp_path / "res" / "scores.json"
    receipt = _receipt(tmp_path / "res" / "samples.jsonl")
    assert _verify(receipt, "--key", str(public), cwd=tmp_path).returncode == 0

    wrong = _verify(receipt, "--key", str(other_public), cwd=tmp_path)
    assert wrong.returncode == 1
    assert "bad signature" in _one_line(wrong)

    data = bytearray(scores.read_bytes())
    data[3] ^= 0x01
    scores.write_bytes(bytes(data))
    flipped = _verify(receipt, "--key", str(public), cwd=tmp_path)
    assert flipped.returncode == 1
    line = _one_line(flipped)
    assert "scores.json" in line and "sha256 differs" in line and "samples.jsonl" not in line

    # a result gone is a mismatch too, naming it
    scores.unlink()
    gone = _verify(receipt, cwd=tmp_path)
    assert gone.returncode == 1 and "scores.json: missing" in _one_line(gone)


def test_without_a_key_the_receipt_is_unsigned_and_says_so(tmp_path, ledger_path):
    _private, public = _keypair(tmp_path)
    result, _record = _run(tmp_path)
    assert result.returncode == 0, result.stderr
    assert "2 receipts, unsigned" in result.stderr
    receipt = _receipt(tmp_path / "res" / "scores.json")
    assert json.loads(receipt.read_text())["signatures"] == []
    unsigned = _verify(receipt, cwd=tmp_path)
    assert unsigned.returncode == 0
    line = _one_line(unsigned)
    assert "verified: 2 subjects" in line and "unsigned" in line
    # asked to check a signature there is none of: a mismatch
    asked = _verify(receipt, "--key", str(public), cwd=tmp_path)
    assert asked.returncode == 1 and "unsigned" in _one_line(asked)
    as_json = run_cli("receipt", "verify", str(receipt), "--json", cwd=tmp_path).json()
    assert as_json["verified"] is True and as_json["signature"] == "unsigned" and as_json["keyids"] == []


def test_a_signed_receipt_without_a_public_key_is_reported_not_checked(tmp_path, ledger_path):
    private, _public = _keypair(tmp_path)
    assert _run(tmp_path, "--sign-key", str(private))[0].returncode == 0
    plain = _verify(_receipt(tmp_path / "res" / "scores.json"), cwd=tmp_path)
    assert plain.returncode == 0 and "signature not checked" in _one_line(plain)


def test_secrets_in_the_harness_command_line_and_environment_never_reach_the_receipt(tmp_path, ledger_path):
    secret_flag, secret_env = "sk-receipt-secret-5e6f7a8b9c", "env-receipt-secret-3a4b5c6d"
    private, public = _keypair(tmp_path)
    res = tmp_path / "res"
    res.mkdir()
    code = "import sys; open(sys.argv[1], 'w').write('done')"
    result = run_cli("run", "--json", "--gate", "off", "--watch", "0", "--sign-key", str(private),
                     "--result", "res/out.txt", "--", sys.executable, "-c", code, str(res / "out.txt"),
                     "--api-key", secret_flag, cwd=tmp_path, env={"HARNESS_API_TOKEN": secret_env})
    assert result.returncode == 0, result.stderr
    receipt = _receipt(res / "out.txt")
    text = receipt.read_text()
    statement = json.dumps(_statement(json.loads(text)))
    for secret in (secret_flag, secret_env):
        assert secret not in text and secret not in statement
    assert "<redacted>" in json.dumps(_statement(json.loads(text))["predicate"]["command"]["argv"])
    assert _verify(receipt, "--key", str(public), cwd=tmp_path).returncode == 0


def test_an_ecdsa_key_signs_attach_and_the_predicate_is_marked_attached_after(tmp_path, ledger_path):
    assert run_cli("pin", cwd=tmp_path).returncode == 0
    private, public = _keypair(tmp_path, kind="ecdsa")
    result = tmp_path / "made-elsewhere.jsonl"
    result.write_text('{"case": 1, "ok": true}\n')
    attached = run_cli("attach", str(result), "--sign-key", str(private), "--json", cwd=tmp_path)
    assert attached.returncode == 0, attached.stderr
    assert attached.json()["receipts"] == [str(_receipt(result))]
    statement = _statement(json.loads(_receipt(result).read_text()))
    assert statement["predicate"]["attached_after"] is True and statement["predicate"]["schema"] == "execsys.attach/1"
    verified = _verify(_receipt(result), "--key", str(public), "--lock", str(tmp_path / "execsys.lock.json"),
                       cwd=tmp_path)
    assert verified.returncode == 0
    line = _one_line(verified)
    assert "1 subject matches" in line and "attached after the run" in line


def test_a_lock_of_another_identity_is_a_mismatch(tmp_path, ledger_path):
    assert _run(tmp_path)[0].returncode == 0
    other = tmp_path / "other"
    other.mkdir()
    (other / "execsys.toml").write_text("[budget]\ntemperature = 0.9\n")
    assert run_cli("pin", "--config", str(other / "execsys.toml"), cwd=other).returncode == 0
    mismatch = _verify(_receipt(tmp_path / "res" / "scores.json"), "--lock", str(other / "execsys.lock.json"),
                       cwd=tmp_path)
    assert mismatch.returncode == 1 and "is not the lock's" in _one_line(mismatch)


def test_what_is_not_a_receipt_or_cannot_be_read_is_exit_2(tmp_path, ledger_path):
    assert _run(tmp_path)[0].returncode == 0
    receipt = _receipt(tmp_path / "res" / "scores.json")
    (tmp_path / "garbage.json").write_text("{not json")
    envelope = json.loads(receipt.read_text())
    (tmp_path / "other-type.json").write_text(json.dumps(dict(envelope, payloadType="text/plain")))
    (tmp_path / "bad-payload.json").write_text(json.dumps(dict(envelope, payload=base64.b64encode(b"[]").decode())))
    (tmp_path / "not-a-key.pub").write_text("hello\n")
    cases = [
        (tmp_path / "res" / "scores.json.execsys.json", [], "not a DSSE envelope"),
        (tmp_path / "garbage.json", [], "not JSON"),
        (tmp_path / "missing.json", [], "no such file"),
        (tmp_path / "other-type.json", [], "payload type"),
        (tmp_path / "bad-payload.json", [], "not an in-toto Statement"),
        (tmp_path / "res", [], "directory"),
        (receipt, ["--key", str(tmp_path / "not-a-key.pub")], "not a PEM public key"),
        (receipt, ["--lock", str(tmp_path / "missing.lock.json")], "no such lock file"),
    ]
    for path, extra, words in cases:
        refused = _verify(path, *extra, cwd=tmp_path)
        assert refused.returncode == 2, (path, refused.stderr)
        assert words in _one_line(refused), (path, refused.stderr)


@pytest.mark.parametrize("kind, words", [("rsa", "Ed25519 or ECDSA"), ("garbage", "not a PEM private key"),
                                         ("missing", "no such file")])
def test_a_sign_key_that_cannot_sign_refuses_before_the_harness_starts(tmp_path, ledger_path, kind, words):
    if kind == "rsa":
        key, _ = _keypair(tmp_path, kind="rsa")
    else:
        key = tmp_path / "key.pem"
        if kind == "garbage":
            key.write_text("-----BEGIN PRIVATE KEY-----\nnope\n-----END PRIVATE KEY-----\n")
    marker = tmp_path / "ran"
    refused = run_cli("run", "--gate", "off", "--watch", "0", "--sign-key", str(key), "--", sys.executable, "-c",
                      f"open({str(marker)!r}, 'w')", cwd=tmp_path)
    assert refused.returncode == 2 and words in _one_line(refused)
    assert not marker.exists() and not (tmp_path / "execsys.lock.json").exists()


def test_the_declarations_receipts_key_signs_and_a_later_run_replaces_the_file_the_ledger_keeps_both(
        tmp_path, ledger_path):
    private, public = _keypair(tmp_path)
    (tmp_path / "execsys.toml").write_text(f'[receipts]\nkey = "{private}"\n')
    first, one = _run(tmp_path)
    second, two = _run(tmp_path)
    assert first.returncode == 0 and second.returncode == 0, first.stderr + second.stderr
    # a receipt is never a result of a later run
    assert [Path(r["path"]).name for r in two["results"]] == ["samples.jsonl", "scores.json"]
    receipt = _receipt(tmp_path / "res" / "scores.json")
    assert _statement(json.loads(receipt.read_text()))["predicate"]["id"] == two["id"]
    assert _verify(receipt, "--key", str(public), cwd=tmp_path).returncode == 0
    rows = run_cli("ledger", "export", "--kind", "receipt", "--json", cwd=tmp_path).json()
    kept = [r for r in rows if r["body"]["path"] == str(receipt)]
    assert sorted(r["parent"] for r in kept) == sorted([one["id"], two["id"]])


def test_a_symlink_planted_at_the_receipt_name_is_replaced_and_its_target_left_alone(tmp_path, ledger_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("not execsys's to write\n")
    out = tmp_path / "res" / "out.txt"
    out.parent.mkdir()
    link = _receipt(out)
    code = f"import os; open({str(out)!r}, 'w').write('done'); os.symlink({str(victim)!r}, {str(link)!r})"
    result = run_cli("run", "--json", "--gate", "off", "--watch", "0", "--result", str(out), "--", sys.executable,
                     "-c", code, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert victim.read_text() == "not execsys's to write\n"
    assert not link.is_symlink() and _verify(link, cwd=tmp_path).returncode == 0


def test_with_sidecar_dir_the_receipts_go_there_and_still_verify(tmp_path, ledger_path):
    (tmp_path / "sidecars").mkdir()
    result, record = _run(tmp_path, "--sidecar-dir", "sidecars")
    assert result.returncode == 0, result.stderr
    receipts = sorted((tmp_path / "sidecars").glob("*.execsys.intoto.json"))
    assert len(receipts) == 2 and sorted(map(str, receipts)) == sorted(record["receipts"])
    assert not list((tmp_path / "res").glob("*.intoto.json"))
    for receipt in receipts:
        assert _verify(receipt, cwd=tmp_path).returncode == 0


def test_a_receipt_beside_an_inspect_log_is_named_so_inspect_never_takes_it_for_a_log():
    from execsys.harnesses.base import receipt_name, sidecar_name
    from execsys.harnesses.registry import is_sidecar

    log = "2026-12-01T10-00-00+00-00_task_abc.eval"
    assert receipt_name(log) == f"execsys-{log}.execsys.intoto.json"
    assert receipt_name("results.json") == "results.json.execsys.intoto.json"
    assert sidecar_name(log) == f"execsys-{log}.execsys.json"  # the sidecar's rule, unchanged
    assert is_sidecar(Path(receipt_name(log))) and not is_sidecar(Path(log))


def test_a_fifo_planted_at_the_receipt_name_costs_the_receipt_not_the_run(tmp_path, ledger_path):
    out = tmp_path / "res" / "out.txt"
    out.parent.mkdir()
    fifo = _receipt(out)
    code = f"import os; open({str(out)!r}, 'w').write('done'); os.mkfifo({str(fifo)!r})"
    result = run_cli("run", "--json", "--gate", "off", "--watch", "0", "--result", str(out), "--", sys.executable,
                     "-c", code, cwd=tmp_path, timeout=60)
    assert result.returncode == 1, result.stderr
    record = json.loads(result.stdout)
    assert record["receipts"] == [] and record["sidecars"] == [str(out.with_name("out.txt.execsys.json"))]
    [error] = record["receipt_errors"]
    assert error["receipt"] == str(fifo) and "FIFO" in error["error"]
    assert f"receipt {fifo} not written: is a FIFO" in result.stderr
    runs = run_cli("ledger", "export", "--kind", "run", "--json", cwd=tmp_path).json()
    assert [r["body"]["receipt_errors"] for r in runs] == [record["receipt_errors"]]
    assert run_cli("ledger", "export", "--kind", "receipt", "--json", cwd=tmp_path).json() == []
