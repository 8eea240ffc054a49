"""Read what a model ships about who signed it: an OpenSSF model-signing bundle (``model.sig``).

Models are starting to ship an OpenSSF **model-signing** bundle beside their files: a Sigstore
bundle (``application/vnd.dev.sigstore.bundle.v0.3+json``) whose DSSE envelope holds an in-toto
Statement, predicate ``https://model_signing/signature/v1.0``, listing every file of the model with
its digest, signed by an elliptic-curve key, a certificate, or Sigstore's keyless flow.

Two halves, because they answer two questions:

- :func:`observe_signature` (``pin``, and ``verify``'s re-observation) records what the bundle
  *states*: its subjects (each file's name and digest), the method and the signer it names (a key's
  SHA-256 hint, a certificate's subject, a Sigstore identity), and the key or certificates the
  declaration names (``[artifact] signature_key``) with their fingerprints. It reads JSON and
  needs no signing library; nothing here is believed yet. It is deterministic in the bytes of
  ``model.sig`` and of the key file, so it belongs in the identity like the rest of the artifact.
- :func:`check_signature` (``verify``) has the ``model-signing`` package's own verifier check the
  bundle's signature with the declared key or certificate chain and re-hash the artifact's files
  against the bundle's digests. Its answer -- verified, not verified (a file and its digest, a key
  that is not the signer's, a bad signature) or not checked (no key declared) -- is a check, not a
  fact about the system, so it is never part of the id.

Everything is offline: a Sigstore (keyless) bundle needs Sigstore's transparency log and trust
root to check, so it is recorded and reported *not verified*, with that reason. The package is the
``execsys[model-signing]`` extra; without it a declared key cannot be checked, and verify says so.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hashlib
import io
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from execsys.errors import InputError

BUNDLE_NAME = "model.sig"
BUNDLE_MEDIA_TYPE = "application/vnd.dev.sigstore.bundle.v0.3+json"
PREDICATE_TYPE = "https://model_signing/signature/v1.0"
PREDICATE_TYPE_COMPAT = "https://model_signing/Digests/v0.1"  # model-signing 0.2's statements
# a bundle lists every file of the model (about 150 bytes each); a key or chain is a few KiB
BUNDLE_LIMIT = 64 << 20
KEY_FILE_LIMIT = 1 << 20
# the curves model-signing's key and certificate verifiers accept (Sigstore's protobuf specs)
SUPPORTED_CURVES = ("secp256r1", "secp384r1", "secp521r1")
INSTALL_HINT = "pip install 'execsys[model-signing]'"
SHOWN_FINGERPRINT = 16


# -- what the bundle states (pin) ------------------------------------------------------------------------


def observe_signature(artifact: Path, declared: dict[str, Any], base_dir: Path | None) -> dict[str, Any] | None:
    """What the artifact's ``model.sig`` states and which key the declaration names; None when the
    artifact has no bundle and no ``signature_key`` is declared (the artifact is recorded as before).

    A declared key that cannot be read is recorded under ``key.error`` (pin refuses it; verify
    reports it), never raised here."""
    bundle_path = artifact / BUNDLE_NAME if artifact.is_dir() else None
    key_text = declared.get("signature_key")
    present = bundle_path is not None and bundle_path.is_file()
    if not present and not key_text:
        return None
    observed: dict[str, Any] = {"bundle": BUNDLE_NAME, "present": present}
    if not artifact.is_dir():
        observed["note"] = ("the artifact is a file: a model-signing bundle is read as model.sig in the artifact's "
                            "directory")
    elif present:
        assert bundle_path is not None
        try:
            observed.update(read_bundle(bundle_path))
        except InputError as exc:
            observed["error"] = str(exc)
    if key_text:
        from execsys.observe.artifact import resolve

        observed["key"] = observe_key(resolve(str(key_text), base_dir))
        hint = (observed.get("signer") or {}).get("key_sha256")
        if observed.get("method") == "key" and hint and observed["key"].get("sha256"):
            observed["key"]["matches_bundle"] = observed["key"]["sha256"] == hint
    return observed


def read_bundle(path: Path) -> dict[str, Any]:
    """The statements of a model-signing bundle: media type, method and signer, the model's name and
    root digest, the serialization, and every subject (file name and digest), sorted by name.
    InputError (one line) for a file that is not such a bundle."""
    from execsys.fsutil import read_bounded

    shown = BUNDLE_NAME
    try:
        bundle = json.loads(read_bounded(path, BUNDLE_LIMIT, "model-signing bundle"))
    except (ValueError, RecursionError):
        raise InputError(f"{shown}: not JSON (a model-signing bundle is a Sigstore bundle in JSON)") from None
    if not isinstance(bundle, dict):
        raise InputError(f"{shown}: not a Sigstore bundle (a JSON object with mediaType, verificationMaterial, "
                         "dsseEnvelope)")
    envelope = bundle.get("dsseEnvelope")
    if not isinstance(envelope, dict) or not isinstance(envelope.get("payload"), str):
        raise InputError(f"{shown}: holds no DSSE envelope (dsseEnvelope.payload)")
    try:
        statement = json.loads(base64.b64decode(envelope["payload"], validate=True))
    except (binascii.Error, ValueError, RecursionError):
        raise InputError(f"{shown}: its DSSE payload is not base64-encoded JSON") from None
    if not isinstance(statement, dict):
        raise InputError(f"{shown}: its DSSE payload is not an in-toto Statement")
    predicate_type = statement.get("predicateType")
    predicate = _table(statement, "predicate")
    raw_subjects = _items(statement, "subject")
    if predicate_type == PREDICATE_TYPE:
        subjects = [{"name": str(r.get("name")), "digest": {str(r.get("algorithm")): str(r.get("digest"))}}
                    for r in _items(predicate, "resources") if isinstance(r, dict)]
        model: dict[str, Any] = raw_subjects[0] if raw_subjects and isinstance(raw_subjects[0], dict) else {}
        model_name, root = model.get("name"), model.get("digest")
        serialization = _table(predicate, "serialization")
    elif predicate_type == PREDICATE_TYPE_COMPAT:
        subjects = [{"name": str(s.get("name")), "digest": {str(k): str(v) for k, v in _table(s, "digest").items()}}
                    for s in raw_subjects if isinstance(s, dict)]
        model_name, root, serialization = None, None, {"method": "files", "hash_type": "sha256"}
    else:
        raise InputError(f"{shown}: predicate type {predicate_type!r} is not model-signing's ({PREDICATE_TYPE})")
    material = _table(bundle, "verificationMaterial")
    method, signer = _signer(material)
    return {
        "media_type": bundle.get("mediaType"),
        "predicate_type": predicate_type,
        "method": method,
        "signer": signer,
        "signed_by": signed_by_words(method, signer),
        "model_name": model_name,
        "root_digest": root if isinstance(root, dict) else None,
        "serialization": {k: serialization[k] for k in sorted(serialization)
                          if k in ("method", "hash_type", "allow_symlinks", "shard_size", "ignore_paths")},
        "files": len(subjects),
        "subjects": sorted(subjects, key=lambda s: s["name"]),
    }


def _table(obj: dict[str, Any], key: str) -> dict[str, Any]:
    value = obj.get(key)
    return value if isinstance(value, dict) else {}


def _items(obj: dict[str, Any], key: str) -> list[Any]:
    value = obj.get(key)
    return value if isinstance(value, list) else []


def _signer(material: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """(method, signer) as the bundle's verification material states them -- unchecked."""
    public_key = material.get("publicKey")
    if isinstance(public_key, dict):
        return "key", {"key_sha256": public_key.get("hint")}
    chain = material.get("x509CertificateChain")
    if isinstance(chain, dict) and isinstance(chain.get("certificates"), list) and chain["certificates"]:
        leaf = chain["certificates"][0]
        signer = _certificate_facts(leaf.get("rawBytes") if isinstance(leaf, dict) else None)
        signer["chain"] = len(chain["certificates"])
        return "certificate", signer
    certificate = material.get("certificate")
    if isinstance(certificate, dict):  # Sigstore's keyless flow: a short-lived Fulcio certificate
        return "sigstore", _certificate_facts(certificate.get("rawBytes"), sigstore=True)
    return "unknown", {}


