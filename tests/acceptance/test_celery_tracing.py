"""A trace that crosses the task queue: real node, real `celery worker`, real Redis, the
OpenTelemetry SDK in both processes. The node's span of the send and the worker's span
of the attempt are one trace, parent and child, and the worker's log lines of the run
carry that trace's ids."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from tests.acceptance.celery_workers import REDIS_URL, celery_env, start_worker
from tests.acceptance.processes import start_node
from tests.acceptance.records import run_rows

pytestmark = pytest.mark.slow


def _spans(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _hex(value: str) -> str:
    return value.removeprefix("0x")


def test_the_workers_span_of_an_attempt_is_the_child_of_the_nodes_send(
    tmp_path: Path, postgres_url: str
) -> None:
    spans_file = tmp_path / "spans.jsonl"
    env = celery_env(
        tmp_path,
        postgres_url,
        f"{REDIS_URL}/13",
        OTEL_TEST_SPANS=str(spans_file),
        SCHEDULER_TRACING="on",
    )
    worker = start_worker(tmp_path, "w1", queue=env["CELERY_TEST_QUEUE"], env=env)
    node = start_node(tmp_path, "node1", postgres_url, "on_celery", **env)
    try:
        node.wait_for(lambda event: event.get("event") == "node_started")
        time.sleep(5)
    finally:
        assert node.stop() == 0, node.log_path.read_text()[-3000:]
        time.sleep(1)
        worker.stop()

    ran = {
        row["id"] for row in run_rows(postgres_url, "remote_tick") if row["status"] == "succeeded"
    }
    assert len(ran) >= 3
    spans = _spans(spans_file)
    sends = {
        span["attributes"]["scheduler.run_id"]: span
        for span in spans
        if span["name"] == "send remote_tick"
    }
    runs = {
        span["attributes"]["scheduler.run_id"]: span
        for span in spans
        if span["name"] == "run remote_tick"
    }
    # Every run that succeeded was sent in a span of the node's and run in one of the
    # worker's, and the worker's is the send's child in the same trace.
    assert ran <= set(sends), (ran, sorted(sends))
    assert ran <= set(runs), (ran, sorted(runs))
    for run_id in ran:
        send, run = sends[run_id], runs[run_id]
        assert send["kind"] == "SpanKind.PRODUCER"
        assert send["attributes"]["messaging.system"] == "celery"
        assert send["attributes"]["messaging.destination.name"] == env["CELERY_TEST_QUEUE"]
        assert send["attributes"]["scheduler.node"].startswith("node1")
        assert run["context"]["trace_id"] == send["context"]["trace_id"]
        assert run["parent_id"] == send["context"]["span_id"]
        assert run["attributes"]["scheduler.node"].startswith("w1@")
        assert run["status"]["status_code"] == "OK"

    # The worker's log lines of a run carry its span's ids.
    started = [event for event in worker.events() if event.get("event") == "run_started"]
    traced = {event["run_id"]: event for event in started if event["run_id"] in ran}
    assert set(traced) == ran
    for run_id, event in traced.items():
        assert event["trace_id"] == _hex(runs[run_id]["context"]["trace_id"])
        assert event["span_id"] == _hex(runs[run_id]["context"]["span_id"])
