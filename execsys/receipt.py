"""Receipts: a statement of what produced a result that anyone can check offline, outside execsys.

A sidecar says what produced a result, but anyone can edit it and only execsys reads it. A receipt
says the same in the format the supply-chain tools already verify: an **in-toto Statement v1**
whose subjects are the result files (each with ``sha256``, what in-toto tools check, and
``blake3``, what execsys records) and whose predicate (type :data:`PREDICATE_TYPE`) is the run
record itself, identity id and lock digest, doctor verdict, drift events, verify-after and verdict
included, scrubbed by :func:`execsys.redact.scrub` like every other record. The Statement is
wrapped in a **DSSE envelope** (payload type :data:`PAYLOAD_TYPE`), signed with an Ed25519 or
ECDSA private key (a PEM file, as securesystemslib's ``CryptoSigner`` loads them) where one is
given, and left with no signatures (said so wherever it is shown) where none is.

The encodings are the in-toto project's own libraries, never written here: ``in-toto-attestation``
builds and validates the Statement, ``securesystemslib`` does DSSE (its pre-authentication
encoding, signing and verification) and the keys. A subject's name is the result's path relative
to the receipt's directory, so the files and their receipt can be moved together and still verify.

:func:`verify_receipt` checks, in this order, the signature (against a public key, when given),
every subject's digests against the file on disk, and the predicate's identity against a lock
(when given); the first mismatch is the answer, in one line. A file that is not a receipt (or
cannot be read) is an :class:`~execsys.errors.InputError`.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from execsys.errors import InputError

if TYPE_CHECKING:
    # the package's documented names; its __init__ imports them without re-exporting for type checkers
    from securesystemslib.signer import Signer, SSlibKey  # pyright: ignore[reportPrivateImportUsage]

PREDICATE_TYPE = "https://execsys.dev/run/v1"
PAYLOAD_TYPE = "application/vnd.in-toto+json"
STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
DIGESTS = ("sha256", "blake3")
# a PEM key is a few hundred bytes; a receipt is the run record plus a line per result
KEY_FILE_LIMIT = 1 << 20
RECEIPT_LIMIT = 64 << 20


def file_digests(path: str | os.PathLike[str]) -> dict[str, str]:
    """``sha256`` and ``blake3`` of a regular file, from one read of it.

    Raises InputError for what is not a regular file (a FIFO named like a result never blocks) and
    OSError for a file that cannot be read."""
    import blake3

    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            from execsys.fsutil import file_kind

            raise InputError(f"{os.fspath(path)}: is {file_kind(mode)}, not a regular file")
        sha, b3 = hashlib.sha256(), blake3.blake3()
        while chunk := os.read(fd, 1 << 20):
            sha.update(chunk)
            b3.update(chunk)
    finally:
        os.close(fd)
    return {"sha256": sha.hexdigest(), "blake3": b3.hexdigest()}


# -- keys ------------------------------------------------------------------------------------------------


def load_signer(path: str | os.PathLike[str]) -> Signer:
    """A securesystemslib ``CryptoSigner`` for an unencrypted PEM (PKCS#8 or traditional) Ed25519
    or ECDSA private key; InputError naming the file for anything else."""
    from cryptography.hazmat.primitives.asymmetric import ec, ed25519
    from cryptography.hazmat.primitives.serialization import load_pem_private_key
    from securesystemslib.signer import CryptoSigner  # pyright: ignore[reportPrivateImportUsage]

    data = _read_key(path, "signing key")
    try:
        private = load_pem_private_key(data, password=None)
    except TypeError:
        raise InputError(f"signing key {os.fspath(path)}: encrypted; give an unencrypted PEM private key "
                         "(execsys runs unattended and asks for no passphrase)") from None
    except ValueError:
        raise InputError(f"signing key {os.fspath(path)}: not a PEM private key") from None
    if not isinstance(private, (ed25519.Ed25519PrivateKey, ec.EllipticCurvePrivateKey)):
        raise InputError(f"signing key {os.fspath(path)}: a {type(private).__name__.removeprefix('_')}; "
                         "receipts are signed with an Ed25519 or ECDSA key")
    try:
        return CryptoSigner(private)
    except ValueError as exc:  # an ECDSA curve securesystemslib has no scheme for
        raise InputError(f"signing key {os.fspath(path)}: {exc}") from None


def load_public_key(path: str | os.PathLike[str]) -> SSlibKey:
    """The securesystemslib key (with its default keyid, the one a signer made from the private
    half signs under) for a PEM public key; a PEM private key is accepted for its public half."""
    from cryptography.hazmat.primitives.serialization import load_pem_private_key, load_pem_public_key
    from securesystemslib.signer import SSlibKey  # pyright: ignore[reportPrivateImportUsage]

    data = _read_key(path, "public key")
    try:
        public: Any = load_pem_public_key(data)
    except ValueError:
        try:
            public = load_pem_private_key(data, password=None).public_key()
        except (ValueError, TypeError):
            raise InputError(f"public key {os.fspath(path)}: not a PEM public key") from None
    try:
        return SSlibKey.from_crypto(public)
    except ValueError as exc:
        raise InputError(f"public key {os.fspath(path)}: {exc}") from None


def _read_key(path: str | os.PathLike[str], what: str) -> bytes:
    from execsys.fsutil import read_bounded

    try:
        return read_bounded(path, KEY_FILE_LIMIT, what)
    except FileNotFoundError:
        raise InputError(f"{what} {os.fspath(path)}: no such file") from None


# -- building ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Subject:
    name: str  # the file's path relative to the receipt's directory
    digest: dict[str, str]


Digested = list[tuple[Path, dict[str, str]]]


def digest_results(results: list[dict[str, Any]]) -> Digested:
    """Each result (``{"path", "blake3"}`` as a record lists it) digested again now, both digests
    from one read; InputError when a result's BLAKE3 is no longer the one recorded (the file changed
    after it was digested: a receipt would vouch for bytes the record does not)."""
    digested: Digested = []
    for result in results:
        path = Path(str(result["path"]))
        digest = file_digests(path)
        recorded = result.get("blake3")
        if recorded and recorded != digest["blake3"]:
            raise InputError(f"{path}: changed since it was digested (BLAKE3 {digest['blake3'][:16]}, "
                             f"recorded {str(recorded)[:16]})")
        digested.append((path, digest))
    return digested


def subjects_for(digested: Digested, receipt: Path) -> list[Subject]:
    """A subject per digested result, named by its path relative to the receipt's directory."""
    return [Subject(os.path.relpath(path, receipt.parent), digest) for path, digest in digested]