def _certificate_facts(raw: Any, *, sigstore: bool = False) -> dict[str, Any]:
    """Subject, issuer, SHA-256 fingerprint and (Sigstore) the identity and OIDC issuer of a DER
    certificate given base64-encoded, as a bundle holds it."""
    from cryptography import x509

    try:
        cert = x509.load_der_x509_certificate(base64.b64decode(str(raw), validate=True))
    except (binascii.Error, ValueError, TypeError):
        return {"error": "the certificate in the bundle cannot be read"}
    facts: dict[str, Any] = {"subject": cert.subject.rfc4514_string(), "issuer": cert.issuer.rfc4514_string(),
                             "sha256": cert.fingerprint(_sha256()).hex()}
    if sigstore:
        try:
            names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
            found = names.get_values_for_type(x509.RFC822Name) + names.get_values_for_type(
                x509.UniformResourceIdentifier)
            facts["identity"] = found[0] if found else None
        except x509.ExtensionNotFound:
            facts["identity"] = None
        facts["oidc_issuer"] = _fulcio_issuer(cert)
    return facts


def _fulcio_issuer(cert: Any) -> str | None:
    """The OIDC issuer Fulcio wrote into the certificate (OID 1.3.6.1.4.1.57264.1.8, else .1.1)."""
    from cryptography import x509

    for dotted in ("1.3.6.1.4.1.57264.1.8", "1.3.6.1.4.1.57264.1.1"):
        try:
            value = cert.extensions.get_extension_for_oid(x509.ObjectIdentifier(dotted)).value
        except x509.ExtensionNotFound:
            continue
        data = getattr(value, "value", b"")
        if dotted.endswith(".8") and data[:1] == b"\x0c" and len(data) >= 2:  # a DER UTF8String
            data = data[2:]
        return data.decode("utf-8", "replace")
    return None


