"""Which system a probe measured: the serving runtime observed at the start and end of every pass.

A probe measures whatever answers its requests. An engine restarted into other flags after the lock
was pinned still answers, and without a look at it the probe's m/n would count for the pinned
identity -- a measurement of another system. So every pass observes the runtime the way ``execsys
run``'s watch does (:class:`execsys.identity.serving.ServingObserver`: models, version,
the serving process's pid, start time, argv and numerics environment) before its first request and
after its last, and compares that with the lock's pinned runtime. The answering model and the
``system_fingerprint`` are not asked with a completion of its own (one more request between the
probe's cases would be counted and cached by the engine): every response of the pass names them, and
a pass answered by a model the lock does not list, or under another fingerprint, differs too
(:func:`answered_differences`).

* ``matches-lock``  every pinned fact was observed and is the same, on every pass (every host);
* ``differs``       some pinned fact is not what answered: the record counts toward no identity;
* ``unverified``    there was nothing to compare with (no lock, a lock that pins no serving runtime,
                    a command target with none declared) or a pinned fact could not be observed.

The same observations are the axes' evidence of their event: the serving process (pid and start
time) before and after a restart, and against a redeploy baseline's (:func:`process_of`). Where the
serving process cannot be observed at all (an endpoint on another host, a provider's API), they say
so, and the event is unverified rather than assumed.
"""

from __future__ import annotations

from typing import Any

from execsys.delta import brief, value_change
from execsys.ledger import now_iso

MATCHES, DIFFERS, UNVERIFIED = "matches-lock", "differs", "unverified"
VERDICTS = (MATCHES, DIFFERS, UNVERIFIED)
STEP_PREFIX = "system:"  # probe-step rows: system:<pass>:start, system:<pass>:end

# Facts the lock holds that move on every restart or are the engine's mood of the moment: never
# compared with the lock (pid and start time are the axes' evidence instead).
_NOT_PINNED = {"runtime.process.pid", "runtime.process.started_at", "runtime.endpoint.error"}
# Facts an engine may give on one look and not the next (no fingerprint under load): compared only
# when both sides have a value.
_OPTIONAL = {"runtime.endpoint.system_fingerprint", "runtime.endpoint.answered_model"}

SENTENCE = "the engine answering this probe is not the pinned system"
SUBJECT = "this probe"  # what the sentence is about: a plan run's arm says "this plan"


def step_key(pass_index: int, at: str) -> str:
    return f"{STEP_PREFIX}{pass_index}:{at}"


def pinned_facts(pinned_runtime: dict[str, Any] | None) -> dict[str, Any]:
    """The lock's observed runtime, flattened as an observation is (no pid: a lock never holds one)."""
    from execsys.identity.serving import flatten

    return flatten(pinned_runtime or {}, {}) if pinned_runtime else {}


def lock_pins_a_runtime(pinned_declared: dict[str, Any] | None) -> bool:
    declared = pinned_declared or {}
    return bool(declared.get("endpoint") or declared.get("process"))


def compare(pinned: dict[str, Any], observed: dict[str, Any]) -> tuple[list[dict[str, Any]], list[str]]:
    """What differs between the pinned facts and an observation, and which pinned facts were not observed."""
    differences: list[dict[str, Any]] = []
    unobserved: list[str] = []
    for key in sorted(pinned):
        if key in _NOT_PINNED:
            continue
        want, got = pinned.get(key), observed.get(key)
        if key in _OPTIONAL and (want is None or got is None):
            continue
        if key not in observed or (got is None and want is not None):
            unobserved.append(key)
            continue
        if want != got:
            differences.append({"component": key, "pinned": want, "observed": got})
    answered = observed.get("runtime.endpoint.answered_model")
    models = pinned.get("runtime.endpoint.models")
    if isinstance(answered, str) and isinstance(models, list) and models and answered not in models:
        differences.append({"component": "runtime.endpoint.answered_model", "pinned": models, "observed": answered})
    return differences, unobserved


