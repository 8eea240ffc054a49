"""OpenSSF model-signing bundles (``model.sig``): ``pin`` records what the bundle states, ``verify`` has the
``model-signing`` package's own verifier check the artifact's files with the declared key or certificates.

Every bundle here is made by model-signing itself (its ``model_signing`` CLI for a key, its signing API
for a certificate), with keys and a small certificate authority generated on the spot by ``cryptography``:
nothing touches Sigstore or the network. The digests the tests expect are computed here with hashlib,
not read back from execsys."""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from cryptography.x509.oid import NameOID

from tests.fixtures.common import run_cli

MODEL_FILES = {"config.json": b'{"model_type": "llama", "torch_dtype": "float16"}\n',
               "weights.bin": bytes(range(256)) * 64,
               "tokenizer/tokenizer.json": b'{"version": "1.0"}\n'}


def _model(project: Path) -> Path:
    model = project / "model"
    for name, data in MODEL_FILES.items():
        (model / name).parent.mkdir(parents=True, exist_ok=True)
        (model / name).write_bytes(data)
    return model


def _ec_keypair(where: Path, name: str) -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    private, public = where / f"{name}.pem", where / f"{name}.pub"
    private.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                          serialization.NoEncryption()))
    public.write_bytes(key.public_key().public_bytes(serialization.Encoding.PEM,
                                                     serialization.PublicFormat.SubjectPublicKeyInfo))
    return private, public


