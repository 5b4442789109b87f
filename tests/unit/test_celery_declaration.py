"""Declaring a job that runs on Celery: mistakes name the job and the field; the message
a node sends reads back the same on a worker, and a worker refuses one it cannot read."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from celery import Celery

from scheduler.celery import CeleryExecution, celery
from scheduler.errors import JobDefinitionError
from scheduler.registry import job
from scheduler.remote import TaskMessage
from scheduler.states import Origin

APP = Celery("declarations", broker="memory://")


def _declare(executor: Any, **options: Any) -> Any:
    return job(cron="* * * * *", name="billing", executor=executor, **options)(lambda: None)


@pytest.mark.parametrize(
    ("executor", "field", "fragment"),
    [
        (celery(app=42), "executor.app", "Celery app or 'module:attribute'"),
        (celery(app="not a path"), "executor.app", "'not a path'"),
        (celery(app=APP, queue=""), "executor.queue", "non-empty"),
        (celery(app=APP, queue=7), "executor.queue", "7"),  # type: ignore[arg-type]
        (celery(app=APP, routing_key=""), "executor.routing_key", "non-empty"),
        (celery(app=APP, priority=300), "executor.priority", "0 to 255"),
        (celery(app=APP, priority=True), "executor.priority", "True"),
        (celery(app=APP, deadline="1s"), "executor.deadline", "at least 2s"),
        (celery(app=APP, deadline="soon"), "executor.deadline", "'soon'"),
        (celery(app=APP, deadline=None), "executor.deadline", "duration"),  # type: ignore[arg-type]
        ("celery", "executor", "celery(...)"),
    ],
)
def test_each_bad_option_names_the_job_and_the_field(
    executor: Any, field: str, fragment: str
) -> None:
    with pytest.raises(JobDefinitionError) as raised:
        _declare(executor)
    assert raised.value.job == "billing"
    assert raised.value.field == field
    assert str(raised.value).startswith(f"job 'billing': {field}: ")
    assert fragment in str(raised.value)


def test_process_isolation_cannot_run_on_a_worker() -> None:
    with pytest.raises(JobDefinitionError) as raised:
        _declare(celery(app=APP), isolation="process")
    assert raised.value.field == "isolation"


def test_a_good_declaration_is_kept_on_the_job() -> None:
    declared = _declare(celery(app="myapp.tasks:app", queue="cron", priority=5, deadline="2m"))
    remote = declared.remote
    assert isinstance(remote, CeleryExecution)
    assert (remote.queue, remote.priority, remote.deadline_s) == ("cron", 5, 120.0)
    assert remote.app_ref == "myapp.tasks:app"
    assert _declare(None).remote is None


def test_a_message_reads_back_as_it_was_sent() -> None:
    sent = TaskMessage(
        job="billing",
        period=datetime(2026, 12, 1, 12, 5, tzinfo=UTC),
        run_id="abc",
        attempt=3,
        holder="node-a-1",
        origin=Origin.CATCHUP,
        deadline_s=60.0,
    )
    body = sent.as_kwargs()
    assert body["v"] == 1
    assert TaskMessage.from_kwargs(body) == sent
    assert sent.task_id == "abc.3"


@pytest.mark.parametrize(
    "body",
    [
        {"v": 2},
        {"v": 1, "job": "billing"},
        {
            "v": 1,
            "job": "b",
            "period": "2026-12-01T12:05:00",
            "run_id": "a",
            "attempt": 1,
            "holder": "n",
            "origin": "schedule",
            "deadline_s": 5,
        },
        {
            "v": 1,
            "job": "b",
            "period": "yesterday",
            "run_id": "a",
            "attempt": 1,
            "holder": "n",
            "origin": "schedule",
            "deadline_s": 5,
        },
        {
            "v": 1,
            "job": "b",
            "period": "2026-12-01T12:05:00+00:00",
            "run_id": "a",
            "attempt": "x",
            "holder": "n",
            "origin": "schedule",
            "deadline_s": 5,
        },
    ],
)
def test_a_message_a_worker_cannot_use_is_refused_with_a_reason(body: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match=r"\w"):
        TaskMessage.from_kwargs(body)
