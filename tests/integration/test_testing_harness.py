"""`scheduler.testing`: the real claim, overlap, retry, takeover, catch-up and items
logic under a virtual clock. Each test names the exact periods and attempts it expects,
so that a change in the behaviour underneath fails it."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from itertools import pairwise

import pytest

from scheduler import Event, job
from scheduler.registry import Job
from scheduler.run.context import RunContext
from scheduler.testing import Harness, crash_here, elapse


@pytest.fixture
def harnesses() -> Iterator[list[Harness]]:
    made: list[Harness] = []
    yield made
    for harness in made:
        harness.close()


def make(made: list[Harness], jobs: list[Job], start: str) -> Harness:
    harness = Harness(jobs, start=start)
    made.append(harness)
    return harness


def test_last_day_of_the_month_runs_once_a_month(harnesses: list[Harness]) -> None:
    @job(cron="0 23 L * *", name="month_end")
    def month_end() -> None:
        pass

    harness = make(harnesses, [month_end], "2026-01-15T00:00Z")
    harness.clock.to("2026-05-01T00:00Z")
    harness.assert_periods(
        "month_end",
        ["2026-01-31T23:00Z", "2026-02-28T23:00Z", "2026-03-31T23:00Z", "2026-04-30T23:00Z"],
    )
    assert [run.attempt for run in harness.runs()] == [1, 1, 1, 1]


def test_berlin_spring_forward_runs_the_missing_time_once_after_the_gap(
    harnesses: list[Harness],
) -> None:
    """02:30 does not exist in Berlin on 29 March 2026: it runs once, at 03:00 CEST."""

    @job(cron="30 2 * * *", timezone="Europe/Berlin", name="nightly")
    def nightly() -> None:
        pass

    harness = make(harnesses, [nightly], "2026-03-27T12:00Z")
    harness.clock.advance("3d")
    harness.assert_periods(
        "nightly", ["2026-03-28T01:30Z", "2026-03-29T01:00Z", "2026-03-30T00:30Z"]
    )


def test_berlin_fall_back_runs_the_repeated_time_once(harnesses: list[Harness]) -> None:
    """02:30 happens twice in Berlin on 25 October 2026: it runs at the first (CEST)."""

    @job(cron="30 2 * * *", timezone="Europe/Berlin", name="nightly")
    def nightly() -> None:
        pass

    harness = make(harnesses, [nightly], "2026-10-23T12:00Z")
    harness.clock.advance("3d")
    harness.assert_periods(
        "nightly", ["2026-10-24T00:30Z", "2026-10-25T00:30Z", "2026-10-26T01:30Z"]
    )


def test_berlin_hourly_job_runs_23_times_in_spring_and_25_in_autumn(
    harnesses: list[Harness],
) -> None:
    @job(cron="0 * * * *", timezone="Europe/Berlin", name="hourly")
    def hourly() -> None:
        pass

    # From local midnight to local midnight, as UTC instants.
    harness = make(harnesses, [hourly], "2026-03-28T22:59Z")
    harness.clock.to("2026-03-29T21:59Z")
    spring = harness.periods("hourly", status="succeeded")
    assert len(spring) == len(set(spring)) == 23
    assert spring[0] == datetime.fromisoformat("2026-03-28T23:00Z")
    assert spring[-1] == datetime.fromisoformat("2026-03-29T21:00Z")

    autumn_harness = make(harnesses, [hourly], "2026-10-24T21:59Z")
    autumn_harness.clock.to("2026-10-25T22:59Z")
    autumn = autumn_harness.periods("hourly", status="succeeded")
    assert len(autumn) == len(set(autumn)) == 25


def test_a_crash_mid_run_is_retaken_after_the_lease_and_resumes_from_the_checkpoint(
    harnesses: list[Harness],
) -> None:
    began: list[tuple[int, int]] = []

    @job(cron="0 * * * *", name="batch", lease="1m")
    def batch(ctx: RunContext) -> None:
        start = ctx.last_checkpoint or 0
        began.append((ctx.attempt, start))
        for unit in range(start, 5):
            if ctx.attempt == 1 and unit == 3:
                crash_here()
            ctx.checkpoint(unit + 1)

    harness = make(harnesses, [batch], "2026-01-01T00:30Z")
    harness.clock.to("2026-01-01T01:00:30Z")
    # Dead with its lease live: nobody may take it yet.
    assert harness.run("batch", "2026-01-01T01:00Z").status == "running"
    assert began == [(1, 0)]
    harness.clock.to("2026-01-01T01:05Z")
    assert began == [(1, 0), (2, 3)]
    run = harness.run("batch", "2026-01-01T01:00Z")
    assert (run.status, run.attempt, run.holder) == ("succeeded", 2, "node-2")
    [fault] = harness.faults
    assert (fault.kind, fault.node, fault.attempt) == ("node_died", "node", 1)
    [retaken] = harness.log_lines("run_retaken")
    assert (retaken["cause"], retaken["previous_holder"]) == ("lease_expired", "node")
    # Retaken at the lease's end (the claim at 01:00 plus 1 minute), not before.
    started = run.started_at
    assert started is not None
    assert datetime.fromisoformat("2026-01-01T01:01Z") < started
    assert started < datetime.fromisoformat("2026-01-01T01:01:01Z")


def test_a_timeout_in_virtual_time_is_retried_then_recorded(harnesses: list[Harness]) -> None:
    @job(cron="0 * * * *", name="slow", timeout="10m", retries=1, retry_backoff="1m")
    def slow() -> None:
        elapse("15m")

    harness = make(harnesses, [slow], "2026-01-01T00:30Z")
    harness.clock.to("2026-01-01T01:59Z")
    run = harness.run("slow", "2026-01-01T01:00Z")
    assert (run.status, run.attempt, run.error_type) == ("timed_out", 2, "TimeoutError")
    assert [attempt.status for attempt in harness.attempts("slow", "2026-01-01T01:00Z")] == [
        "timed_out",
        "timed_out",
    ]
    assert [fault.kind for fault in harness.faults] == ["timed_out", "timed_out"]
    assert run.duration_ms == 600_000
    assert len(harness.log_lines("run_timed_out")) == 2


def test_overlap_skip_behind_a_long_body(harnesses: list[Harness]) -> None:
    @job(cron="*/5 * * * *", name="long", overlap="skip")
    def long(ctx: RunContext) -> None:
        if ctx.period.minute == 5:
            elapse("12m")

    harness = make(harnesses, [long], "2026-01-01T00:01Z")
    harness.clock.to("2026-01-01T00:30Z")
    harness.assert_periods(
        "long", ["2026-01-01T00:05Z", "2026-01-01T00:20Z", "2026-01-01T00:25Z", "2026-01-01T00:30Z"]
    )
    harness.assert_periods("long", ["2026-01-01T00:10Z", "2026-01-01T00:15Z"], status="skipped")
    assert {run.reason for run in harness.runs("long", status="skipped")} == {"overlap"}


def test_overlap_queue_runs_one_period_behind_a_long_body_after_it(
    harnesses: list[Harness],
) -> None:
    """`queue` keeps one period waiting behind the running one; a second is skipped."""
    ran: list[tuple[str, str]] = []

    @job(cron="*/5 * * * *", name="long", overlap="queue")
    def long(ctx: RunContext) -> None:
        ran.append((ctx.period.strftime("%H:%M"), harness.clock.now.strftime("%H:%M")))
        if ctx.period.minute == 5:
            elapse("12m")

    harness = make(harnesses, [long], "2026-01-01T00:01Z")
    harness.clock.to("2026-01-01T00:20Z")
    assert ran == [("00:05", "00:05"), ("00:10", "00:17"), ("00:20", "00:20")]
    harness.assert_periods("long", ["2026-01-01T00:15Z"], status="skipped")


def test_catch_up_after_a_virtual_outage(harnesses: list[Harness]) -> None:
    @job(cron="0 * * * *", name="every_hour", catchup="all")
    def every_hour() -> None:
        pass

    @job(cron="0 * * * *", name="latest_only", catchup="latest")
    def latest_only() -> None:
        pass

    harness = make(harnesses, [every_hour, latest_only], "2026-01-01T00:30Z")
    harness.clock.to("2026-01-01T02:30Z")
    harness.outage("4h")  # down from 02:30 to 06:30
    harness.clock.to("2026-01-01T07:30Z")
    hours = [f"2026-01-01T{hour:02}:00Z" for hour in range(1, 8)]
    harness.assert_periods("every_hour", hours)
    assert [run.origin for run in harness.runs("every_hour")] == [
        "schedule",
        "schedule",
        "catchup",
        "catchup",
        "catchup",
        "catchup",
        "schedule",
    ]
    harness.assert_periods("latest_only", [*hours[:2], hours[5], hours[6]])
    # `latest`: the older periods of the gap are recorded skipped, reason catchup.
    harness.assert_periods("latest_only", hours[2:5], status="skipped")
    assert {run.reason for run in harness.runs("latest_only", status="skipped")} == {"catchup"}


def test_a_catch_up_budget_paces_its_starts_and_an_operator_skips_the_rest(
    harnesses: list[Harness],
) -> None:
    @job(cron="0 * * * *", name="hourly", catchup_budget="2/2h")
    def hourly() -> None:
        pass

    harness = make(harnesses, [hourly], "2026-01-01T00:30Z")
    harness.outage("6h")  # down from 00:30 to 06:30: six hours owed
    harness.clock.to("2026-01-01T08:00Z")
    catch_up = harness.runs("hourly")[:6]
    assert [(run.status, run.reason) for run in catch_up] == [
        ("succeeded", None),
        ("succeeded", None),
        *[("deferred", "budget")] * 4,
    ]
    # Two per two hours: the second starts an hour after the first, at the pace.
    assert [run.claimed_at for run in catch_up[:2]] == [
        datetime.fromisoformat("2026-01-01T06:30Z"),
        datetime.fromisoformat("2026-01-01T07:30Z"),
    ]
    assert harness.skip_deferred("hourly") == 4
    harness.clock.advance("1h")
    assert [(run.status, run.reason) for run in harness.runs("hourly")[2:6]] == [
        ("skipped", "budget")
    ] * 4
    harness.assert_periods(
        "hourly", [f"2026-01-01T{hour:02}:00Z" for hour in (1, 2, 7, 8, 9)], status="succeeded"
    )


def test_items_run_exactly_once_across_a_crash(harnesses: list[Harness]) -> None:
    sent: list[str] = []

    @job(cron="0 * * * *", name="mailer", lease="1m")
    def mailer(ctx: RunContext) -> None:
        for number in range(4):
            key = f"mail:{number}"
            with ctx.item(key) as fresh:
                if fresh:
                    sent.append(key)
                    if ctx.attempt == 1 and number == 2:
                        crash_here()  # after the effect, before the item is done

    harness = make(harnesses, [mailer], "2026-01-01T00:30Z")
    harness.clock.to("2026-01-01T01:30Z")
    # mail:2 was sent and its node died inside the block: never sent again, left stuck.
    assert sent == ["mail:0", "mail:1", "mail:2", "mail:3"]
    states = {item.key: (item.state, item.attempt, item.stuck) for item in harness.items()}
    assert states == {
        "mail:0": ("done", 1, False),
        "mail:1": ("done", 1, False),
        "mail:2": ("claimed", 1, True),
        "mail:3": ("done", 2, False),
    }
    assert harness.run("mailer", "2026-01-01T01:00Z").status == "succeeded"


def test_a_failure_is_retried_at_its_backoff_and_the_events_say_so(
    harnesses: list[Harness],
) -> None:
    calls: list[int] = []

    @job(cron="0 6 * * *", name="report", retries=2, retry_backoff="10m")
    def report(ctx: RunContext) -> None:
        calls.append(ctx.attempt)
        raise RuntimeError("upstream down")

    harness = make(harnesses, [report], "2026-01-01T00:00Z")
    harness.clock.advance("1d")
    assert calls == [1, 2, 3]
    run = harness.run("report", "2026-01-01T06:00Z")
    assert (run.status, run.attempt, run.error_message) == ("failed", 3, "upstream down")
    events = harness.events("report")
    assert [(event.kind, event.attempt) for event in events] == [
        ("retrying", 1),
        ("retrying", 2),
        ("failed", 3),
    ]
    # Without retry jitter (the harness's default) each retry starts exactly at its
    # backoff, 10 then 20 minutes, after the failure, as soon as recovery settles
    # (recovery.SETTLE_S): the same instants on every run.
    attempts = harness.attempts("report", "2026-01-01T06:00Z")
    assert [attempt.status for attempt in attempts] == ["failed", "failed", "failed"]
    assert [attempt.started_at for attempt in attempts] == [
        datetime.fromisoformat("2026-01-01T06:00:00Z"),
        datetime.fromisoformat("2026-01-01T06:10:00.050Z"),
        datetime.fromisoformat("2026-01-01T06:30:00.100Z"),
    ]


def test_retry_jitter_spreads_retries_the_same_way_on_every_run(
    harnesses: list[Harness],
) -> None:
    @job(cron="0 6 * * *", name="report", retries=3, retry_backoff="10m")
    def report() -> None:
        raise RuntimeError("upstream down")

    def retry_instants() -> list[datetime | None]:
        harness = Harness([report], start="2026-01-01T00:00Z", retry_jitter=True)
        harnesses.append(harness)
        harness.clock.advance("1d")
        return [a.started_at for a in harness.attempts("report", "2026-01-01T06:00Z")]

    first, again = retry_instants(), retry_instants()
    assert first == again, "seeded: the same instants on every run"
    started = [instant for instant in first if instant is not None]
    waits = [(later - earlier).total_seconds() - 0.05 for earlier, later in pairwise(started)]
    assert len(waits) == 3
    backoffs = [600.0, 1200.0, 2400.0]
    assert all(b <= w <= b * 1.25 for w, b in zip(waits, backoffs, strict=True)), waits
    assert waits != backoffs, "jittered"


def test_the_clock_never_goes_back(harnesses: list[Harness]) -> None:
    @job(cron="0 * * * *", name="hourly")
    def hourly() -> None:
        pass

    harness = make(harnesses, [hourly], "2026-01-01T00:00Z")
    with pytest.raises(ValueError, match="never goes back"):
        harness.clock.to("2025-12-31T00:00Z")
    with pytest.raises(ValueError, match="no time zone"):
        harness.clock.to("2026-01-02T00:00")
    assert harness.runs() == []


def test_a_body_that_moves_the_clock_itself_is_told_to_elapse(harnesses: list[Harness]) -> None:
    @job(cron="0 * * * *", name="impatient")
    def impatient() -> None:
        harness.clock.advance("5m")

    harness = make(harnesses, [impatient], "2026-01-01T00:30Z")
    harness.clock.to("2026-01-01T01:30Z")
    run = harness.run("impatient", "2026-01-01T01:00Z")
    assert (run.status, run.error_type) == ("failed", "RuntimeError")
    assert "scheduler.testing.elapse" in (run.error_message or "")


def test_a_failure_streak_pages_once_pauses_the_job_and_recovers_once(
    harnesses: list[Harness],
) -> None:
    """The job's hooks are called as the node's alerts thread calls them: once each."""
    heard: list[tuple[str, int | None]] = []
    broken = [True]

    def hear(event: Event) -> None:
        heard.append((event.kind.value, event.streak))

    @job(
        cron="* * * * *",
        name="streaky",
        alert_after_failures=3,
        pause_after_failures=6,
        on={"failed": hear, "recovered": hear, "paused": hear},
    )
    def streaky() -> None:
        if broken[0]:
            raise RuntimeError("the upstream is down")

    harness = make(harnesses, [streaky], "2026-01-01T00:00:30Z")
    harness.clock.advance("10m")
    assert heard == [("failed", 3), ("paused", 6)]
    minutes = [f"2026-01-01T00:{minute:02}:00Z" for minute in range(1, 11)]
    harness.assert_periods("streaky", minutes[:6], status="failed")
    harness.assert_periods("streaky", minutes[6:], status="skipped")
    assert {run.reason for run in harness.runs("streaky", status="skipped")} == {"paused"}
    broken[0] = False
    harness.resume("streaky")
    harness.clock.advance("2m")
    assert heard == [("failed", 3), ("paused", 6), ("recovered", 6)]
    harness.assert_periods("streaky", ["2026-01-01T00:11Z", "2026-01-01T00:12Z"])
