"""OpenTelemetry: a span per attempt on the node that holds it, current while the job's
function runs (so the job's own spans are its children), its ids on every log line of
the run, its status and any error recorded when the attempt ends.

A job on a task queue: the node opens a producer span around the send, and its context
travels in the message's headers (W3C `traceparent`), so that the worker's span of the
attempt is that span's child, in the same trace.

Needs `opentelemetry-api` (`cronclaim[otel]`); spans go wherever the process's tracer
provider sends them (set one up in a job module, or run under `opentelemetry-instrument`).
With no provider the spans are no-ops and the log lines carry no ids.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from scheduler.alerting.observer import Ending
from scheduler.instants import utc_text
from scheduler.model import Claim
from scheduler.registry import Job
from scheduler.states import RunStatus

INSTRUMENTATION = "scheduler"


class Tracing:
    """The run observer that opens and ends the spans."""

    def __init__(self, provider: trace.TracerProvider | None = None) -> None:
        self._tracer = trace.get_tracer(INSTRUMENTATION, tracer_provider=provider)
        self._given = provider is not None

    def idle(self) -> bool:
        """No tracer provider is set up, nor was one given: every span would be a no-op
        and carry no ids, so the run path leaves this observer out (a node with the
        extra installed and no provider runs as one without it). Asked at each start:
        a provider set up later, by a job module say, is used from then on."""
        if self._given:
            return False
        provider = trace.get_tracer_provider()
        return isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider)

    def started(self, job: Job, claim: Claim, node: str) -> _RunSpan:
        span = self._tracer.start_span(
            f"run {job.name}",
            kind=SpanKind.INTERNAL,
            attributes=_identity(job, claim, node),
        )
        return _RunSpan(span)

    @contextlib.contextmanager
    def sending(self, job: Job, claim: Claim, node: str, queue: str) -> Iterator[None]:
        """The send's span, current while the message is made (and the context put in
        it); a send that raises leaves it in error."""
        span = self._tracer.start_span(
            f"send {job.name}",
            kind=SpanKind.PRODUCER,
            attributes={
                **_identity(job, claim, node),
                "messaging.system": job.remote.kind if job.remote else "",
                "messaging.destination.name": queue,
            },
        )
        with trace.use_span(span, end_on_exit=True):
            yield


def _identity(job: Job, claim: Claim, node: str) -> dict[str, str | int]:
    return {
        "scheduler.job": job.name,
        "scheduler.period": utc_text(claim.period),
        "scheduler.run_id": claim.id,
        "scheduler.attempt": claim.attempt,
        "scheduler.node": node,
        "scheduler.origin": claim.origin.value,
    }


class _RunSpan:
    def __init__(self, span: Span) -> None:
        self._span = span
        context = span.get_span_context()
        self.fields: dict[str, str] = (
            {
                "trace_id": trace.format_trace_id(context.trace_id),
                "span_id": trace.format_span_id(context.span_id),
            }
            if context.is_valid
            else {}
        )

    def current(self) -> contextlib.AbstractContextManager[Any]:
        return trace.use_span(self._span, end_on_exit=False)

    def ended(self, ending: Ending) -> None:
        span = self._span
        span.set_attribute("scheduler.status", ending.status.value)
        span.set_attribute("scheduler.final", ending.final)
        span.set_attribute("scheduler.written", ending.written)
        if ending.failure is not None:
            span.add_event(
                "exception",
                {
                    "exception.type": ending.failure.type,
                    "exception.message": ending.failure.message,
                    "exception.stacktrace": ending.failure.traceback,
                },
            )
        if ending.status is RunStatus.SUCCEEDED and ending.written:
            span.set_status(Status(StatusCode.OK))
        else:
            detail = ending.failure.message if ending.failure else ending.status.value
            span.set_status(Status(StatusCode.ERROR, detail))
        span.end()