def statement(subjects: list[Subject], predicate: dict[str, Any]) -> dict[str, Any]:
    """The in-toto Statement v1, built and validated by ``in-toto-attestation``, as its JSON object.

    The predicate is a protobuf Struct there, whose numbers are all doubles: whole numbers are
    given back as integers (an exit code of 0, not 0.0), which is the same JSON number."""
    from google.protobuf import json_format
    from in_toto_attestation.v1.resource_descriptor import ResourceDescriptor
    from in_toto_attestation.v1.statement import Statement

    built = Statement([ResourceDescriptor(name=s.name, digest=dict(s.digest)).pb for s in subjects],
                      PREDICATE_TYPE, json.loads(json.dumps(predicate)))
    try:
        built.validate()
    except ValueError as exc:
        raise InputError(f"cannot make a receipt: {exc}") from None
    return _integral(json_format.MessageToDict(built.pb))


def envelope(body: dict[str, Any], signer: Signer | None) -> dict[str, Any]:
    """The DSSE envelope (securesystemslib's) around a Statement, signed when ``signer`` is given."""
    from securesystemslib.dsse import Envelope

    payload = json.dumps(body, ensure_ascii=False, sort_keys=True, separators=(",", ":")).encode("utf-8")
    wrapped = Envelope(payload, PAYLOAD_TYPE, {})
    if signer is not None:
        wrapped.sign(signer)
    return wrapped.to_dict()


def lock_digest(lock_path: str | os.PathLike[str] | None) -> dict[str, str] | None:
    """The lock file's digests, for the predicate's identity; None when there is no lock file."""
    if not lock_path:
        return None
    try:
        return file_digests(lock_path)
    except (OSError, InputError):
        return None


