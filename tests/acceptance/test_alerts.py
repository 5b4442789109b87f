"""Alerting with real replicas: three `scheduler run` processes on one PostgreSQL send
each failure to the webhook and each Sentry check-in once, whatever the replica count;
bad alerting input is refused in one line before anything is written."""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path

import pytest

from scheduler.alerting.webhook import verify_signature
from scheduler.states import Delivery
from scheduler.store import deliveries as stored_events
from scheduler.store.database import open_database
from tests.acceptance.processes import jobmods, run_command, start_node
from tests.acceptance.records import run_rows, table_counts
from tests.receivers import receiver
from tests.waiting import wait_until

SECRET = "shared-secret"


@pytest.mark.slow
def test_three_replicas_alert_once_per_event(tmp_path: Path, postgres_url: str) -> None:
    with receiver() as webhook, receiver() as sentry:
        port = sentry.url.rsplit(":", 1)[1]
        env = {
            "SCHEDULER_WEBHOOK_URL": webhook.url + "/alerts",
            "SCHEDULER_WEBHOOK_SECRET": SECRET,
            "SCHEDULER_SENTRY_DSN": f"http://public@127.0.0.1:{port}/7",
        }
        nodes = [
            start_node(tmp_path, f"node{n}", postgres_url, "alarming", **env) for n in range(3)
        ]
        try:
            for node in nodes:
                node.wait_for(lambda event: event.get("event") == "node_started")
            time.sleep(8)
        finally:
            codes = [node.stop() for node in nodes]
        assert codes == [0, 0, 0], [node.log_path.read_text()[-2000:] for node in nodes]
        database = open_database(postgres_url)
        try:
            failed = [
                row for row in run_rows(postgres_url, "alarming") if row["status"] == "failed"
            ]
            events = stored_events.recent(database, job="alarming", limit=1000)
            # The every-second `calm` job may have a period skipped on a loaded machine
            # (its last run not yet recorded), an event of its own, delivered too.
            held = {row.event.key for row in stored_events.recent(database, limit=10_000)}
        finally:
            database.dispose()
        assert len(failed) >= 3
        failed_events = {row.event.key for row in events if row.event.kind.value == "failed"}
        assert len(failed_events) == len(failed)
        # A node stopping may leave the last events for the next node (and a loaded
        # machine delays delivery): those delivered reached the receiver once each,
        # signed, and every event received is one the database holds.
        delivered = {row.event.key for row in events if row.state is Delivery.DELIVERED}
        assert len(delivered & failed_events) >= len(failed_events) // 2
        keys = Counter(request.json()["key"] for request in webhook.requests)
        assert [key for key, times in keys.items() if times > 1] == []
        assert delivered <= set(keys) <= held
        for request in webhook.requests:
            assert verify_signature(SECRET, request.body, request.headers["X-Scheduler-Signature"])
        wait_until(lambda: len(sentry.check_ins()) >= 2 * len(failed))
        check_ins = Counter((c["check_in_id"], c["status"]) for c in sentry.check_ins())
        assert [key for key, times in check_ins.items() if times > 1] == []
        statuses = Counter(status for _, status in check_ins)
        assert statuses["error"] >= len(failed) - 2
        assert statuses["ok"] >= 1
        assert {c["monitor_slug"] for c in sentry.check_ins()} == {"alarming", "calm"}


@pytest.mark.parametrize(
    ("module", "env", "expected"),
    [
        ("bad_webhook", {}, ["job 'paged'", "on['failed']", "hooks.example.com/x", "http"]),
        ("bad_event_kind", {}, ["job 'paged'", "on", "exploded", "failed"]),
        ("alarming", {"SCHEDULER_WEBHOOK_URL": "ftp://x"}, ["SCHEDULER_WEBHOOK", "ftp://x"]),
        (
            "alarming",
            {"SCHEDULER_WEBHOOK_URL": "https://x", "SCHEDULER_WEBHOOK_EVENTS": "failed,boom"},
            ["SCHEDULER_WEBHOOK_EVENTS", "boom"],
        ),
        ("alarming", {"SCHEDULER_TRACING": "maybe"}, ["SCHEDULER_TRACING", "maybe"]),
    ],
)
def test_bad_alerting_input_is_refused_in_one_line(
    tmp_path: Path, sqlite_url: str, module: str, env: dict[str, str], expected: list[str]
) -> None:
    result = run_command(
        ["run", "--database-url", sqlite_url, "--jobs", jobmods(module)], tmp_path, 60, **env
    )
    assert result.returncode == 2, result.stderr + result.stdout
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    for fragment in expected:
        assert fragment in lines[0], lines[0]
    assert table_counts(sqlite_url)["scheduler_runs"] == 0
    assert table_counts(sqlite_url)["scheduler_jobs"] == 0


def test_run_once_sends_its_own_alerts_before_it_exits(tmp_path: Path, sqlite_url: str) -> None:
    """A CronJob alone runs the job (no daemon): the failure of its last attempt is
    delivered by the one-shot process itself, and Sentry hears of the period."""
    with receiver() as webhook, receiver() as sentry:
        port = sentry.url.rsplit(":", 1)[1]
        result = run_command(
            [
                "run-once",
                "always-fails",
                "--database-url",
                sqlite_url,
                "--jobs",
                jobmods("failing"),
            ],
            tmp_path,
            60,
            SCHEDULER_WEBHOOK_URL=webhook.url,
            SCHEDULER_WEBHOOK_EVENTS="failed,retrying",
            SCHEDULER_SENTRY_DSN=f"http://public@127.0.0.1:{port}/7",
            EXECUTION_LOG=str(tmp_path / "executions.txt"),
        )
        assert result.returncode == 1, result.stdout + result.stderr
        kinds = Counter(request.json()["kind"] for request in webhook.requests)
        assert kinds == {"retrying": 2, "failed": 1}
        wait_until(lambda: len(sentry.check_ins()) >= 2)
        assert sorted(c["status"] for c in sentry.check_ins()) == ["error", "in_progress"]
    listed = run_command(["events", "--database-url", sqlite_url, "--json"], tmp_path)
    assert listed.returncode == 0, listed.stderr
    records = json.loads(listed.stdout)
    assert sorted((r["kind"], r["state"]) for r in records) == [
        ("failed", "delivered"),
        ("retrying", "delivered"),
        ("retrying", "delivered"),
    ]
    period = records[0]["period"]
    shown = run_command(
        ["runs", "show", "always-fails", period, "--database-url", sqlite_url, "--json"], tmp_path
    )
    assert shown.returncode == 0, shown.stderr
    assert len(json.loads(shown.stdout)["alerts"]) == 3
    text = run_command(
        ["runs", "show", "always-fails", period, "--database-url", sqlite_url], tmp_path
    )
    assert "alerts:" in text.stdout
    assert "failed     delivered" in text.stdout