def _sha256() -> Any:
    from cryptography.hazmat.primitives import hashes

    return hashes.SHA256()


def signed_by_words(method: str, signer: dict[str, Any]) -> str:
    """Who the bundle says signed it: 'key 9b8d0f9958b1bc8a', 'certificate CN=…', 'sigstore a@b (issuer)'."""
    if method == "key":
        return f"key {str(signer.get('key_sha256') or '(no key hint)')[:SHOWN_FINGERPRINT]}"
    if method == "certificate":
        return f"certificate {signer.get('subject') or '?'} (issued by {signer.get('issuer') or '?'})"
    if method == "sigstore":
        return f"sigstore identity {signer.get('identity') or '?'} (issuer {signer.get('oidc_issuer') or '?'})"
    return "an unknown method (no publicKey, x509CertificateChain or certificate in the bundle)"


def observe_key(path: Path) -> dict[str, Any]:
    """The declared verification material: an EC public key (its SHA-256 over the SubjectPublicKeyInfo
    PEM, which is the hint model-signing writes into a bundle) or PEM certificates (a chain of trust,
    each with its subject and fingerprint). Problems go under ``error``, one line naming the file."""
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    from execsys.fsutil import read_bounded

    where = f"[artifact] signature_key {path}"
    entry: dict[str, Any] = {"path": str(path)}
    try:
        data = read_bounded(path, KEY_FILE_LIMIT, "signature key")
    except FileNotFoundError:
        return dict(entry, error=f"{where}: no such file")
    except (OSError, InputError) as exc:
        return dict(entry, error=f"{where}: cannot be read ({getattr(exc, 'strerror', None) or exc})")
    if b"PRIVATE KEY-----" in data:
        return dict(entry, error=f"{where}: a private key; name the public key (or certificate chain) that "
                                 "checks the model's signature")
    if b"-----BEGIN CERTIFICATE-----" in data:
        try:
            certificates = x509.load_pem_x509_certificates(data)
        except ValueError:
            return dict(entry, error=f"{where}: not a readable PEM certificate chain")
        return dict(entry, kind="certificates",
                    certificates=[{"subject": c.subject.rfc4514_string(), "sha256": c.fingerprint(_sha256()).hex()}
                                  for c in certificates])
    try:
        public = serialization.load_pem_public_key(data)
    except ValueError:
        return dict(entry, error=f"{where}: not a PEM public key or certificate")
    if not isinstance(public, ec.EllipticCurvePublicKey) or public.curve.name not in SUPPORTED_CURVES:
        what = public.curve.name if isinstance(public, ec.EllipticCurvePublicKey) else type(public).__name__
        return dict(entry, error=f"{where}: a {what.removeprefix('_')} key; model-signing bundles are signed with "
                                 "ECDSA P-256, P-384 or P-521 keys")
    spki = public.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    return dict(entry, kind="ec-public-key", curve=public.curve.name, sha256=hashlib.sha256(spki).hexdigest())