def build(record: dict[str, Any], digested: Digested, receipt: Path, signer: Signer | None,
          *, attached_after: bool = False) -> dict[str, Any]:
    """The receipt for ``record`` (a run or attach record) to be written at ``receipt``: the
    envelope, its subjects the ``digested`` results (:func:`digest_results`). The predicate is
    ``record``, scrubbed, with the lock's digest beside the identity and ``attached_after``."""
    from execsys.redact import scrub

    identity = dict(record.get("identity") or {})
    identity["lock_digest"] = lock_digest(identity.get("lock"))
    predicate = scrub(dict(record, identity=identity, attached_after=attached_after))
    return envelope(statement(subjects_for(digested, receipt), predicate), signer)


def keyids(receipt_envelope: dict[str, Any]) -> list[str]:
    return [str(s.get("keyid")) for s in receipt_envelope.get("signatures") or [] if isinstance(s, dict)]


def signed_by(receipt_envelope: dict[str, Any]) -> str:
    """'signed by KEYID' or 'unsigned (no signatures)', as every output says it."""
    ids = keyids(receipt_envelope)
    return f"signed by {', '.join(ids)}" if ids else "unsigned (no signatures)"


def signed_by_key(signer: Signer | None) -> str:
    """The same words for a signer about to sign: 'signed by KEYID', or 'unsigned (no signing key)'."""
    if signer is None:
        return "unsigned (no signing key)"
    public = getattr(signer, "public_key", None)
    return f"signed by {getattr(public, 'keyid', '?')}"


# -- verifying ---------------------------------------------------------------------------------------------


@dataclass
class ReceiptCheck:
    """What :func:`verify_receipt` found. ``mismatch`` is the one line naming what failed (None: verified)."""

    path: str
    subjects: list[dict[str, Any]] = field(default_factory=list)
    keyids: list[str] = field(default_factory=list)
    signature: str = "unsigned"  # verified | unsigned | not-checked | bad
    identity: str | None = None
    lock: str | None = None  # the lock the identity was checked against
    run: str | None = None
    verdict: str | None = None
    attached_after: bool = False
    mismatch: str | None = None

    @property
    def verified(self) -> bool:
        return self.mismatch is None

    @property
    def exit_code(self) -> int:
        return 0 if self.verified else 1

    def sentence(self) -> str:
        if self.mismatch:
            return f"mismatch: {self.mismatch}"
        n = len(self.subjects)
        text = f"verified: {n} subject{'s match' if n != 1 else ' matches'} the files on disk"
        text += {"verified": f"; signed by {', '.join(self.keyids)} (signature verified)",
                 "unsigned": "; unsigned (no signatures: nothing vouches for who made it)",
                 "not-checked": f"; signed by {', '.join(self.keyids)} (signature not checked: no public key given)",
                 }.get(self.signature, "")
        if self.lock:
            text += f"; identity {str(self.identity)[:12]} is the lock's"
        if self.attached_after:
            text += "; attached after the run (descriptive only)"
        return text

    def to_json(self) -> dict[str, Any]:
        return {"receipt": self.path, "verified": self.verified, "mismatch": self.mismatch,
                "signature": self.signature, "keyids": self.keyids, "subjects": self.subjects,
                "identity": self.identity, "lock": self.lock, "run": self.run, "verdict": self.verdict,
                "attached_after": self.attached_after, "sentence": self.sentence()}


def read_receipt(path: str | os.PathLike[str]) -> tuple[Any, dict[str, Any]]:
    """The securesystemslib Envelope and the validated Statement a receipt file holds; InputError
    (one line) for a file that cannot be read or is not an execsys receipt."""
    from google.protobuf import json_format
    from in_toto_attestation.v1 import statement_pb2
    from in_toto_attestation.v1.statement import Statement
    from securesystemslib.dsse import Envelope

    from execsys.fsutil import read_bounded

    shown = os.fspath(path)
    try:
        data = json.loads(read_bounded(path, RECEIPT_LIMIT, "receipt"))
    except FileNotFoundError:
        raise InputError(f"receipt {shown}: no such file") from None
    except (ValueError, RecursionError):
        raise InputError(f"receipt {shown}: not JSON") from None
    if not isinstance(data, dict):
        raise InputError(f"receipt {shown}: not a DSSE envelope (a JSON object with payload, payloadType, "
                         "signatures)")
    try:
        wrapped = Envelope.from_dict(json.loads(json.dumps(data)))  # from_dict rewrites the dicts it reads
    except Exception as exc:  # noqa: BLE001 - KeyError, ValueError, binascii.Error, FormatError...
        raise InputError(f"receipt {shown}: not a DSSE envelope ({type(exc).__name__}: {exc})") from None
    if wrapped.payload_type != PAYLOAD_TYPE:
        raise InputError(f"receipt {shown}: payload type {wrapped.payload_type!r}, not {PAYLOAD_TYPE}")
    try:
        body = json.loads(wrapped.payload)
        if not isinstance(body, dict):
            raise ValueError("the payload is not a JSON object")
        parsed = json_format.ParseDict(body, statement_pb2.Statement())  # type: ignore[attr-defined]
        Statement.copy_from_pb(parsed).validate()
    except (ValueError, RecursionError, json_format.ParseError) as exc:
        raise InputError(f"receipt {shown}: not an in-toto Statement v1 ({exc})") from None
    if body.get("predicateType") != PREDICATE_TYPE:
        raise InputError(f"receipt {shown}: predicate type {body.get('predicateType')!r}, not an execsys "
                         f"receipt ({PREDICATE_TYPE})")
    return wrapped, body


