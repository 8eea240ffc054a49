"""The one spelling of "now" in every record: UTC, milliseconds, ``Z`` (``2026-12-01T16:44:33.123Z``).

Its own module so that what stamps a record (``pin``, a probe, a plan) need not import the ledger,
and with it sqlite3 and the OpenSSL-backed ``secrets``: ``execsys_facts`` pins on every host of a fleet.
"""

from __future__ import annotations

from datetime import datetime, timezone


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")
