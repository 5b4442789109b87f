"""Run observers on a real dispatcher and database: an OpenTelemetry span per attempt
(checked with the SDK's in-memory exporter) whose ids are on the run's log lines and
current inside the job; Sentry Crons check-ins sent by the real SDK to a receiver on
127.0.0.1, one per state per period; an observer that raises never breaks a run."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
import sentry_sdk
import structlog
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode
from structlog.testing import capture_logs

from scheduler.alerting import propagation
from scheduler.alerting.sentry import SentryCrons, check_in_id, init_from_dsn, monitor_slug
from scheduler.alerting.tracing import Tracing
from scheduler.model import Claim, Due
from scheduler.registry import Job, job
from scheduler.run.context import RunContext
from scheduler.run.dispatcher import Dispatcher
from scheduler.run.observers import RunObserver
from scheduler.states import RunStatus
from scheduler.store import claims, queries, takeover
from scheduler.store.database import Database
from tests.receivers import receiver
from tests.waiting import wait_until

PERIOD = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
NODE = "node-a"


def _run(database: Database, jobs: dict[str, Job], observers: list[RunObserver]) -> None:
    """Claim PERIOD of each job and run it to its outcome on one dispatcher."""
    dispatcher = Dispatcher(database, jobs, NODE, 4, structlog.get_logger(), observers=observers)
    won = claims.claim(database, [Due(name, PERIOD, 30) for name in jobs], NODE).won
    for future in [dispatcher.submit(claim) for claim in won]:
        future.result(timeout=10)
    dispatcher.drain(1)


def _retry_due(database: Database, jobs: dict[str, Job], observers: list[RunObserver]) -> Claim:
    """Retake a failed period whose retry is due, and run it."""
    wait_until(lambda: bool(takeover.find_stale(database, list(jobs), 10)), timeout=15)
    (stale,) = takeover.find_stale(database, list(jobs), 10)
    retaken = takeover.retake(database, stale, NODE)
    assert retaken is not None
    dispatcher = Dispatcher(database, jobs, NODE, 2, structlog.get_logger(), observers=observers)
    dispatcher.submit(retaken).result(timeout=10)
    dispatcher.drain(1)
    return retaken


def test_each_attempt_is_a_span_whose_ids_are_on_the_runs_log_lines(
    database: Database, exporter: tuple[InMemorySpanExporter, TracerProvider]
) -> None:
    spans, provider = exporter
    inside: dict[str, Any] = {}

    @job(cron="* * * * *", name="report")
    def report(ctx: RunContext) -> None:
        inside["span"] = trace.get_current_span().get_span_context()
        inside["fields"] = structlog.contextvars.get_contextvars()
        inside["carrier"] = propagation.inject_context({})

    @job(cron="* * * * *", name="billing", timeout="5s")
    def billing() -> None:
        raise ValueError("card declined")

    with capture_logs() as lines:
        _run(database, {"report": report, "billing": billing}, [Tracing(provider)])

    finished = {span.name: span for span in spans.get_finished_spans()}
    assert set(finished) == {"run report", "run billing"}
    ok, failed = finished["run report"], finished["run billing"]
    row = queries.run_mapping(database, "report", PERIOD)
    assert row is not None
    assert dict(ok.attributes or {}) == {
        "scheduler.job": "report",
        "scheduler.period": "2026-11-30T12:00:00Z",
        "scheduler.run_id": row["id"],
        "scheduler.attempt": 1,
        "scheduler.node": NODE,
        "scheduler.origin": "schedule",
        "scheduler.status": "succeeded",
        "scheduler.final": True,
        "scheduler.written": True,
    }
    assert ok.status.status_code is StatusCode.OK
    assert failed.status.status_code is StatusCode.ERROR
    assert failed.status.description == "card declined"
    (error,) = failed.events
    assert error.name == "exception"
    assert (error.attributes or {})["exception.type"] == "ValueError"
    # Inside the job (on the worker thread: report has no timeout) the
    # run's span is current, and the job's own log lines carry its ids.
    context = ok.get_span_context()
    assert context is not None
    trace_id, span_id = (
        trace.format_trace_id(context.trace_id),
        trace.format_span_id(context.span_id),
    )
    assert inside["span"].span_id == context.span_id
    assert (inside["fields"]["trace_id"], inside["fields"]["span_id"]) == (trace_id, span_id)
    assert inside["carrier"]["traceparent"].startswith(f"00-{trace_id}-{span_id}-")
    report_lines = [line for line in lines if line.get("job") == "report"]
    assert {line["event"] for line in report_lines} >= {"run_started", "run_succeeded"}
    for line in report_lines:
        if line["event"] in ("run_started", "run_succeeded"):
            assert (line["trace_id"], line["span_id"]) == (trace_id, span_id)


def test_a_timed_job_runs_in_its_span_too(
    database: Database, exporter: tuple[InMemorySpanExporter, TracerProvider]
) -> None:
    spans, provider = exporter
    seen: list[int] = []

    @job(cron="* * * * *", name="timed", timeout="5s")
    def timed() -> None:
        seen.append(trace.get_current_span().get_span_context().span_id)

    _run(database, {"timed": timed}, [Tracing(provider)])
    (span,) = spans.get_finished_spans()
    assert span.context is not None
    assert seen == [span.context.span_id]


class Raises:
    def started(self, job: Job, claim: Claim, node: str) -> None:
        raise RuntimeError("observer bug")

    def sending(self, job: Job, claim: Claim, node: str, queue: str) -> None:
        raise RuntimeError("observer bug")


def test_an_observer_that_raises_does_not_break_the_run(database: Database) -> None:
    @job(cron="* * * * *", name="fine")
    def fine() -> None: ...

    with capture_logs() as lines:
        _run(database, {"fine": fine}, [Raises()])
    row = queries.run_mapping(database, "fine", PERIOD)
    assert row is not None
    assert row["status"] == RunStatus.SUCCEEDED
    assert "observer_failed" in [line["event"] for line in lines]


@pytest.fixture
def sentry() -> Iterator[Any]:
    with receiver() as http:
        port = http.url.rsplit(":", 1)[1]
        init_from_dsn(f"http://public@127.0.0.1:{port}/42")
        yield http
        sentry_sdk.get_client().close(timeout=2)
        sentry_sdk.init()  # a client with no DSN: nothing is sent by later tests


def test_sentry_check_ins_follow_the_period_not_the_attempt(
    database: Database, sentry: Any
) -> None:
    calls: list[int] = []

    @job(cron="*/5 * * * *", name="nightly.export", retries=1, retry_backoff="1s", timeout="2m")
    def export(ctx: RunContext) -> None:
        calls.append(ctx.attempt)
        if ctx.attempt == 1:
            raise ValueError("first try fails")

    @job(cron="0 3 * * *", name="cleanup", timezone="Europe/Paris")
    def cleanup() -> None:
        raise ValueError("always")

    jobs = {"nightly.export": export, "cleanup": cleanup}
    _run(database, jobs, [SentryCrons()])
    retaken = _retry_due(database, {"nightly.export": export}, [SentryCrons()])
    assert calls == [1, 2]
    sentry_sdk.flush(timeout=5)
    wait_until(lambda: len(sentry.check_ins()) >= 4)
    sentry_sdk.flush(timeout=2)
    seen = sorted((c["monitor_slug"], c["status"], c["check_in_id"]) for c in sentry.check_ins())
    cleanup_row = queries.run_mapping(database, "cleanup", PERIOD)
    assert cleanup_row is not None
    export_id, cleanup_id = check_in_id(retaken.id), check_in_id(str(cleanup_row["id"]))
    # Attempt 1 of the export failed with a retry to come: no check-in for it; attempt 2
    # did not send a second in_progress.
    assert seen == [
        ("cleanup", "error", cleanup_id),
        ("cleanup", "in_progress", cleanup_id),
        ("nightly-export", "in_progress", export_id),
        ("nightly-export", "ok", export_id),
    ]
    configs = {(c["monitor_slug"], c["status"]): c["monitor_config"] for c in sentry.check_ins()}
    assert configs["nightly-export", "ok"] == {
        "schedule": {"type": "crontab", "value": "*/5 * * * *"},
        "timezone": "UTC",
        "checkin_margin": 1,
        "max_runtime": 5,  # two attempts of 2 minutes and a 1 s pause, rounded up
    }
    assert configs["cleanup", "error"]["timezone"] == "Europe/Paris"
    assert monitor_slug("Jobs.Billing Nightly") == "jobs-billing-nightly"


IDLE_UNTIL_A_PROVIDER = """
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from scheduler.alerting.tracing import Tracing
from scheduler.run.observers import live

