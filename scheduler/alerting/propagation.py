"""Handing the current trace to work that runs elsewhere (a task queue's worker): the
seam a remote executor uses. Without OpenTelemetry installed both are no-ops."""

from __future__ import annotations

import contextlib
import functools
import importlib.util
from collections.abc import Iterator, Mapping, MutableMapping

# The fields of W3C trace context, when OpenTelemetry is not there to say its own.
W3C_FIELDS = ("traceparent", "tracestate")


@functools.cache
def _installed() -> bool:
    """Looked up once: every send and every delivery asks."""
    return importlib.util.find_spec("opentelemetry") is not None


def fields() -> tuple[str, ...]:
    """The carrier keys the process's propagator reads (W3C's by default)."""
    if not _installed():
        return W3C_FIELDS
    from opentelemetry import propagate  # noqa: PLC0415 - an optional extra

    return tuple(propagate.get_global_textmap().fields) or W3C_FIELDS


def inject_context(carrier: MutableMapping[str, str]) -> MutableMapping[str, str]:
    """Write the current trace context (W3C `traceparent`, `tracestate`) into `carrier`,
    e.g. a Celery task's headers; the carrier is returned for convenience."""
    if _installed():
        from opentelemetry import propagate  # noqa: PLC0415 - an optional extra

        propagate.inject(carrier)
    return carrier


@contextlib.contextmanager
def extracted_context(carrier: Mapping[str, str]) -> Iterator[None]:
    """On the worker's side: make the context `inject_context` wrote current."""
    if not _installed():
        yield
        return
    from opentelemetry import context, propagate  # noqa: PLC0415 - an optional extra

    token = context.attach(propagate.extract(dict(carrier)))
    try:
        yield
    finally:
        context.detach(token)
