"""``ProbeOptions``: what one probe was asked to do, layered flags > declaration (``[probe]``,
``[runtime]``) > lock (identity, ``budget`` for decoding), and validated before anything is sent.

Every face builds probe options here -- the CLI from its flags, the TUI from its form -- so a bad
value (a ``--timeout 0``, a key given where ``--api-key-env`` wants a variable's name, an axis that
does not exist) is refused in one place with one line, and :func:`execsys.probes.runner.run_probe`
only ever sees options that can work.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from execsys.errors import UsageError
from execsys.operation import first_given
from execsys.proc import MAX_WAIT_S
from execsys.sources import no_identity_reason

from .axes import AXES
from .cases import Case
from .margin import DEFAULT_TIE_MARGIN, DEFAULT_TOP_K

if TYPE_CHECKING:
    from execsys.declaration import Declaration
    from execsys.identity import Identity
    from execsys.sources import Sources

T = TypeVar("T")
DEFAULT_TIMEOUT = 120.0
MAX_IN_FLIGHT = 1024  # --concurrency, --load: far above any serving batch, far below a memory problem
MAX_REPEATS = 1000  # --repeats: passes are planned up front; a trillion of them was 1.2 GB in 10 s
DECODING_KEYS = ("temperature", "top_p", "top_k", "seed", "max_tokens", "repeat_penalty", "stop")
_VARIABLE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# what API keys look like (OpenAI/Anthropic, Hugging Face, GitHub, Slack, AWS): a value of that shape
# given where a variable's NAME belongs is the key itself
_KEY_SHAPED = re.compile(r"(sk-|sk_|hf_|ghp_|gho_|ghs_|ghu_|github_pat_|xox[abps]-|AKIA|ASIA)[A-Za-z0-9_\-]{12,}")
MAX_VARIABLE_NAME = 64


def declared_budget(declaration: Declaration | None, lock: Identity | None) -> dict[str, Any]:
    """The ``[budget]`` a measurement under this lock sends: the lock's declared budget (what was pinned),
    else the declaration's table. Probes and plan runs read it here, so that two measurements under one
    lock never send different decoding parameters."""
    budget = dict(lock.declared("budget")) if lock is not None else {}
    if not budget and declaration is not None:
        budget = dict(declaration.tables.get("budget") or {})
    return budget


def decoding_from_budget(budget: dict[str, Any]) -> dict[str, Any]:
    """The request parameters the identity's budget declares; temperature 0 unless declared otherwise."""
    decoding: dict[str, Any] = {"temperature": 0}
    for key in DECODING_KEYS:
        if budget.get(key) is not None:
            decoding[key] = budget[key]
    return decoding


def check_api_key_env(name: str | None) -> list[str]:
    """Refuse a value that is not a variable NAME (or is a key itself) -- never echoing it, since it may
    be the secret -- and warn when the named variable is unset. Returns the warning lines."""
    if name is None:
        return []
    if not isinstance(name, str) or _KEY_SHAPED.match(name) or len(name) > MAX_VARIABLE_NAME:
        raise UsageError("--api-key-env takes the NAME of the environment variable that holds the key "
                         "(e.g. OPENAI_API_KEY), not the key itself; nothing was recorded")
    if not _VARIABLE_NAME.fullmatch(name):
        raise UsageError("--api-key-env: not an environment variable name (letters, digits and _, "
                         "not starting with a digit); nothing was recorded")
    if not os.environ.get(name):
        return [f"--api-key-env {name}: that variable is not set, so requests go out without an API key"]
    return []


def _or(value: Any, default: T) -> T:
    """An override that may be None (not given), else its default: ``0`` counts as given."""
    return default if value is None else value