def _sign_with_key(model: Path, private: Path) -> None:
    """model-signing's own CLI, as a model publisher runs it: the bundle lands in the model directory."""
    cli = Path(sys.executable).with_name("model_signing")
    done = subprocess.run([str(cli), "sign", "key", str(model), "--private_key", str(private),
                           "--signature", str(model / "model.sig")], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert (model / "model.sig").is_file()


def _project(tmp_path: Path, *, key: str | None = "signer.pub", sign: bool = True) -> tuple[Path, Path]:
    project = tmp_path / "project"
    project.mkdir()
    model = _model(project)
    _ec_keypair(project, "other")
    private, _public = _ec_keypair(project, "signer")
    if sign:
        _sign_with_key(model, private)
    key_line = f'signature_key = "{key}"\n' if key else ""
    (project / "execsys.toml").write_text(f'[artifact]\npath = "model"\n{key_line}\n[budget]\nseed = 7\n')
    return project, model


def _spki_sha256(public: Path) -> str:
    key = serialization.load_pem_public_key(public.read_bytes())
    return hashlib.sha256(key.public_bytes(serialization.Encoding.PEM,
                                           serialization.PublicFormat.SubjectPublicKeyInfo)).hexdigest()


def _pin(project: Path) -> dict:
    pinned = run_cli("pin", "--json", cwd=project)
    assert pinned.returncode == 0, pinned.stderr
    return pinned.json()


def _verify(project: Path) -> tuple[int, dict]:
    checked = run_cli("verify", "--json", cwd=project)
    assert checked.returncode in (0, 1), checked.stderr
    return checked.returncode, checked.json()


def test_pin_records_the_bundles_subjects_and_signer_and_verify_checks_them_with_the_declared_key(tmp_path, ledger_path):
    project, model = _project(tmp_path)
    artifact = _pin(project)["components"]["artifact"]
    assert artifact["declared"]["signature_key"] == "signer.pub"
    signature = artifact["observed"]["signature"]
    assert signature["present"] is True and signature["method"] == "key"
    assert signature["predicate_type"] == "https://model_signing/signature/v1.0"
    assert signature["subjects"] == [{"name": name, "digest": {"sha256": hashlib.sha256(data).hexdigest()}}
                                     for name, data in sorted(MODEL_FILES.items())]
    assert signature["files"] == 3 and "model.sig" in signature["serialization"]["ignore_paths"]
    signer_sha = _spki_sha256(project / "signer.pub")
    assert signature["signer"] == {"key_sha256": signer_sha}
    assert signature["key"]["sha256"] == signer_sha and signature["key"]["matches_bundle"] is True

    code, report = _verify(project)
    assert code == 0, report["sentence"]
    check = report["components"]["artifact"]
    assert check["status"] == "same"
    assert check["signature"]["status"] == "verified" and check["signature"]["files"] == 3
    assert check["signature"]["signed_by"] == f"key {signer_sha[:16]}"
    human = run_cli("verify", cwd=project)
    assert human.returncode == 0
    assert f"signature verified: 3 files match the digests model.sig signed, signed by key {signer_sha[:16]}" \
        in human.stdout


def test_an_edited_file_is_named_and_fails_verify(tmp_path, ledger_path):
    project, model = _project(tmp_path)
    _pin(project)
    signed = hashlib.sha256(MODEL_FILES["weights.bin"]).hexdigest()
    edited = bytearray(MODEL_FILES["weights.bin"])
    edited[100] ^= 1
    (model / "weights.bin").write_bytes(bytes(edited))

    code, report = _verify(project)
    assert code == 1 and report["verdict"] == "new-identity"
    check = report["components"]["artifact"]
    assert check["status"] == "changed" and check["signature"]["status"] == "not-verified"
    reason = check["reason"]
    assert reason.startswith("signature not verified: the files are not the ones signed: weights.bin: sha256 "
                             f"{hashlib.sha256(bytes(edited)).hexdigest()[:16]}... on disk, model.sig signed "
                             f"{signed[:16]}...")
    assert "config.json" not in reason and "tokenizer" not in reason
    assert "signature not verified" in report["sentence"]
    human = run_cli("verify", cwd=project)
    assert human.returncode == 1 and "weights.bin: sha256" in human.stdout and "Traceback" not in human.stderr


def test_a_key_that_is_not_the_signers_fails_verify_and_pin_says_so(tmp_path, ledger_path):
    project, _model_dir = _project(tmp_path, key="other.pub")
    identity = _pin(project)
    assert any("model.sig names key" in note and "not the declared [artifact] signature_key" in note
               for note in identity["notes"])
    code, report = _verify(project)
    assert code == 1
    check = report["components"]["artifact"]
    assert check["status"] == "changed" and check["changes"] == []  # nothing moved: the key is not the signer's
    assert check["signature"]["status"] == "not-verified"
    assert "Key mismatch" in check["reason"]
    assert f"the declared key is {_spki_sha256(project / 'other.pub')[:16]}" in check["reason"]


def test_a_model_without_a_bundle_is_pinned_and_verified_as_before(tmp_path, ledger_path):
    project, _model_dir = _project(tmp_path, key=None, sign=False)
    observed = _pin(project)["components"]["artifact"]["observed"]
    assert "signature" not in observed
    assert set(observed) == {"path", "kind", "digest", "size_bytes", "files", "format", "quantization",
                             "quantization_source"}
    code, report = _verify(project)
    assert code == 0 and "signature" not in report["components"]["artifact"]


def test_a_bundle_without_a_declared_key_is_recorded_and_reported_not_checked(tmp_path, ledger_path):
    project, _model_dir = _project(tmp_path, key=None)
    signature = _pin(project)["components"]["artifact"]["observed"]["signature"]
    assert signature["files"] == 3 and "key" not in signature
    code, report = _verify(project)
    assert code == 0
    assert report["components"]["artifact"]["signature"]["status"] == "not-checked"
    assert "declare [artifact] signature_key" in report["components"]["artifact"]["signature"]["reason"]


def test_a_declared_key_without_a_bundle_fails_verify(tmp_path, ledger_path):
    project, _model_dir = _project(tmp_path, sign=False)
    identity = _pin(project)
    assert any("holds no model.sig" in note for note in identity["notes"])
    code, report = _verify(project)
    assert code == 1 and report["components"]["artifact"]["signature"]["status"] == "not-verified"
    assert "no model.sig in" in report["components"]["artifact"]["reason"]


@pytest.mark.parametrize("key, words", [("missing.pub", "no such file"), ("signer.pem", "a private key"),
                                        ("ed.pub", "Ed25519PublicKey key"), ("execsys.toml", "not a PEM public key")])
def test_a_signature_key_that_cannot_check_anything_is_refused_by_pin_in_one_line(tmp_path, ledger_path, key, words):
    project, _model_dir = _project(tmp_path, key=key)
    (project / "ed.pub").write_bytes(ed25519.Ed25519PrivateKey.generate().public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    refused = run_cli("pin", cwd=project)
    assert refused.returncode == 2, refused.stderr
    [line] = refused.stderr.strip().splitlines()
    assert "[artifact] signature_key" in line and words in line and "nothing pinned" in line
    assert "PRIVATE KEY" not in refused.stderr + refused.stdout
    assert not (project / "execsys.lock.json").exists()


def _certificate(subject: str, key, issuer: x509.Certificate | None, issuer_key, *, ca: bool) -> x509.Certificate:
    now = datetime.datetime.now(datetime.timezone.utc)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
    usage = x509.KeyUsage(digital_signature=True, key_cert_sign=ca, crl_sign=ca, content_commitment=False,
                          key_encipherment=False, data_encipherment=False, key_agreement=False,
                          encipher_only=False, decipher_only=False)
    return (x509.CertificateBuilder().subject_name(name).issuer_name(issuer.subject if issuer else name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1)).not_valid_after(now + datetime.timedelta(days=7))
            .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
            .add_extension(usage, critical=True).sign(issuer_key, hashes.SHA256()))


def test_a_certificate_signed_bundle_verifies_against_its_ca_and_not_against_another(tmp_path, ledger_path):
    from model_signing import hashing, signing

    project = tmp_path / "project"
    project.mkdir()
    model = _model(project)
    ca_key, other_ca_key, leaf_key = (ec.generate_private_key(ec.SECP256R1()) for _ in range(3))
    ca = _certificate("Publisher CA", ca_key, None, ca_key, ca=True)
    other_ca = _certificate("Another CA", other_ca_key, None, other_ca_key, ca=True)
    leaf = _certificate("model publisher", leaf_key, ca, ca_key, ca=False)
    for name, cert in (("ca.pem", ca), ("other-ca.pem", other_ca), ("leaf.pem", leaf)):
        (project / name).write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (project / "leaf.key").write_bytes(leaf_key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    signing.Config().use_certificate_signer(
        private_key=project / "leaf.key", signing_certificate=project / "leaf.pem",
        certificate_chain=[project / "ca.pem"]).set_hashing_config(
        hashing.Config().set_ignored_paths(paths=["model.sig"])).sign(model, model / "model.sig")

    (project / "execsys.toml").write_text('[artifact]\npath = "model"\nsignature_key = "ca.pem"\n')
    signature = _pin(project)["components"]["artifact"]["observed"]["signature"]
    assert signature["method"] == "certificate"
    assert signature["signer"]["subject"] == "CN=model publisher" and signature["signer"]["issuer"] == "CN=Publisher CA"
    assert signature["key"]["certificates"] == [{"subject": "CN=Publisher CA",
                                                 "sha256": ca.fingerprint(hashes.SHA256()).hex()}]
    code, report = _verify(project)
    assert code == 0, report["sentence"]
    assert report["components"]["artifact"]["signature"]["signed_by"] == \
        "certificate CN=model publisher (issued by CN=Publisher CA)"

    (project / "execsys.toml").write_text('[artifact]\npath = "model"\nsignature_key = "other-ca.pem"\n')
    _pin(project)
    code, report = _verify(project)
    assert code == 1 and report["components"]["artifact"]["signature"]["status"] == "not-verified"


def test_without_the_model_signing_package_a_declared_key_is_unverifiable_with_the_install_line(tmp_path, monkeypatch):
    from execsys.observe.model_signature import check_signature, observe_signature

    project, model = _project(tmp_path)
    observed = observe_signature(model, {"signature_key": "signer.pub"}, project)
    assert observed is not None
    monkeypatch.setitem(sys.modules, "model_signing", None)  # import model_signing raises ImportError
    check = check_signature(model, observed)
    assert check.status == "not-verified" and check.checkable is False
    assert "pip install 'execsys[model-signing]'" in str(check.reason)


def test_a_bundle_that_is_not_one_is_recorded_as_such_and_never_verifies(tmp_path, ledger_path):
    project, model = _project(tmp_path)
    (model / "model.sig").write_text(json.dumps({"mediaType": "x", "dsseEnvelope": {"payload": "%%%"}}))
    identity = _pin(project)
    error = identity["components"]["artifact"]["observed"]["signature"]["error"]
    assert error == "model.sig: its DSSE payload is not base64-encoded JSON"
    assert any(error in note for note in identity["notes"])
    code, report = _verify(project)
    assert code == 1 and error in report["components"]["artifact"]["reason"]


def test_the_bundles_digests_are_model_signings_own(tmp_path):
    """The subjects pin records are the ones model-signing's verifier checks: read back from the bundle
    by model-signing itself (its Signature reader and the verifier's manifest)."""
    from model_signing._signing import sign_ec_key, sign_sigstore_pb

    from execsys.observe.model_signature import read_bundle

    project, model = _project(tmp_path)
    manifest = sign_ec_key.Verifier(project / "signer.pub").verify(
        sign_sigstore_pb.Signature.read(model / "model.sig"))
    theirs = [{"name": rd.identifier, "digest": {rd.digest.algorithm: rd.digest.digest_hex}}
              for rd in manifest.resource_descriptors()]
    assert read_bundle(model / "model.sig")["subjects"] == theirs
    assert os.path.basename(manifest.model_name) == "model"


def test_a_sigstore_keyless_bundle_is_recorded_with_its_identity_and_never_verified_offline(tmp_path, ledger_path):
    """A keyless bundle carries a short-lived Fulcio certificate naming the signer's identity and OIDC
    issuer: pin records both; checking it needs Sigstore's transparency log, so verify says it could not."""
    import base64

    project, model = _project(tmp_path)
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.timezone.utc)
    issuer_der = b"\x0c\x1bhttps://accounts.example.com"  # a DER UTF8String, as Fulcio writes 1.3.6.1.4.1.57264.1.8
    fulcio = (x509.CertificateBuilder().subject_name(x509.Name([])).issuer_name(
        x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "sigstore-intermediate")]))
        .public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now).not_valid_after(now + datetime.timedelta(minutes=10))
        .add_extension(x509.SubjectAlternativeName([x509.RFC822Name("publisher@example.com")]), critical=True)
        .add_extension(x509.UnrecognizedExtension(x509.ObjectIdentifier("1.3.6.1.4.1.57264.1.8"), issuer_der),
                       critical=False)
        .sign(key, hashes.SHA256()))
    bundle = json.loads((model / "model.sig").read_text())
    bundle["verificationMaterial"] = {"certificate": {"rawBytes": base64.b64encode(
        fulcio.public_bytes(serialization.Encoding.DER)).decode()}, "tlogEntries": []}
    (model / "model.sig").write_text(json.dumps(bundle))

    signature = _pin(project)["components"]["artifact"]["observed"]["signature"]
    assert signature["method"] == "sigstore"
    assert signature["signer"]["identity"] == "publisher@example.com"
    assert signature["signer"]["oidc_issuer"] == "https://accounts.example.com"
    assert signature["signed_by"] == "sigstore identity publisher@example.com (issuer https://accounts.example.com)"
    code, report = _verify(project)
    assert code == 1
    check = report["components"]["artifact"]
    assert check["status"] == "unverifiable" and "Sigstore's keyless flow" in check["reason"]
