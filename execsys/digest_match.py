"""The cross-host artifact digest verdict: does every site hold the same bytes?

``execsys digest PATH --host gpu1 --host gpu2`` (and ``--expect``/``--lock``) hashes the artifact
here and on each host over SSH, then compares every site with one reference digest -- the
expected one when given, else this machine's, else the first host that could compute it. A
mismatch is an integrity defect of the placement (a run there would measure other weights); a
site where the digest could not be computed leaves the placement unverified. Both are findings
(exit 1), never a quiet pass.

    options = DigestMatchOptions.from_sources(None, lock, path="/srv/m", hosts=["gpu1"])
    match = run_digest_match(options, on_event=print)       # LocalHashed, SiteDigested, ...
    match.verdict, match.to_json()

Hashing itself lives in :mod:`execsys.digest`; this module only decides what the digests mean.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from execsys.errors import UsageError
from execsys.operation import Event, OnEvent, emit, first_given, new_cancel

if TYPE_CHECKING:
    from execsys.declaration import Declaration
    from execsys.digest import DigestResult
    from execsys.identity import Identity

__all__ = ["DigestMatch", "DigestMatchOptions", "HashProgress", "LocalHashed", "Site", "SiteDigested",
           "run_digest_match"]

DEFAULT_TIMEOUT = 600.0
LOCAL = "local"


@dataclass(frozen=True)
class DigestMatchOptions:
    """What to compare: ``path`` here and on ``hosts``, against ``expected`` (or the local digest)."""

    path: str
    hosts: tuple[str, ...] = ()
    expected: str | None = None
    expected_source: str | None = None  # "--expect", "lock <path>"
    timeout: float = DEFAULT_TIMEOUT

    @classmethod
    def from_sources(cls, declaration: Declaration | None = None, lock: Identity | None = None, *,
                     path: str | None = None, hosts: list[str] | None = None, expect: str | None = None,
                     timeout: float | None = None) -> DigestMatchOptions:
        """The path given, else the declared ``[artifact] path``. A ``lock`` given here supplies the
        expected digest (``--lock``: the pinned artifact's observed digest); ``expect`` and a lock
        together are refused, as is a host that is no ssh destination -- before anything is hashed."""
        from execsys.ssh import Destination

        if expect is not None and lock is not None:
            raise UsageError("give --expect or --lock, not both")
        for host in hosts or []:
            try:
                Destination.parse(host)
            except ValueError as exc:  # e.g. '-oProxyCommand=...': refused before anything runs
                raise UsageError(f"--host: {exc}") from None
        target = first_given(path, _declared_artifact(declaration))
        if not target:
            raise UsageError("give the artifact PATH to digest")
        expected, source = None, None
        if expect is not None:
            expected = expect.strip().lower()
            if len(expected) != 64 or any(c not in "0123456789abcdef" for c in expected):
                raise UsageError(f"--expect {expect!r}: not a BLAKE3 hex digest (64 hex characters)")
            source = "--expect"
        elif lock is not None:
            expected = _pinned_digest(lock)
            where = lock.source or lock.id
            if not expected:
                raise UsageError(f"{where}: the lock records no artifact digest")
            source = f"lock {where}"
        if timeout is not None and not timeout > 0:
            raise UsageError(f"--timeout {timeout}: must be greater than 0")
        return cls(str(target), tuple(hosts or ()), expected, source,
                   DEFAULT_TIMEOUT if timeout is None else float(timeout))

    @property
    def compares(self) -> bool:
        """Whether there is anything to compare (a host or an expected digest), not just a digest to print."""
        return bool(self.hosts) or self.expected is not None


def _declared_artifact(declaration: Declaration | None) -> str | None:
    """``[artifact] path``, relative to the declaration's directory as every declared path is."""
    import os

    if declaration is None or not declaration.get("artifact", "path"):
        return None
    declared = os.path.expanduser(str(declaration.get("artifact", "path")))
    if os.path.isabs(declared) or declaration.path is None:
        return declared
    return os.path.join(os.path.dirname(str(declaration.path)), declared)


def _pinned_digest(lock: Identity) -> str | None:
    digest = ((lock.components.get("artifact") or {}).get("observed") or {}).get("digest")
    return digest if isinstance(digest, str) and digest else None


# -- events -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class HashProgress(Event):
    """Bytes of the local artifact hashed so far."""

    done: int
    total: int


@dataclass(frozen=True)
class LocalHashed(Event):
    """The local digest (``result``), or why it could not be computed here (``error``)."""

    result: DigestResult | None
    error: str | None


@dataclass(frozen=True)
class SiteDigested(Event):
    """One remote host answered (or could not): its site row, before the verdict."""

    host: str
    digest: str | None
    method: str | None
    error: str | None


# -- the report ---------------------------------------------------------------------------------------


@dataclass
class Site:
    """One place the artifact should be: ``local`` or an SSH destination, with its status."""

    host: str
    digest: str | None
    method: str | None
    error: str | None
    status: str = "unavailable"  # match | mismatch | unavailable

    def to_json(self) -> dict[str, Any]:
        return {"host": self.host, "digest": self.digest, "method": self.method, "error": self.error,
                "status": self.status}


@dataclass
class DigestMatch:
    """Every site against one reference digest: the artifact digest match rate and the verdict."""

    path: str
    local: DigestResult | None
    reference: str | None
    reference_source: str | None
    sites: list[Site] = field(default_factory=list)

    @property
    def computed(self) -> list[Site]:
        return [s for s in self.sites if s.digest is not None]

    @property
    def m(self) -> int:
        return sum(1 for s in self.computed if s.status == "match")

    @property
    def n(self) -> int:
        return len(self.computed)

    @property
    def mismatched(self) -> list[str]:
        return [s.host for s in self.sites if s.status == "mismatch"]

    @property
    def unavailable(self) -> list[str]:
        return [s.host for s in self.sites if s.status == "unavailable"]

    @property
    def verdict(self) -> str:
        if self.mismatched:
            return "integrity-defect"
        return "unverified" if self.unavailable else "match"

    @property
    def sentence(self) -> str:
        mismatched, unavailable = self.mismatched, self.unavailable
        if mismatched:
            return (f"integrity defect: {', '.join(mismatched)} {'does' if len(mismatched) == 1 else 'do'} not hold "
                    "the pinned artifact; fix the placement before running anything there")
        if unavailable:
            return f"not verified on {', '.join(unavailable)}: the digest could not be computed there"
        return f"every site holds the same artifact ({self.m}/{self.n})"

    @property
    def exit_code(self) -> int:
        return 0 if self.verdict == "match" else 1

    def to_json(self) -> dict[str, Any]:
        """The fields ``execsys digest --host ... --json`` adds beside the local digest."""
        return {
            "reference": {"digest": self.reference, "source": self.reference_source},
            "sites": [s.to_json() for s in self.sites],
            "match_rate": {"m": self.m, "n": self.n, "rate": (self.m / self.n) if self.n else None},
            "verdict": self.verdict,
            "sentence": self.sentence,
        }


def run_digest_match(options: DigestMatchOptions, on_event: OnEvent | None = None,
                     cancel: threading.Event | None = None) -> DigestMatch:
    """Hash here, then on every host concurrently, and compare each site with the reference digest.

    The local digest failing is kept as the local site's error when there are hosts (the artifact
    may live only on them); without hosts it is the answer, raised as it is (an ``InputError``). A
    cancel before the hosts are asked leaves them ``unavailable`` ("cancelled")."""
    from execsys.digest import digest_path, remote_digest

    cancel = new_cancel(cancel)
    local = None
    local_error = None
    try:
        local = digest_path(options.path, progress=lambda done, total: emit(on_event, HashProgress(done, total)))
    except Exception as exc:  # noqa: BLE001 - the artifact may live only on the hosts: their answer still counts
        if not options.hosts:
            raise
        local_error = str(exc)
    emit(on_event, LocalHashed(local, local_error))

    sites: list[Site] = []
    if local is not None:
        sites.append(Site(LOCAL, local.digest, "execsys", None))
    elif local_error:
        sites.append(Site(LOCAL, None, None, local_error))

    def one(host: str) -> Site:
        if cancel.is_set():
            site = Site(host, None, None, "cancelled")
        else:
            found = remote_digest(host, options.path, options.timeout)
            site = Site(found.host, found.digest, found.method, found.error)
        emit(on_event, SiteDigested(site.host, site.digest, site.method, site.error))
        return site

    if options.hosts:
        with ThreadPoolExecutor(max_workers=max(1, min(8, len(options.hosts)))) as pool:
            sites += list(pool.map(one, options.hosts))

    if options.expected is not None:
        reference, source = options.expected, options.expected_source
    elif local is not None:
        reference, source = local.digest, LOCAL
    else:
        first = next((s for s in sites if s.digest), None)
        reference = first.digest if first else None
        # the first host, as given, names the reference even when it is not the one that answered
        source = f"first host ({sites[1].host})" if reference and len(sites) > 1 else None
    for site in sites:
        if site.digest is not None:
            site.status = "match" if site.digest == reference else "mismatch"
    return DigestMatch(options.path, local, reference, source, sites)
