"""Human output for a doctor report, in the manner of ``flutter doctor``.

One line per hazard: the status symbol, the hazard id and a short summary (which names any
accepted findings); with ``verbose`` the evidence (accepted findings marked ``accepted (<id>)``),
the fix and the ids of the active findings follow, indented. A closing line counts the
statuses. Symbols never carry meaning by colour alone (✓ ! ✗ – ?).
"""

from __future__ import annotations

from execsys.console import STYLES, SYMBOLS
from execsys.doctor.model import ACCEPTABLE, STATUSES, DoctorReport, HazardResult, HostReport
from execsys.redact import redact_text


def hazard_lines(result: HazardResult, verbose: bool = False) -> list[tuple[str, str]]:
    """(style, text) pairs for one hazard row, plus evidence and fix when verbose."""
    rows = [(STYLES[result.status], f"[{SYMBOLS[result.status]}] {result.id}: {result.summary}")]
    if verbose:
        rows += [("", f"    • {line}") for line in result.evidence]
        if result.fix and result.status in ("warn", "fail", "error"):
            rows.append(("bold", f"    fix: {result.fix}"))
        active = list(dict.fromkeys(f.id for f in result.findings if f.active and f.level in ACCEPTABLE))
        if active:
            # the ids are what `[doctor] accept` takes; accepted ones already show in the evidence
            rows.append(("dim", f"    finding ids: {', '.join(active)}"))
        if result.duration_s >= 0.05:
            rows.append(("dim", f"    ({result.duration_s:.2f}s)"))
    return rows


def host_heading(report: HostReport) -> str:
    h = report.host
    where = h.get("hostname") or report.name
    bits = [b for b in (h.get("os"), h.get("kernel"), h.get("arch")) if b]
    label = "local" if report.name == "local" else report.name
    head = f"{label}: {where}" + (f" ({', '.join(bits)})" if bits else "")
    if report.error:
        head += f" -- not inspected: {report.error}"
    return head


def count_line(counts: dict[str, int], duration_s: float, verdict: str, accepted: int = 0) -> str:
    labels = {"ok": "ok", "warn": "warning", "fail": "failed", "skip": "skipped", "error": "error"}
    parts = []
    for status in STATUSES:
        if counts[status]:
            plural = "s" if counts[status] != 1 and status in ("warn", "error") else ""
            parts.append(f"{counts[status]} {labels[status]}{plural}")
    if accepted:
        parts.append(f"{accepted} finding{'s' if accepted != 1 else ''} accepted")
    tail = "no blocking hazards" if verdict == "clean" else "hazards found"
    return f"Doctor summary: {', '.join(parts) or 'nothing checked'} in {duration_s:.1f}s -- {tail}."


def render(report: DoctorReport, console, verbose: bool = False) -> None:
    from rich.markup import escape as rich_escape

    from execsys.termsafe import shown

    def escape(text: str) -> str:
        # a host given as ssh://user:password@host must not print its password (JSON is scrubbed too);
        # evidence quotes PATH entries, argv and file names: each line stays one line, its controls visible
        return rich_escape(shown(redact_text(text)))

    many = len(report.hosts) > 1
    for index, host in enumerate(report.hosts):
        if many:
            if index:
                console.print()
            console.print(f"[bold]{escape(host_heading(host))}[/]")
        for result in host.hazards:
            for style, text in hazard_lines(result, verbose):
                console.print(f"[{style}]{escape(text)}[/]" if style else escape(text))
    console.print()
    accepted = sum(len(r.accepted) for r in report.hazards)
    console.print(escape(count_line(report.counts(), report.duration_s, report.verdict, accepted)))