tracing = Tracing()
before = (tracing.idle(), live([tracing]) == [])
spans = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(spans))
trace.set_tracer_provider(provider)
after = (tracing.idle(), live([tracing]) == [tracing])
tracing._tracer.start_span("run late").end()
print(before, after, [span.name for span in spans.get_finished_spans()])
"""


def test_a_tracer_with_no_provider_is_idle_until_one_is_set_up() -> None:
    """With the extra installed and no provider, spans would be no-ops: the run path
    leaves the tracer out. A provider set up later (the process-wide one can be set
    once, hence a process of its own) is used from then on by the same observer."""
    done = subprocess.run(
        [sys.executable, "-c", IDLE_UNTIL_A_PROVIDER],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert done.stdout.strip() == "(True, True) (False, True) ['run late']"


def test_a_run_with_an_idle_tracer_runs_as_with_none(database: Database) -> None:
    assert not isinstance(trace.get_tracer_provider(), TracerProvider)  # none set up here
    ran: list[str] = []

    @job(cron="* * * * *", name="plain")
    def plain(ctx: RunContext) -> None:
        ran.append(ctx.run_id)

    with capture_logs() as lines:
        _run(database, {"plain": plain}, [Tracing()])
    row = queries.run_mapping(database, "plain", PERIOD)
    assert row is not None
    assert (ran, row["status"]) == ([row["id"]], RunStatus.SUCCEEDED)
    said = [line for line in lines if line.get("job") == "plain"]
    assert [line["event"] for line in said] == ["run_started", "run_succeeded"]
    assert all("trace_id" not in line for line in said)
