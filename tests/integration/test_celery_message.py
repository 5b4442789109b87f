"""What a node's Celery message carries, read back from real brokers: no absolute expiry
(a time on the sender's clock that a worker would compare with its own), and on
RabbitMQ a relative TTL past the deadline, counted by the broker itself."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest
from celery import Celery

from scheduler.celery import celery
from scheduler.celery.executor import TTL_SLACK_S
from scheduler.remote import TaskMessage
from scheduler.states import Origin
from tests.acceptance.celery_workers import RABBITMQ_URL, REDIS_URL

DEADLINE_S = 5.0


@pytest.mark.parametrize("broker", ["redis", "rabbitmq"])
def test_a_message_carries_no_absolute_expiry_only_a_relative_ttl(broker: str) -> None:
    url = f"{REDIS_URL}/12" if broker == "redis" else RABBITMQ_URL
    app = Celery("message", broker=url)
    queue = f"cronclaim-message-{uuid.uuid4().hex[:8]}"
    remote = celery(app, queue=queue, deadline=f"{DEADLINE_S:g}s").checked("report")
    sent = TaskMessage(
        job="report",
        period=datetime(2026, 11, 30, 12, 0, tzinfo=UTC),
        run_id=uuid.uuid4().hex,
        attempt=1,
        holder="node-a",
        origin=Origin.SCHEDULE,
        deadline_s=remote.deadline_s,
    )
    remote.send(sent)
    with app.connection_for_read() as connection:
        simple = connection.SimpleQueue(queue)
        try:
            message = simple.get(timeout=10)
            message.ack()
        finally:
            simple.close()
            simple.queue(connection.default_channel).delete()
    assert message.headers["id"] == sent.task_id
    assert message.headers["expires"] is None, "an absolute time on the sender's clock"
    ttl_ms = message.properties.get("expiration")
    if broker == "rabbitmq":  # the broker drops it that long after it was queued
        assert ttl_ms == str(int((DEADLINE_S + TTL_SLACK_S) * 1000))