def describe(difference: dict[str, Any]) -> str:
    """One difference in words: ``runtime argv +--n_batch 7``, ``runtime engine version 0.3.1 -> 0.3.2``
    (:func:`execsys.delta.value_change`: only what moved; ASCII arrows, as records are read anywhere)."""
    key = str(difference["component"])
    label = "runtime " + key.removeprefix("runtime.").replace("process.", "").replace("endpoint.", "") \
        .replace(".", " ").replace("_", " ")
    old, new = difference.get("pinned"), difference.get("observed")
    if key == "runtime.endpoint.models" and (isinstance(old, list) or isinstance(new, list)):
        return f"{label} {brief(old)} -> {brief(new)}"  # which models are listed, not an edit of a list
    return f"{label} {value_change(old, new, arrow='->')}"


def sentence(differences: list[dict[str, Any]], *, subject: str = SUBJECT) -> str:
    seen: list[str] = []
    for difference in differences:
        words = describe(difference)
        if words not in seen:
            seen.append(words)
    return f"{SENTENCE.replace(SUBJECT, subject)}: " + "; ".join(seen)


def process_of(observation: dict[str, Any] | None) -> dict[str, Any] | None:
    """The serving process an observation saw (``{"pid", "started_at"}``), or None when it saw none."""
    if not isinstance(observation, dict):
        return None
    pid, started = observation.get("runtime.process.pid"), observation.get("runtime.process.started_at")
    if pid is None or started is None:
        return None
    return {"pid": pid, "started_at": started}


def process_words(process: dict[str, Any]) -> str:
    from datetime import datetime, timezone

    try:
        when = datetime.fromtimestamp(float(process["started_at"]), timezone.utc).isoformat(timespec="seconds")
    except (TypeError, ValueError, OverflowError, OSError):
        when = str(process.get("started_at"))
    return f"pid {process.get('pid')}, started {when.replace('+00:00', 'Z')}"


class SystemObserver:
    """Observes one target's serving runtime for the passes of one probe and judges it against the lock.

    ``observe`` is called at the start and end of a pass; each observation is kept as a probe-step
    (a resumed probe keeps the earlier ones) and a differing one is said at once through ``on_differs``.
    """

    def __init__(self, *, pinned_runtime: dict[str, Any] | None, pinned_declared: dict[str, Any] | None,
                 lock_id: str | None) -> None:
        from execsys.identity.serving import ServingObserver

        self.lock_id = lock_id
        self.pinned = pinned_facts(pinned_runtime) if lock_pins_a_runtime(pinned_declared) else {}
        self.comparable = lock_id is not None and bool(self.pinned)
        self._observers: dict[int, ServingObserver] = {}

    def observe(self, target: int, declared_runtime: dict[str, Any], label: str, at: str) -> dict[str, Any]:
        """One observation of ``target``'s runtime, judged: ``{"pass", "at", "time", "observed", "verdict",
        "differences", "unobserved", "reason"}``."""
        from execsys.identity.serving import ServingObserver

        entry: dict[str, Any] = {"pass": label, "at": at, "time": now_iso(), "observed": {}, "differences": [],
                                 "unobserved": [], "reason": None}
        if not (declared_runtime.get("endpoint") or declared_runtime.get("process")):
            entry.update(verdict=UNVERIFIED, reason="no serving runtime to observe (a command target with no "
                                                    "[runtime] endpoint or process declared)")
            return entry
        observer = self._observers.setdefault(target, ServingObserver(completions=False))
        try:
            observed = observer(declared_runtime)
        except Exception as exc:  # noqa: BLE001 - a look that fails is unverified, never fatal to the probe
            entry.update(verdict=UNVERIFIED, reason=f"could not observe the runtime ({type(exc).__name__}: {exc})")
            return entry
        entry["observed"] = observed
        if observed.get("runtime.endpoint.error"):
            entry.update(verdict=UNVERIFIED, reason=f"the endpoint did not answer: {observed['runtime.endpoint.error']}")
            return entry
        if not self.comparable:
            entry.update(verdict=UNVERIFIED, reason="no pinned identity to compare with" if self.lock_id is None
                         else "the lock pins no serving runtime (no [runtime] endpoint or process)")
            return entry
        differences, unobserved = compare(self.pinned, observed)
        entry["differences"], entry["unobserved"] = differences, unobserved
        if differences:
            entry["verdict"] = DIFFERS
        elif unobserved:
            entry.update(verdict=UNVERIFIED, reason="not observable from here: " + ", ".join(unobserved))
        else:
            entry["verdict"] = MATCHES
        return entry


