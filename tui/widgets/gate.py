"""The gate banner on the Probes and Scope & plan steps.

Until the doctor has checked every current host and nothing fails, a run started here would
be measured on an environment with a known defect; the banner says so, names what fails, and
offers the explicit override (recorded with the run). Symbols and words carry the state, not
colour alone.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.text import Text
from textual.widgets import Static

from execsys.console import SYMBOLS

if TYPE_CHECKING:
    from execsys.tui.app import ExecsysApp


class GateBanner(Static):
    if TYPE_CHECKING:
        @property
        def app(self) -> ExecsysApp: ...  # shown only inside ExecsysApp
    """One or two lines: open (✓), overridden (!), or closed (✗) with the reason and the way out."""

    DEFAULT_CSS = """
    GateBanner {
        height: auto;
        padding: 0 1;
        background: $error 20%;
    }
    GateBanner.-open {
        background: $success 15%;
    }
    GateBanner.-overridden {
        background: $warning 20%;
    }
    """

    def __init__(self, what: str, **kwargs) -> None:
        super().__init__("", **kwargs)
        self.what = what

    def on_mount(self) -> None:
        for name in ("doctor_verdict", "gate_override"):
            self.watch(self.app, name, self.refresh_gate, init=False)
        self.refresh_gate()

    def refresh_gate(self, *_: object) -> None:
        app = self.app
        doctor = app.doctor
        self.set_class(doctor.gate_open(), "-open")
        self.set_class(not doctor.gate_open() and app.gate_override is not None, "-overridden")
        text = Text()
        if doctor.gate_open():
            text.append(f"{SYMBOLS['ok']} gate open: ", style="bold")
            text.append(f"the doctor found no failing hazard on {', '.join(doctor.hosts)}")
        elif app.gate_override is not None:
            text.append(f"{SYMBOLS['warn']} gate overridden: ", style="bold")
            text.append(f"{app.gate_override['reason']}; the override (verdict and time) is recorded "
                        f"with each {self.what}")
        else:
            text.append(f"{SYMBOLS['fail']} gate closed: ", style="bold")
            text.append(f"{doctor.gate_reason()}. Fix and re-run the doctor (1), or override with ctrl+o.")
        self.update(text)
