"""Hook registration and alerting settings: one clear error naming the job (or the
variable) and the field for bad input, and the shapes that go out (keys, payloads,
signatures, Sentry monitors)."""

from __future__ import annotations

import time
from datetime import UTC, datetime

import pytest

from scheduler import Event, hooks, job
from scheduler.alerting import environment
from scheduler.alerting.sentry import check_in_id, monitor_config, monitor_slug
from scheduler.alerting.webhook import Webhook, sign, slack_text, verify_signature
from scheduler.errors import JobDefinitionError, UserError
from scheduler.node.alerts import retry_delay, timeout_of
from scheduler.states import EventKind

EVENT = Event("billing", datetime(2026, 12, 1, 3, tzinfo=UTC), EventKind.STUCK_ITEM, "inv-42")


@pytest.fixture(autouse=True)
def _no_global_hooks() -> None:
    hooks.clear_global()


def test_an_unknown_kind_names_the_job_and_the_field() -> None:
    with pytest.raises(JobDefinitionError) as error:
        job(cron="* * * * *", name="paged", on={"exploded": print})(lambda: None)
    assert str(error.value).startswith("job 'paged': on: unknown event kind 'exploded'")
    assert "failed" in str(error.value)


@pytest.mark.parametrize(
    ("hook", "fragment"),
    [
        (Webhook("hooks.example.com"), "is not an http:// or https:// URL"),
        (Webhook("ftp://hooks.example.com"), "is not an http:// or https:// URL"),
        (Webhook("https://x", format="teams"), "format 'teams'"),
        (Webhook("https://x", timeout=0), "timeout 0"),
        (Webhook("https://x", retries=-1), "retries -1"),
        ("not callable", "is not callable"),
    ],
)
def test_a_hook_that_cannot_work_names_the_job_and_the_field(hook: object, fragment: str) -> None:
    with pytest.raises(JobDefinitionError) as error:
        job(cron="* * * * *", name="paged", on={"failed": hook})(lambda: None)  # type: ignore[dict-item]
    assert str(error.value).startswith("job 'paged': on['failed']: ")
    assert fragment in str(error.value)


def test_on_must_be_a_mapping() -> None:
    with pytest.raises(JobDefinitionError, match="job 'paged': on: must map"):
        job(cron="* * * * *", name="paged", on=[print])(lambda: None)  # type: ignore[arg-type]


def test_job_and_global_hooks_are_both_called_each_once_by_name() -> None:
    def mine(event: Event) -> None: ...

    paged = job(cron="* * * * *", name="paged", on={"failed": [mine, mine], "stuck item": mine})(
        lambda: None
    )
    hooks.on_event("failed")(mine)

    @hooks.on_event()
    def everything(event: Event) -> None: ...

    names = [name for name, _ in hooks.hooks_for(paged.hooks, EventKind.FAILED)]
    assert names == [hooks.name_of(mine), hooks.name_of(everything)]
    assert [n for n, _ in hooks.hooks_for(paged.hooks, EventKind.STUCK_ITEM)] == names
    assert [n for n, _ in hooks.hooks_for(paged.hooks, EventKind.MISSED)] == names[1:]
    with pytest.raises(UserError, match="unknown event kind 'nope'"):
        hooks.on_event("nope")


def test_the_event_key_and_payloads() -> None:
    assert EVENT.key == "billing/2026-12-01T03:00:00Z/stuck_item/inv-42"
    assert EVENT.as_dict()["key"] == EVENT.key
    webhook = Webhook("https://hooks.example.com/x?token=secret", format="slack")
    assert webhook.hook_name == "webhook:https://hooks.example.com/x"
    assert webhook.payload(EVENT) == {"text": slack_text(EVENT), "event_key": EVENT.key}
    assert EVENT.key in slack_text(EVENT)
    assert Webhook("https://x").payload(EVENT) == EVENT.as_dict()


def test_signatures_are_checked_for_body_secret_and_age() -> None:
    body = b'{"key":"k"}'
    now = int(time.time())
    header = sign("s", body, now)
    assert verify_signature("s", body, header)
    assert not verify_signature("s", body + b" ", header)
    assert not verify_signature("t", body, header)
    assert not verify_signature("s", body, sign("s", body, now - 3600))
    assert not verify_signature("s", body, "garbage")


def test_delivery_pauses_and_timeouts() -> None:
    assert [retry_delay(n) for n in (1, 2, 3)] == [10.0, 20.0, 40.0]
    assert retry_delay(30) == 900.0
    assert timeout_of(Webhook("https://x", timeout=3)) == 8.0
    assert timeout_of(print) == 30.0
    assert hooks.max_tries([Webhook("https://x", retries=1)], 6) == 2
    assert hooks.max_tries([print], 6) == 6


@pytest.mark.parametrize(
    ("variables", "fragment"),
    [
        ({"SCHEDULER_WEBHOOK_URL": "localhost:9000"}, "SCHEDULER_WEBHOOK_*: webhook url"),
        (
            {"SCHEDULER_WEBHOOK_URL": "https://x", "SCHEDULER_WEBHOOK_TIMEOUT": "soon"},
            "SCHEDULER_WEBHOOK_TIMEOUT",
        ),
        ({"SCHEDULER_WEBHOOK_URL": "https://x", "SCHEDULER_WEBHOOK_FORMAT": "xml"}, "format 'xml'"),
        (
            {"SCHEDULER_WEBHOOK_URL": "https://x", "SCHEDULER_WEBHOOK_EVENTS": "failed,late"},
            "SCHEDULER_WEBHOOK_EVENTS: unknown event kind 'late'",
        ),
        ({"SCHEDULER_SENTRY_CRONS": "sometimes"}, "SCHEDULER_SENTRY_CRONS"),
    ],
)
def test_bad_environment_names_the_variable(variables: dict[str, str], fragment: str) -> None:
    with pytest.raises(UserError) as error:
        environment.configure(variables)
    assert fragment in str(error.value)
    assert hooks.hooks_for({}, EventKind.FAILED) == []


def test_the_environment_webhook_hears_every_kind_but_retrying_by_default() -> None:
    found = environment.webhook(
        {"SCHEDULER_WEBHOOK_URL": "https://x", "SCHEDULER_WEBHOOK_RETRIES": "2"}
    )
    assert found is not None
    hook, kinds = found
    assert EventKind.RETRYING not in kinds
    assert set(kinds) | {EventKind.RETRYING} == set(EventKind)
    assert hook.max_tries == 3
    assert environment.webhook({}) is None
    assert environment.observers({"SCHEDULER_TRACING": "off"}) == []


def test_sentry_monitors() -> None:
    every_ten_seconds = job(cron="*/10 * * * * *", name="Fast.Job", timezone="Europe/Paris")(
        lambda: None
    )
    assert monitor_slug(every_ten_seconds.name) == "fast-job"
    assert monitor_slug("x" * 80) == "x" * 50
    config = monitor_config(every_ten_seconds)
    assert config["schedule"] == {"type": "interval", "value": 1, "unit": "minute"}
    assert config["timezone"] == "Europe/Paris"
    assert check_in_id("run-1") == check_in_id("run-1") != check_in_id("run-2")