def overall_verdict(entries: list[dict[str, Any]], differences: list[dict[str, Any]]) -> str:
    """One verdict from several looks: any difference differs; matches only when every look matched."""
    if differences:
        return DIFFERS
    if entries and all(e.get("verdict") == MATCHES for e in entries):
        return MATCHES
    return UNVERIFIED


def summarise(entries: list[dict[str, Any]], *, lock_id: str | None, target: str | None = None,
              subject: str = SUBJECT) -> dict[str, Any]:
    """``system_check`` from one target's observations (in pass order, start before end)."""
    differences = [dict(d, **{"pass": e["pass"], "at": e["at"]}) for e in entries for d in e.get("differences") or []]
    verdict = overall_verdict(entries, differences)
    reasons = [e["reason"] for e in entries if e.get("reason")]
    check: dict[str, Any] = {
        "verdict": verdict,
        "lock": lock_id,
        "at_start": entries[0]["observed"] if entries else None,
        "at_end": entries[-1]["observed"] if entries else None,
        "differences": differences,
        "reason": (reasons[0] if reasons else "no observation was taken") if verdict == UNVERIFIED else None,
        "sentence": sentence(differences, subject=subject) if differences else None,
        "observations": [{"pass": e["pass"], "at": e["at"], "time": e.get("time"), "verdict": e.get("verdict"),
                          "process": process_of(e.get("observed"))} for e in entries],
    }
    if target is not None:
        check = {"endpoint": target, **check}
    return check


def answered_differences(passes: list[dict[str, Any]], pinned_runtime: dict[str, Any] | None) -> list[dict[str, Any]]:
    """What the passes' own responses say that the lock does not: a model it does not list (the answering
    model, as the watch asks it), a ``system_fingerprint`` other than the pinned one."""
    endpoint = (pinned_runtime or {}).get("endpoint") or {}
    models, fingerprint = endpoint.get("models"), endpoint.get("system_fingerprint")
    found = []
    for info in passes:
        if info.get("source") != "send":
            continue
        where = {"pass": info.get("label"), "at": "responses"}
        listed: list[Any] = models if isinstance(models, list) else []
        other = [m for m in info.get("models") or [] if listed and m not in listed]
        if other:
            found.append({"component": "runtime.endpoint.answered_model", "pinned": list(listed),
                          "observed": other[0] if len(other) == 1 else other, **where})
        seen = [f for f in info.get("system_fingerprints") or [] if fingerprint and f != fingerprint]
        if seen:
            found.append({"component": "runtime.endpoint.system_fingerprint", "pinned": fingerprint,
                          "observed": seen[0] if len(seen) == 1 else seen, **where})
    return found


def with_differences(check: dict[str, Any], extra: list[dict[str, Any]], *,
                     subject: str = SUBJECT) -> dict[str, Any]:
    """``check`` with more differences (the answering model of the responses): then it differs."""
    if not extra:
        return check
    differences = list(check.get("differences") or []) + extra
    return {**check, "verdict": DIFFERS, "differences": differences, "reason": None,
            "sentence": sentence(differences, subject=subject)}


def combine(per_host: list[dict[str, Any]], *, lock_id: str | None) -> dict[str, Any]:
    """The hosts axis: one check per host; the probe differs when any host does."""
    verdicts = [h["verdict"] for h in per_host]
    verdict = DIFFERS if DIFFERS in verdicts else (MATCHES if verdicts and set(verdicts) == {MATCHES} else UNVERIFIED)
    differences = [dict(d, endpoint=h.get("endpoint")) for h in per_host for d in h.get("differences") or []]
    reasons = [f"{h.get('endpoint')}: {h['reason']}" for h in per_host if h.get("reason")]
    return {
        "verdict": verdict,
        "lock": lock_id,
        "at_start": per_host[0]["at_start"] if per_host else None,
        "at_end": per_host[0]["at_end"] if per_host else None,
        "differences": differences,
        "reason": (reasons[0] if reasons else "no observation was taken") if verdict == UNVERIFIED else None,
        "sentence": "; ".join(f"{h.get('endpoint')}: {h['sentence']}" for h in per_host if h.get("sentence")) or None,
        "hosts": per_host,
    }