def _count(value: Any, flag: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise UsageError(f"{flag} must be a whole number 0 or more (0 turns it off), got {value!r}")
    return value


def _nats(value: Any) -> float:
    try:
        nats = float(value)
    except (TypeError, ValueError):
        raise UsageError(f"--tie-margin must be a number of nats, got {value!r}") from None
    if isinstance(value, bool) or not math.isfinite(nats) or nats < 0:
        raise UsageError(f"--tie-margin must be a number of nats 0 or more, got {value!r}")
    return nats


def _width(value: Any, flag: str) -> float:
    try:
        width = float(value)
    except (TypeError, ValueError):
        raise UsageError(f"{flag} must be a number between 0 and 1, got {value!r}") from None
    if isinstance(value, bool) or not math.isfinite(width) or not 0 < width <= 1:
        raise UsageError(f"{flag} must be a number greater than 0 and at most 1, got {value!r}")
    return width


def _seconds(value: Any, flag: str) -> float:
    """A timeout: a finite number of seconds above 0 (``0`` is refused, never replaced by a default)."""
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        raise UsageError(f"{flag} must be a number of seconds, got {value!r}") from None
    if isinstance(value, bool) or not math.isfinite(seconds) or seconds <= 0:
        raise UsageError(f"{flag} must be a number of seconds greater than 0, got {value!r}")
    if seconds > MAX_WAIT_S:  # httpx and select() overflow past it: 1e12 was an OverflowError mid-probe
        raise UsageError(f"{flag} is at most {MAX_WAIT_S:.0f} seconds (23 days), got {value!r}")
    return seconds


@dataclass
class ProbeOptions:
    axis: str
    endpoints: list[str] = field(default_factory=list)
    command: str | None = None
    cases: str | Path | None = None  # a JSON Lines file
    case_list: list[Case] | None = None  # or the cases themselves
    model: str | None = None
    n: int | None = None
    sample_seed: int | None = None
    compare: str = "output"
    extract: str | None = None
    identity: str | None = None
    identity_reason: str | None = None  # why there is no identity: the line said and recorded
    decoding: dict[str, Any] = field(default_factory=lambda: {"temperature": 0})
    repeats: int = 2
    repeats_given: bool = False
    concurrency: int = 1
    load: int | None = None
    restart: str | None = None
    ready: str | None = None
    ready_timeout: float = 120.0
    baseline: str | None = None
    order_seed: int = 0
    timeout: float = DEFAULT_TIMEOUT
    retries: int = 3
    api_key_env: str | None = None
    want_tokens: bool = False
    logprobs: int = DEFAULT_TOP_K  # top-K logprobs per token to ask for (0: off)
    tie_margin: float = DEFAULT_TIE_MARGIN  # nats: a flip at a margin at most this is a near-tie
    until_width: float | None = None  # stop once the 95% interval is at most this wide
    max_n: int | None = None  # with until_width: the most cases to take
    retry_errored: bool = False  # with resume: send the cases that errored again
    resume: bool | str = False
    max_body: int = 8 << 20
    declared_runtime: dict[str, Any] = field(default_factory=dict)  # [runtime] table, for re-observation
    # the lock's runtime (what each pass's observation is compared with); None without a lock
    pinned_runtime: dict[str, Any] | None = None
    pinned_declared_runtime: dict[str, Any] | None = None
    ledger: str | Path | None = None  # None: $EXECSYS_LEDGER or the user data dir
    warnings: list[str] = field(default_factory=list)  # said as Note events when the probe starts

    @classmethod
    def from_sources(cls, sources: Sources, **overrides: Any) -> ProbeOptions:
        """Options from what was given (``overrides``: the CLI's flags or the TUI's form, None = not
        given) over the declaration's ``[probe]`` and ``[runtime]`` tables over the lock (its identity,
        and its ``budget`` for decoding). Validates: bad input raises UsageError/InputError here.

        With no lock the options carry the one line that says the probe will not count toward any
        scope, naming where the lock was looked for (``identity_reason``); the ledger is the
        sources' unless ``ledger`` is given."""
        declaration, lock = sources.declaration, sources.lock
        unknown = set(overrides) - {f for f in cls.__dataclass_fields__ if f not in ("identity", "identity_reason",
                                                                                    "decoding", "warnings",
                                                                                    "declared_runtime",
                                                                                    "pinned_runtime",
                                                                                    "pinned_declared_runtime",
                                                                                    "repeats_given")}
        if unknown:
            raise TypeError(f"unknown probe option(s): {', '.join(sorted(unknown))}")
        given = overrides.get
        axis = given("axis")
        if axis not in AXES:
            raise UsageError(f"unknown axis {axis!r}: choose one of {', '.join(AXES)} or merge")
        probe_t = declaration.tables.get("probe", {})
        runtime_t = declaration.tables.get("runtime", {})
        command = given("command")
        endpoints = [e for e in (given("endpoints") or []) if e]
        if not endpoints and not command and runtime_t.get("endpoint"):
            endpoints = [runtime_t["endpoint"]]
        declared_cases = probe_t.get("cases")
        if isinstance(declared_cases, str) and declared_cases and declaration.path is not None:
            # a path in execsys.toml is relative to the file, as the grader probe's and the doctor's are;
            # --cases is relative to where it was typed
            declared_cases = os.path.join(Path(declaration.path).resolve().parent, os.path.expanduser(declared_cases))
        cases = first_given(given("cases"), declared_cases)
        if not cases and given("case_list") is None:
            raise UsageError("--cases FILE is required (JSON Lines: {\"id\", \"prompt\" | \"messages\"})")
        if given("sample_seed") is not None and given("n") is None:
            raise UsageError("--sample SEED needs --n N (how many cases to sample)")
        repeats = given("repeats")
        if repeats is not None and repeats < 2:
            raise UsageError("--repeats must be at least 2")
        budget = declared_budget(declaration, lock)
        api_key_env = first_given(given("api_key_env"), probe_t.get("api_key_env"), runtime_t.get("api_key_env"))
        warnings = check_api_key_env(api_key_env)
        _refuse_untrusted_commands(declaration, axis, given)
        reason = no_identity_reason(sources.lock_path, "this probe") if lock is None else None
        options = cls(
            axis=axis,
            endpoints=endpoints,
            command=command,
            cases=cases,
            case_list=given("case_list"),
            model=given("model"),
            n=first_given(given("n"), probe_t.get("n")),
            sample_seed=given("sample_seed"),
            compare=first_given(given("compare"), probe_t.get("compare")) or "output",
            extract=first_given(given("extract"), probe_t.get("extract")),
            identity=lock.id if lock is not None else None,
            identity_reason=reason,
            decoding=decoding_from_budget(budget),
            repeats=repeats if repeats is not None else 2,
            repeats_given=repeats is not None,
            concurrency=_or(given("concurrency"), 1),
            load=given("load"),
            restart=first_given(given("restart"), runtime_t.get("restart")),
            ready=first_given(given("ready"), runtime_t.get("ready")),
            ready_timeout=_seconds(first_given(given("ready_timeout"), runtime_t.get("ready_timeout"), 120.0),
                                   "--ready-timeout"),
            baseline=given("baseline"),
            order_seed=_or(given("order_seed"), 0),
            timeout=_seconds(first_given(given("timeout"), probe_t.get("timeout"), DEFAULT_TIMEOUT), "--timeout"),
            retries=_or(given("retries"), 3),
            api_key_env=api_key_env,
            want_tokens=bool(given("want_tokens")),
            logprobs=_count(first_given(given("logprobs"), probe_t.get("logprobs"), DEFAULT_TOP_K), "--logprobs"),
            tie_margin=_nats(first_given(given("tie_margin"), probe_t.get("tie_margin"), DEFAULT_TIE_MARGIN)),
            until_width=_width(given("until_width"), "--until-width") if given("until_width") is not None else None,
            max_n=given("max_n"),
            retry_errored=bool(given("retry_errored")),
            resume=first_given(given("resume"), False) or False,
            max_body=_or(given("max_body"), 8 << 20),
            declared_runtime={k: v for k, v in runtime_t.items() if k in ("engine", "process", "env_file",
                                                                            "api_key_env", "endpoint")},
            pinned_runtime=dict(lock.observed("runtime")) if lock is not None else None,
            pinned_declared_runtime=dict(lock.declared("runtime")) if lock is not None else None,
            ledger=first_given(given("ledger"), sources.ledger_path),
            warnings=warnings,
        )
        options.validate()
        return options

    def validate(self) -> None:
        if self.axis not in AXES:
            raise UsageError(f"unknown axis {self.axis!r}: choose one of {', '.join(AXES)}")
        if bool(self.endpoints) == bool(self.command):
            raise UsageError("give the target as --endpoint URL or --command CMD (exactly one kind)")
        if self.cases is None and self.case_list is None:
            raise UsageError("--cases FILE is required (JSON Lines: {\"id\", \"prompt\" | \"messages\"})")
        if self.compare not in ("output", "outcome"):
            raise UsageError("--compare must be output or outcome")
        if self.compare == "outcome" and not self.extract:
            raise UsageError("--compare outcome needs --extract (regex:PATTERN, json:PATH, last-number or command:CMD)")
        if self.repeats < 2:
            raise UsageError("--repeats must be at least 2")
        if self.repeats > MAX_REPEATS:
            raise UsageError(f"--repeats is at most {MAX_REPEATS} passes")
        if self.concurrency < 1:
            raise UsageError("--concurrency must be at least 1")
        if self.concurrency > MAX_IN_FLIGHT or (self.load is not None and self.load > MAX_IN_FLIGHT):
            # each request in flight is a thread and a connection: a billion of them is memory, not a probe
            raise UsageError(f"--concurrency and --load are at most {MAX_IN_FLIGHT} requests in flight")
        if self.retries < 0:
            raise UsageError("--retries must be 0 or more")
        if self.n is not None and self.n < 1:
            raise UsageError("--n must be at least 1")
        _seconds(self.timeout, "--timeout")
        _seconds(self.ready_timeout, "--ready-timeout")
        if self.max_n is not None and self.until_width is None:
            raise UsageError("--max-n goes with --until-width W (stop once the interval is at most W wide)")
        if self.max_n is not None and self.max_n < 1:
            raise UsageError("--max-n must be at least 1")
        if self.until_width is not None and self.axis == "restart":
            raise UsageError("--until-width takes cases in rounds, and the restart axis restarts before every "
                             "pass: give --n instead")
        if self.retry_errored and not self.resume:
            raise UsageError("--retry-errored goes with --resume (it retries the errored cases of a stored run)")
        AXES[self.axis].validate(self)


def _refuse_untrusted_commands(declaration: Declaration, axis: str, given: Any) -> None:
    """A declared command this probe would run (the restart axis's ``runtime.restart`` and a command
    ``runtime.ready``, a ``[probe] extract = "command:..."``) from a declaration the user has not
    trusted: refused before anything runs. What the flags give is the user's own and is never gated."""
    from execsys import trust

    runtime_t = declaration.tables.get("runtime", {})
    if axis == "restart":
        if given("restart") is None and runtime_t.get("restart"):
            trust.require(declaration, "runtime.restart")
        ready = runtime_t.get("ready")
        if given("ready") is None and ready and not str(ready).startswith(("http://", "https://")):
            trust.require(declaration, "runtime.ready")
    extract = declaration.tables.get("probe", {}).get("extract")
    if given("extract") is None and isinstance(extract, str) and extract.startswith("command:"):
        trust.require(declaration, "probe.extract = command:...")