def verify_receipt(path: str | os.PathLike[str], key: str | os.PathLike[str] | None = None,
                   lock: str | os.PathLike[str] | None = None) -> ReceiptCheck:
    """Check a receipt: its signature against ``key`` (a PEM public key), every subject's digests
    against the file on disk (named relative to the receipt's directory), and the predicate's
    identity against ``lock``. Stops at the first mismatch, named in ``mismatch``."""
    from securesystemslib.exceptions import VerificationError

    wrapped, body = read_receipt(path)
    predicate = body.get("predicate") or {}
    identity: dict[str, Any] = predicate["identity"] if isinstance(predicate.get("identity"), dict) else {}
    check = ReceiptCheck(os.fspath(path), keyids=sorted(wrapped.signatures), run=predicate.get("id"),
                         verdict=predicate.get("verdict"), identity=identity.get("id"),
                         attached_after=predicate.get("attached_after") is True)
    public = load_public_key(key) if key is not None else None  # a bad key file is exit 2 before anything
    lock_id = _lock_id(lock) if lock is not None else None

    if not wrapped.signatures:
        check.signature = "unsigned"
        if public is not None:
            check.mismatch = f"{check.path}: unsigned (no signatures), so nothing to check against key {public.keyid}"
            return check
    elif public is None:
        check.signature = "not-checked"
    else:
        try:
            wrapped.verify([public], 1)
            check.signature = "verified"
        except VerificationError:
            check.signature = "bad"
            check.mismatch = (f"{check.path}: bad signature: no signature by key {public.keyid} verifies "
                              f"(signatures by {', '.join(check.keyids)})")
            return check

    base = Path(path).parent
    for subject in body.get("subject") or []:
        name = str(subject.get("name") or "")
        digest = dict(subject.get("digest") or {})
        target = Path(name) if os.path.isabs(name) else base / name
        entry = {"name": name, "path": os.fspath(target), "digest": digest}
        check.subjects.append(entry)
        known = [algorithm for algorithm in DIGESTS if algorithm in digest]
        if not known:
            check.mismatch = f"{target}: the receipt gives no sha256 or blake3 digest to check it by"
            return check
        try:
            actual = file_digests(target)
        except FileNotFoundError:
            check.mismatch = f"{target}: missing (the receipt's subject {name})"
            return check
        except (OSError, InputError) as exc:
            check.mismatch = f"{target}: cannot be read ({getattr(exc, 'strerror', None) or exc})"
            return check
        for algorithm in known:
            if actual[algorithm] != str(digest[algorithm]).lower():
                check.mismatch = (f"{target}: {algorithm} differs (receipt {str(digest[algorithm])[:16]}..., "
                                  f"file {actual[algorithm][:16]}...)")
                return check

    if lock is not None:
        check.lock = os.fspath(lock)
        if lock_id != check.identity:
            check.mismatch = (f"{check.path}: identity {check.identity} is not the lock's ({lock_id} in "
                              f"{check.lock})")
    return check


def _lock_id(lock: str | os.PathLike[str]) -> str:
    from execsys.identity import load_lock

    return load_lock(lock).id


def _integral(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {key: _integral(value) for key, value in obj.items()}
    if isinstance(obj, list):
        return [_integral(value) for value in obj]
    if isinstance(obj, float) and obj.is_integer() and abs(obj) < 2**53:
        return int(obj)
    return obj