# -- whose signature covers the bytes (verify) -------------------------------------------------------------


VERIFIED, NOT_VERIFIED, NOT_CHECKED = "verified", "not-verified", "not-checked"


@dataclass(frozen=True)
class SignatureCheck:
    """What model-signing's verifier said about the artifact. ``status``: verified, not-verified
    (the signature or the files do not hold, or could not be checked although a key is declared:
    ``checkable`` False then) or not-checked (no key declared)."""

    status: str
    signed_by: str
    files: int
    reason: str | None = None
    checkable: bool = True  # False: the check could not be made (no package, unreadable key, keyless bundle)
    by: str | None = None  # the declared key or certificates that checked it

    @property
    def failed(self) -> bool:
        return self.status == NOT_VERIFIED

    def sentence(self) -> str:
        if self.status == VERIFIED:
            return (f"signature verified: {self.files} file{'s' if self.files != 1 else ''} match the digests "
                    f"{BUNDLE_NAME} signed, signed by {self.signed_by} ({self.by})")
        if self.status == NOT_CHECKED:
            return f"signature not checked: {self.reason}"
        return f"signature not verified: {self.reason}"

    def to_json(self) -> dict[str, Any]:
        return {"status": self.status, "bundle": BUNDLE_NAME, "signed_by": self.signed_by, "files": self.files,
                "checked_with": self.by, "reason": self.reason, "sentence": self.sentence()}


def check_signature(artifact: Path, observed: dict[str, Any]) -> SignatureCheck:
    """Check the artifact against its bundle with model-signing's own verifier and the declared key.

    ``observed`` is :func:`observe_signature`'s answer for this artifact, read now."""
    signed_by = str(observed.get("signed_by") or "nobody (no bundle)")
    files = int(observed.get("files") or 0)
    key = observed.get("key") if isinstance(observed.get("key"), dict) else None

    def result(status: str, reason: str | None, *, checkable: bool = True) -> SignatureCheck:
        return SignatureCheck(status, signed_by, files, reason, checkable, _key_words(key))

    if key is None:
        return result(NOT_CHECKED, f"{BUNDLE_NAME} states {files} files signed by {signed_by}; declare "
                                   "[artifact] signature_key (the signer's public key or certificate chain) to check it")
    if not observed.get("present"):
        return result(NOT_VERIFIED, observed.get("note") or
                      f"no {BUNDLE_NAME} in {artifact} to check against [artifact] signature_key")
    if observed.get("error"):
        return result(NOT_VERIFIED, str(observed["error"]))
    if key.get("error"):
        return result(NOT_VERIFIED, str(key["error"]), checkable=False)
    method = observed.get("method")
    if method == "sigstore":
        return result(NOT_VERIFIED, f"{BUNDLE_NAME} is signed by Sigstore's keyless flow ({signed_by}): checking it "
                                    "needs Sigstore's transparency log; execsys checks key- and certificate-signed "
                                    "bundles offline", checkable=False)
    wanted = {"key": "ec-public-key", "certificate": "certificates"}.get(str(method))
    if wanted is not None and key.get("kind") != wanted:
        has = "a public key" if key.get("kind") == "ec-public-key" else "certificates"
        return result(NOT_VERIFIED, f"{BUNDLE_NAME} is signed by {signed_by}, but [artifact] signature_key holds "
                                    f"{has}")
    try:
        from model_signing import hashing, verifying
    except ImportError as exc:
        return result(NOT_VERIFIED, f"the model-signing package cannot be imported ({exc}): {INSTALL_HINT}",
                      checkable=False)
    config = verifying.Config()
    if key.get("kind") == "ec-public-key":
        config.use_elliptic_key_verifier(public_key=str(key["path"]))
    else:
        config.use_certificate_verifier(certificate_chain=[str(key["path"])])
    try:
        config.set_hashing_config(_hashing_config(hashing, observed.get("serialization") or {}))
    except ValueError as exc:
        return result(NOT_VERIFIED, f"{BUNDLE_NAME}: {exc}")
    said = io.StringIO()  # the verifier prints a warning for old bundles: never onto execsys's stdout
    try:
        with contextlib.redirect_stdout(said):
            config.verify(artifact, artifact / BUNDLE_NAME)
    except Exception as exc:  # noqa: BLE001 - ValueError, InvalidSignature, X509StoreContextError, KeyError...
        reason = _failure_words(exc, list(observed.get("subjects") or []))
        if method == "key" and key.get("matches_bundle") is False:
            reason += (f" ({BUNDLE_NAME} names key {str((observed.get('signer') or {}).get('key_sha256'))[:16]}, "
                       f"the declared key is {str(key.get('sha256'))[:16]})")
        return result(NOT_VERIFIED, reason)
    return result(VERIFIED, None)


