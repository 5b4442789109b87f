"""The node's side of a trace that crosses a task queue, on a real dispatcher, database
and broker: the send of a remote attempt is a producer span (checked with the SDK's
in-memory exporter) whose context travels in the message's headers, an observer that
raises at the send does not stop it, and a send the broker refuses leaves the span in
error."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import structlog
from celery import Celery
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from scheduler.alerting.tracing import Tracing
from scheduler.celery import celery
from scheduler.model import Due
from scheduler.registry import Job, job
from scheduler.run.dispatcher import Dispatcher
from scheduler.run.observers import RunObserver
from scheduler.store import claims
from scheduler.store.database import Database
from tests.acceptance.celery_workers import REDIS_URL, free_port
from tests.integration.test_run_observers import Raises

PERIOD = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
NODE = "node-a"


def _remote_job(app: Celery, queue: str) -> Job:
    @job(cron="* * * * *", name="remote_report", executor=celery(app, queue=queue))
    def remote_report() -> None: ...

    return remote_report


def _send(database: Database, remote: Job, observers: list[RunObserver]) -> str:
    """Claim PERIOD and let a dispatcher send it; the run's id."""
    jobs = {remote.name: remote}
    dispatcher = Dispatcher(database, jobs, NODE, 2, structlog.get_logger(), observers=observers)
    (won,) = claims.claim(database, [Due(remote.name, PERIOD, 30)], NODE).won
    dispatcher.submit(won).result(timeout=15)
    dispatcher.drain(1)
    return won.id


def test_the_message_carries_the_context_of_the_send_span(
    database: Database, exporter: tuple[InMemorySpanExporter, TracerProvider]
) -> None:
    spans, provider = exporter
    queue = f"cronclaim-trace-{uuid.uuid4().hex[:8]}"
    app = Celery("tracing", broker=f"{REDIS_URL}/12")
    run_id = _send(database, _remote_job(app, queue), [Raises(), Tracing(provider)])

    (send,) = spans.get_finished_spans()
    assert send.name == "send remote_report"
    assert send.kind is SpanKind.PRODUCER
    attributes = dict(send.attributes or {})
    assert attributes["scheduler.run_id"] == run_id
    assert attributes["messaging.destination.name"] == queue
    context = send.get_span_context()
    assert context is not None
    with app.connection_for_read() as connection:
        message = connection.SimpleQueue(queue).get(timeout=10)
        message.ack()
    assert message.headers["id"] == f"{run_id}.1"
    trace_id, span_id = (
        trace.format_trace_id(context.trace_id),
        trace.format_span_id(context.span_id),
    )
    assert message.headers["traceparent"].startswith(f"00-{trace_id}-{span_id}-")


def test_a_send_the_broker_refuses_leaves_its_span_in_error(
    database: Database, exporter: tuple[InMemorySpanExporter, TracerProvider]
) -> None:
    spans, provider = exporter
    nobody = Celery("tracing", broker=f"redis://127.0.0.1:{free_port()}/0")
    _send(database, _remote_job(nobody, "cronclaim-trace-nowhere"), [Tracing(provider)])

    (send,) = spans.get_finished_spans()
    assert send.name == "send remote_report"
    assert send.status.status_code is StatusCode.ERROR
    assert [event.name for event in send.events] == ["exception"]
