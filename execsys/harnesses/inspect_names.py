"""Which model answered an Inspect model event, named as the endpoint names it (standard library only).

Inspect labels the outputs it makes itself -- the placeholder of a pending event, the output of an
attempt that failed and was retried -- with the provider-qualified model it requested
(``openai-api/local/tiny``), while the endpoint serves ``tiny``. Compared as they stand, every such
label is a false "answered by another model". The Inspect hook (:mod:`execsys.harnesses.inspect_hook`)
reads the served name through :func:`served_model`; kept apart so it can be tested without Inspect.
"""

from __future__ import annotations

from typing import Any

# Inspect providers whose model names carry a service before the model: ``openai-api/<service>/<model>``
_SERVICE_PROVIDERS = ("openai-api",)


def unqualified(name: str, requested: str | None) -> str:
    """``name`` without the provider qualifier Inspect puts on its own labels: ``openai-api/local/tiny``
    for a request made as ``openai-api/local/tiny`` is the served ``tiny``. Only the requested model's
    qualifier is taken off (its provider, and for ``openai-api`` its service), so a served
    ``meta-llama/Llama-3`` keeps its organisation."""
    if not requested or "/" not in requested:
        return name
    parts = requested.split("/")
    keep = 2 if parts[0] in _SERVICE_PROVIDERS and len(parts) > 2 else 1
    prefix = "/".join(parts[:keep]) + "/"
    return name[len(prefix):] if name.startswith(prefix) and len(name) > len(prefix) else name


def served_model(event: Any, response: Any) -> str | None:
    """Which model answered a completed model event: the endpoint's own ``model`` in its response when
    Inspect kept it, else the output's, both without Inspect's provider qualifier."""
    requested = getattr(event, "model", None)
    named = response.get("model") if isinstance(response, dict) and not response.get("error") else None
    if not isinstance(named, str) or not named:
        named = getattr(getattr(event, "output", None), "model", None)
    if not isinstance(named, str) or not named:
        return None
    return unqualified(named, requested if isinstance(requested, str) else None)