def _hashing_config(hashing: Any, serialization: dict[str, Any]) -> Any:
    """model-signing's hashing configuration for the serialization the bundle states, with the bundle
    itself left out (it is written after the files are hashed), as model-signing's own CLI does."""
    method = serialization.get("method")
    algorithm = str(serialization.get("hash_type") or "sha256")
    symlinks = serialization.get("allow_symlinks") is True
    ignored = [str(p) for p in serialization.get("ignore_paths") or []] + [BUNDLE_NAME]
    config = hashing.Config()
    if method == "files":
        config.use_file_serialization(hashing_algorithm=algorithm, allow_symlinks=symlinks)
    elif method == "shards":
        config.use_shard_serialization(hashing_algorithm=algorithm, allow_symlinks=symlinks,
                                       shard_size=int(serialization.get("shard_size") or 1_000_000_000))
    else:
        raise ValueError(f"serialization method {method!r} is not one model-signing verifies (files, shards)")
    return config.set_ignored_paths(paths=ignored, ignore_git_paths=False).set_allow_symlinks(symlinks)


def _failure_words(exc: BaseException, subjects: list[dict[str, Any]]) -> str:
    """model-signing's reason in one line: each file that differs (with the digest the bundle signed
    and the one on disk), files added or missing, a key mismatch, a bad signature."""
    import ast

    text = " ".join(str(exc).split())
    prefix = "Signature mismatch: "
    if text.startswith(prefix):
        try:
            parts = ast.literal_eval(str(exc)[len(prefix):])
        except (ValueError, SyntaxError):
            parts = None
        if isinstance(parts, list) and parts:
            signed = {str(s.get("name")): s.get("digest") or {} for s in subjects}
            return "the files are not the ones signed: " + "; ".join(_difference(str(p), signed) for p in parts)
    name = type(exc).__name__
    if name == "InvalidSignature":
        return "bad signature: the declared key does not verify the bundle's DSSE signature"
    if name == "ValueError" and text:
        return text
    return f"{name}: {text}" if text else name


_HASH_MISMATCH = re.compile(r"Hash mismatch for '(?P<name>.*)': Expected '.*', "
                            r"Actual 'Digest\(algorithm='(?P<algorithm>\w+)', digest_value=(?P<value>.*)\)'$", re.S)


def _difference(part: str, signed: dict[str, dict[str, Any]]) -> str:
    """'weights.bin: sha256 36acc1178a2d6774... on disk, model.sig signed 8f2c...' from model-signing's
    'Hash mismatch for ...' (whose digests are Python reprs); its other lines as they are."""
    import ast

    match = _HASH_MISMATCH.match(part)
    if not match:
        return part
    name, algorithm = match["name"], match["algorithm"]
    try:
        actual = ast.literal_eval(match["value"]).hex()[:SHOWN_FINGERPRINT] + "..."
    except (ValueError, SyntaxError, AttributeError):
        actual = "another digest"
    expected = str((signed.get(name) or {}).get(algorithm) or "?")[:SHOWN_FINGERPRINT]
    return f"{name}: {algorithm} {actual} on disk, {BUNDLE_NAME} signed {expected}..."


def _key_words(key: dict[str, Any] | None) -> str | None:
    if not key or key.get("error"):
        return None
    if key.get("kind") == "ec-public-key":
        return f"declared key {str(key.get('sha256'))[:SHOWN_FINGERPRINT]} {key.get('path')}"
    return f"declared certificate chain {key.get('path')} ({len(key.get('certificates') or [])} certificates)"


def key_error(observed_artifact: dict[str, Any]) -> str | None:
    """The one line pin refuses with when the declared signature_key cannot be used."""
    signature = observed_artifact.get("signature")
    key = signature.get("key") if isinstance(signature, dict) else None
    return str(key["error"]) if isinstance(key, dict) and key.get("error") else None
