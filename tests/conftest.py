from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest

pytest_plugins = [
    "tests.fixtures.markers",
    "tests.fixtures.common",
    "tests.fixtures.sshd",
    "tests.fixtures.llama",
    "tests.fixtures.slurm",
    "tests.fixtures.tui",
    "tests.fixtures.vllm",
]

EXPECTS_ERROR = "expects_error_notification"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", f"{EXPECTS_ERROR}: this TUI test expects the app to show an error "
                                       "notification (without it, any error notification fails the test)")


@pytest.fixture(autouse=True)
def _fail_on_an_unexpected_error_notification(request: pytest.FixtureRequest,
                                              monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """TUI workers run with exit_on_error=False and report a crash (or a refused action) as an error
    notification, so a step whose worker crashed would otherwise pass unless the test looked. Every
    error notification fails the test, unless the test is marked ``expects_error_notification``."""
    app_module = sys.modules.get("textual.app")
    if app_module is None:  # nothing in this session loaded Textual: no app can notify
        yield
        return
    shown: list[str] = []
    original = app_module.App.notify

    def notify(self, message: str, *, severity: str = "information", **kwargs) -> None:
        if severity == "error":
            shown.append(f"{kwargs.get('title') or 'error'}: {message}")
        return original(self, message, severity=severity, **kwargs)

    monkeypatch.setattr(app_module.App, "notify", notify)
    yield
    if shown and request.node.get_closest_marker(EXPECTS_ERROR) is None:
        pytest.fail("the app showed an error notification the test did not expect (mark the test "
                    f"@pytest.mark.{EXPECTS_ERROR} if it should): " + " | ".join(shown), pytrace=False)
