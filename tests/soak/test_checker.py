"""The soak checker's rules on small hand-made histories: each rule must fail what it is
for and let through what it allows, so that a bug in the checker cannot hide a bug in
the scheduler."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from tests.soak import plan as kinds
from tests.soak.checker import (
    WINDOW_A,
    WINDOW_B,
    WINDOW_C,
    AttemptRow,
    History,
    ItemRow,
    JobSpec,
    NodeEvent,
    RunRow,
    Verdict,
    check,
)
from tests.soak.injector import Exit, FaultRecord
from tests.soak.ledger import CANCELLED, END, ERROR, FAIL, SEEN, START, Line, node_name

P0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
T0 = P0.timestamp()
NODE_1, NODE_2 = "soak-1-aaaaaa", "soak-2-bbbbbb"


def at(seconds: float) -> datetime:
    return P0 + timedelta(seconds=seconds)


def spec(name: str = "tick", overlap: str = "skip", due: tuple[float, ...] = (), **extra: Any):
    return JobSpec(name, overlap, False, tuple(at(s) for s in due), **extra)


def body(
    period: float,
    start: float,
    end: float | None,
    *,
    job: str = "tick",
    run_id: str | None = None,
    attempt: int = 1,
    node: str = NODE_1,
    close: str = END,
) -> list[Line]:
    """A body's ledger lines: `start` at T0+start, `close` at T0+end (none if end is None)."""
    run = run_id or f"{job}-{period:g}"
    lines = [Line(START, job, at(period), attempt, run, node, 100, start, T0 + start)]
    if end is not None:
        lines.append(Line(close, job, at(period), attempt, run, node, 100, end, T0 + end))
    return lines


def row(
    period: float,
    status: str = "succeeded",
    *,
    job: str = "tick",
    attempt: int = 1,
    holder: str = NODE_1,
    reason: str | None = None,
    claimed: float | None = None,
    started: float | None = None,
    finished: float | None = None,
    run_id: str | None = None,
) -> RunRow:
    claimed_at = T0 + (claimed if claimed is not None else period)
    return RunRow(
        job=job,
        period=at(period),
        run_id=run_id or f"{job}-{period:g}",
        status=status,
        reason=reason,
        origin="schedule",
        attempt=attempt,
        holder=holder,
        claimed_at=claimed_at,
        started_at=T0 + started if started is not None else None,
        finished_at=T0 + finished if finished is not None else None,
    )


def fault(kind: str, node: str | None, start: float, end: float) -> FaultRecord:
    return FaultRecord(kind, node, T0 + start, T0 + end)


def event(name: str, node: str, wall: float, run_id: str, attempt: int = 1) -> NodeEvent:
    return NodeEvent(name, node, T0 + wall, run_id, attempt)


def history(
    jobs: list[JobSpec],
    ledger: list[Line] = (),  # type: ignore[assignment]
    runs: list[RunRow] = (),  # type: ignore[assignment]
    **fields: Any,
) -> History:
    base: dict[str, Any] = {
        "jobs": {job.name: job for job in jobs},
        "ledger": list(ledger),
        "runs": list(runs),
        "attempts": [],
        "items": [],
        "events": [],
        "faults": [],
        "exits": [],
        "window": (T0, T0 + 100),
        "observed_until": T0 + 150,
    }
    return History(**(base | fields))


def rules(verdict: Verdict) -> list[str]:
    return sorted(finding.rule for finding in verdict.findings)


# A clean history ---------------------------------------------------------------------


def test_a_clean_history_passes_and_is_counted() -> None:
    verdict = check(
        history(
            [spec(due=(0, 1))],
            [*body(0, 0.01, 0.11), *body(1, 1.01, 1.11)],
            [row(0, finished=0.12), row(1, finished=1.12)],
        )
    )
    assert verdict.ok, verdict.findings
    assert (verdict.periods_checked, verdict.completed, verdict.unaccounted) == (2, 2, 0)


# Rule 1 ------------------------------------------------------------------------------


def _twice(job: str = "tick", **fields: Any) -> History:
    """Period 0 completed by attempt 1 on node 1 (no record of it), then by attempt 2 on
    node 2 (recorded)."""
    return history(
        [spec(job, due=(0,), non_cooperative=job == "slow")],
        [
            *body(0, 0.0, 7.0, job=job, run_id="r"),
            *body(0, 8.0, 15.0, job=job, run_id="r", attempt=2, node=NODE_2),
        ],
        [row(0, job=job, attempt=2, holder=NODE_2, run_id="r", finished=15.1)],
        **fields,
    )


def test_a_period_completed_twice_fails() -> None:
    verdict = check(_twice())
    assert rules(verdict) == ["1 completed twice"]
    assert verdict.duplicates == 1


def test_window_a_allows_only_the_non_cooperative_job_its_node_said_orphaned() -> None:
    orphaned = [event("run_orphaned", NODE_1, 3.0, "r")]
    allowed = check(_twice("slow", events=orphaned))
    assert allowed.ok, allowed.findings
    assert [a.window for a in allowed.allowed] == [WINDOW_A]
    # Without the event (today's code), or for another job, it is a double.
    assert rules(check(_twice("slow"))) == ["1 completed twice"]
    assert rules(check(_twice("tick", events=orphaned))) == ["1 completed twice"]
    # run_orphaned for another attempt does not count.
    other = [event("run_orphaned", NODE_1, 3.0, "r", attempt=2)]
    assert rules(check(_twice("slow", events=other))) == ["1 completed twice"]


def test_window_b_allows_an_outcome_lost_to_a_fault_of_its_node_right_after_the_end() -> None:
    for kind in (kinds.KILL, kinds.STOP, kinds.CUT, kinds.BLACKHOLE):
        verdict = check(_twice(faults=[fault(kind, "soak-1", 7.5, 9.0)]))
        assert verdict.ok, (kind, verdict.findings)
        assert [a.window for a in verdict.allowed] == [WINDOW_B]
    # A black hole that began before the end and still held at it: the node could not
    # write the outcome either.
    assert check(_twice(faults=[fault(kinds.BLACKHOLE, "soak-1", 5.0, 12.0)])).ok


def test_window_b_refuses_what_does_not_fit() -> None:
    kill = fault(kinds.KILL, "soak-1", 7.5, 9.0)
    # Too late after the end, over before it, on another node, a SIGTERM, a server fault.
    for other in (
        fault(kinds.KILL, "soak-1", 9.5, 11.0),
        fault(kinds.CUT, "soak-1", 2.0, 6.0),
        fault(kinds.KILL, "soak-2", 7.5, 9.0),
        fault(kinds.TERM, "soak-1", 7.5, 9.0),
        fault(kinds.RESTART, None, 7.5, 9.0),
    ):
        assert rules(check(_twice(faults=[other]))) == ["1 completed twice"], other
    # The attempt's outcome was recorded: the double is the scheduler's.
    recorded = AttemptRow("r", 1, "tick", at(0), NODE_1, "succeeded", None, T0, T0 + 7.1)
    assert rules(check(_twice(faults=[kill], attempts=[recorded]))) == ["1 completed twice"]
    # The node had given the run up before the body ended: window (a)'s case, not (b)'s.
    lost = [event("lease_lost", NODE_1, 6.0, "r")]
    assert rules(check(_twice(faults=[kill], events=lost))) == ["1 completed twice"]
    # Or the run was taken over before it ended (its lease had run out on the database).
    over = AttemptRow("r", 1, "tick", at(0), NODE_1, "abandoned", "lease_expired", T0, T0 + 6.5)
    assert rules(check(_twice(faults=[kill], attempts=[over]))) == ["1 completed twice"]
    later = replace(over, finished_at=T0 + 7.6)
    assert check(_twice(faults=[kill], attempts=[later])).ok


def test_a_cancelled_or_seen_body_is_no_completion() -> None:
    lines = [
        *body(0, 0.0, 1.0, run_id="r", close=CANCELLED),
        *body(0, 2.0, 3.0, run_id="r", attempt=2, node=NODE_2),
    ]
    verdict = check(history([spec(due=(0,))], lines, [row(0, attempt=2, run_id="r")]))
    assert verdict.ok, verdict.findings


# Rule 2 ------------------------------------------------------------------------------


def test_an_item_done_twice_fails_and_a_succeeded_period_needs_its_item() -> None:
    items_job = spec("items", due=(0, 2), items=True)
    lines = [*body(0, 0.0, 0.3, job="items"), *body(2, 2.0, 2.3, job="items", close=SEEN)]
    runs = [row(0, job="items"), row(2, job="items")]
    twice = [
        ItemRow(f"item-{at(0).isoformat()}", "items-0", 1, NODE_1),
        ItemRow(f"item-{at(0).isoformat()}", "items-0", 2, NODE_2),
    ]
    verdict = check(history([items_job], lines, runs, items=twice))
    assert rules(verdict) == ["2 item done twice", "2 item lost"]
    assert verdict.duplicates == 1
    once = [twice[0], ItemRow(f"item-{at(2).isoformat()}", "items-2", 1, NODE_1)]
    assert check(history([items_job], lines, runs, items=once)).ok


# Rule 3 ------------------------------------------------------------------------------


def test_a_due_period_without_a_row_or_still_in_hand_is_unaccounted() -> None:
    verdict = check(history([spec(due=(0, 1, 2))], body(0, 0.0, 0.1), [row(0), row(1, "running")]))
    assert rules(verdict) == ["3 unaccounted", "3 unaccounted"]
    assert verdict.unaccounted == 2
    # Periods outside the judged window are not judged.
    assert check(history([spec(due=(0, 200))], body(0, 0.0, 0.1), [row(0)])).ok


def test_succeeded_needs_a_completed_body() -> None:
    cancelled = body(0, 0.0, 1.0, close=CANCELLED)
    verdict = check(history([spec(due=(0,))], cancelled, [row(0)]))
    assert [f.message for f in verdict.findings] == ["succeeded, but no body completed"]


def _skip_history(overlap: str, earlier: list[Line], earlier_rows: list[RunRow]) -> History:
    job = spec("slow", overlap, due=(0, 5))
    skipped = row(5, "skipped", job="slow", reason="overlap", finished=5.01)
    return history([job], earlier, [*earlier_rows, skipped])


def test_a_skip_is_justified_only_behind_a_body_running() -> None:
    running = body(0, 0.0, 7.0, job="slow")
    done = [row(0, job="slow", started=0.0, finished=7.01)]
    justified = check(_skip_history("skip", running, done))
    assert justified.ok, justified.findings
    assert justified.skipped_justified == 1
    # The earlier body ended before the period, and its outcome was written.
    ended = body(0, 0.0, 3.0, job="slow")
    early = [row(0, job="slow", started=0.0, finished=3.01)]
    assert rules(check(_skip_history("skip", ended, early))) == ["3 unaccounted"]
    # Its outcome written after the period is due: the run was still in hand.
    late = [row(0, job="slow", started=0.0, finished=5.0)]
    assert check(_skip_history("skip", ended, late)).ok
    # A claim that never started: nothing ran.
    claimed = [row(0, "abandoned", job="slow", finished=20.0)]
    verdict = check(_skip_history("skip", [], claimed))
    assert "3 unaccounted" in rules(verdict)
    # An allow job is never skipped.
    assert "3 unaccounted" in rules(check(_skip_history("allow", running, done)))


def test_a_queue_skip_needs_one_running_and_one_waiting() -> None:
    job = spec("q", "queue", due=(0, 2, 4))
    lines = [*body(0, 0.0, 5.0, job="q"), *body(2, 5.0, 6.5, job="q")]
    runs = [
        row(0, job="q", started=0.0, finished=5.01),
        row(2, job="q", started=5.0, finished=6.51),
        row(4, "skipped", job="q", reason="overlap", finished=4.01),
    ]
    assert check(history([job], lines, runs)).ok
    # Period 2 already ran (and ended) before 4 fell due: only one occupied the job.
    quick = [*body(0, 0.0, 5.0, job="q"), *body(2, 2.0, 3.0, job="q")]
    runs[1] = row(2, job="q", started=2.0, finished=3.01)
    assert rules(check(history([job], quick, runs))) == ["3 unaccounted"]


def test_a_queue_skip_counts_a_period_taken_over_and_waiting_its_turn() -> None:
    """Seed 812976293: period 0's node is killed as its body begins; a peer takes it
    over at 2.04 and it waits behind period 2's body, running on another node; period 4
    finds one running and one waiting, and is skipped. Taken over after period 4's
    decision instead, nothing waited: the skip is unaccounted."""
    job = spec("q", "queue", due=(0, 2, 4))
    lines = [
        *body(0, 0.4, None, job="q"),
        *body(2, 2.03, 7.04, job="q", node=NODE_2),
        *body(0, 7.3, 8.8, job="q", attempt=2, node=NODE_2),
    ]
    killed = AttemptRow(
        "q-0", 1, "q", at(0), NODE_1, "abandoned", "lease_expired", T0 + 0.4, T0 + 2.04
    )
    gone = [Exit("soak-1", 100, T0 + 0.5, -9, expected=True)]

    def runs(taken_over: float) -> list[RunRow]:
        return [
            row(
                0, job="q", attempt=2, holder=NODE_2, claimed=taken_over, started=7.3, finished=8.85
            ),
            row(2, job="q", holder=NODE_2, started=2.02, finished=7.07),
            row(4, "skipped", job="q", reason="overlap", finished=4.01),
        ]

    fields: dict[str, Any] = {"attempts": [killed], "exits": gone}
    verdict = check(history([job], lines, runs(2.04), **fields))
    assert verdict.ok, verdict.findings
    late = check(history([job], lines, runs(4.5), **fields))
    assert rules(late) == ["3 unaccounted"]


def test_failures_are_accounted_only_when_the_job_failed_for_a_fault() -> None:
    job = spec("items", due=(0,))
    errored = body(0, 0.0, 1.0, job="items", close=ERROR)
    failed = [row(0, "failed", job="items", finished=1.1)]
    restart = fault(kinds.RESTART, None, 0.5, 3.0)
    verdict = check(history([job], errored, failed, faults=[restart]))
    assert verdict.ok, verdict.findings
    assert verdict.ended_by_fault == 1
    # No fault then; a fault of another node; a body the scheduler cancelled; one that
    # failed on purpose (a retry was due).
    assert rules(check(history([job], errored, failed))) == ["3 unaccounted"]
    elsewhere = fault(kinds.CUT, "soak-2", 0.5, 3.0)
    assert rules(check(history([job], errored, failed, faults=[elsewhere]))) == ["3 unaccounted"]
    for close in (CANCELLED, FAIL):
        lines = body(0, 0.0, 1.0, job="items", close=close)
        assert rules(check(history([job], lines, failed, faults=[restart]))) == ["3 unaccounted"]


def test_abandoned_is_accounted_only_once_given_up() -> None:
    job = spec(due=(0,))
    lines = body(0, 0.0, None)
    abandoned = [row(0, "abandoned", reason="lease_expired", finished=2.0)]
    gone = [Exit("soak-1", 100, T0 + 1.0, -9, expected=True)]
    assert rules(check(history([job], lines, abandoned, exits=gone))) == ["3 unaccounted"]
    given_up = [event("run_given_up", NODE_2, 40.0, "tick-0")]
    assert check(history([job], lines, abandoned, exits=gone, events=given_up)).ok


# Rule 4 ------------------------------------------------------------------------------


def test_a_body_started_before_its_period_fails() -> None:
    verdict = check(history([spec(due=(1,))], body(1, 0.9, 1.0), [row(1)]))
    assert rules(verdict) == ["4 early"]


def test_two_bodies_of_one_period_at_once_fail_unless_orphaned() -> None:
    lines = [
        *body(0, 0.0, 7.0, job="slow", run_id="r"),
        *body(0, 6.0, 13.0, job="slow", run_id="r", attempt=2, node=NODE_2, close=CANCELLED),
    ]
    job = spec("slow", due=(0,), non_cooperative=True)
    runs = [row(0, job="slow", attempt=2, run_id="r", holder=NODE_2)]
    succeeded = [AttemptRow("r", 1, "slow", at(0), NODE_1, "succeeded", None, T0, T0 + 7)]
    together = history([job], lines, runs, attempts=succeeded)
    assert rules(check(together)) == ["4 ran together"]
    orphaned = [event("run_orphaned", NODE_1, 5.0, "r")]
    assert check(replace(together, events=orphaned)).ok


def test_a_body_that_never_ended_fails_unless_its_process_did() -> None:
    job = spec(due=(0,))
    lines = body(0, 0.0, None, run_id="r")
    runs = [row(0, "abandoned", run_id="r")]
    given_up = [event("run_given_up", NODE_2, 40.0, "r")]
    assert rules(check(history([job], lines, runs, events=given_up))) == ["4 never ended"]
    started = NodeEvent("node_started", NODE_1, T0 - 10, pid=100)
    gone = Exit("soak-1", 100, T0 + 1.0, -9, expected=True)
    ended = history([job], lines, runs, events=[*given_up, started], exits=[gone])
    assert check(ended).ok


def test_a_node_that_exits_by_itself_fails() -> None:
    crash = Exit("soak-3", 300, T0 + 10, 1, expected=False)
    verdict = check(history([spec()], exits=[crash]))
    assert rules(verdict) == ["node exited"]


def test_a_frozen_body_stopped_as_soon_as_thawed_is_its_thawed_tail_only() -> None:
    """SIGSTOP of the earlier body's node covers the later one's start, and the earlier
    body stops within THAW_TAIL_S of the thaw: allowed; later than that, or completed, or
    with no freeze of its node: it ran beside the later one."""
    lines = [
        *body(0, 0.0, 12.3, job="coop", run_id="r", close=CANCELLED),
        *body(0, 8.0, 15.0, job="coop", run_id="r", attempt=2, node=NODE_2),
    ]
    job = spec("coop", due=(0,))
    runs = [row(0, job="coop", attempt=2, run_id="r", holder=NODE_2)]
    frozen = [fault("sigstop", "soak-1", 2.0, 12.0)]
    thawed = history([job], lines, runs, faults=frozen)
    assert check(thawed).ok
    late = [fault("sigstop", "soak-1", 2.0, 11.0)]
    assert rules(check(replace(thawed, faults=late))) == ["4 ran together"]
    assert rules(check(replace(thawed, faults=[]))) == ["4 ran together"]


def test_window_c_allows_a_completion_as_its_frozen_node_thawed_and_said_so() -> None:
    lines = [
        *body(0, 0.0, 12.05, job="coop", run_id="r"),
        *body(0, 8.0, 15.0, job="coop", run_id="r", attempt=2, node=NODE_2),
    ]
    job = spec("coop", due=(0,))
    runs = [row(0, job="coop", attempt=2, run_id="r", holder=NODE_2)]
    frozen = [fault("sigstop", "soak-1", 2.0, 12.0)]
    said = [event("run_orphaned", NODE_1, 12.06, "r")]
    thawed = history([job], lines, runs, faults=frozen, events=said)
    verdict = check(thawed)
    assert verdict.ok
    assert [a.window for a in verdict.allowed] == [WINDOW_C]
    assert "1 completed twice" in rules(check(replace(thawed, events=[])))
    late = [fault("sigstop", "soak-1", 2.0, 10.0)]
    assert "1 completed twice" in rules(check(replace(thawed, faults=late)))


def test_window_a_allows_the_non_cooperative_job_told_before_it_completed() -> None:
    told = [event("lease_lost", NODE_1, 5.0, "r")]
    allowed = check(_twice("slow", events=told))
    assert allowed.ok, allowed.findings
    assert [a.window for a in allowed.allowed] == [WINDOW_A]
    late = [event("lease_lost", NODE_1, 7.5, "r")]  # told after it completed: no excuse
    assert rules(check(_twice("slow", events=late))) == ["1 completed twice"]
    assert rules(check(_twice("tick", events=told))) == ["1 completed twice"]


def test_window_b_allows_a_server_back_with_the_lease_spent() -> None:
    """The body completed while the server was down; the server came back and the run
    was taken over within a second (its lease ran out before anyone could renew it)."""
    restart = [fault(kinds.RESTART, None, 6.0, 9.0)]
    spent = AttemptRow("r", 1, "tick", at(0), NODE_1, "abandoned", "lease_expired", T0, T0 + 9.6)
    verdict = check(_twice(faults=restart, attempts=[spent]))
    assert verdict.ok, verdict.findings
    assert [a.window for a in verdict.allowed] == [WINDOW_B]
    # Taken over long after the server came back: the node had time to renew.
    late = replace(spent, finished_at=T0 + 11.0)
    assert rules(check(_twice(faults=restart, attempts=[late]))) == ["1 completed twice"]


def test_a_pools_members_past_its_limit_fail_unless_the_earlier_was_frozen() -> None:
    members = [
        spec("pool-a", "allow", due=(0, 2), pool="p", pool_limit=1),
        spec("pool-b", "allow", due=(0, 2), pool="p", pool_limit=1),
    ]
    runs = [row(period, job=job.name) for job in members for period in (0, 2)]
    in_turn = [
        *body(0, 0.0, 0.5, job="pool-a"),
        *body(0, 0.5, 1.0, job="pool-b"),
        *body(2, 2.0, 2.5, job="pool-a"),
        *body(2, 2.6, 3.1, job="pool-b"),
    ]
    assert check(history(members, in_turn, runs)).ok
    together = [*in_turn[:6], *body(2, 2.4, 2.9, job="pool-b")]
    found = check(history(members, together, runs))
    assert rules(found) == ["5 over the pool's limit"]
    # The earlier body was frozen with its node and stopped as it thawed: the later one
    # began in the freeze, as rule 4 allows.
    frozen = [fault(kinds.STOP, node_name(NODE_1), 1.9, 2.45)]
    assert check(history(members, together, runs, faults=frozen)).ok


def test_a_run_occupies_its_job_until_its_holder_says_its_outcome_committed() -> None:
    """The body ended at 0.4 and its outcome's statement began at 0.45, but its commit
    came back at 1.3 (the holder's `run_succeeded` line): a peer's claim at 1.02 saw the
    run in hand and skipped the next period, as the rule allows."""
    job = spec("tenant", due=(0, 1))
    lines = body(0, 0.05, 0.4, job="tenant", run_id="r0")
    runs = [
        row(0, job="tenant", run_id="r0", started=0.05, finished=0.45),
        row(1, "skipped", job="tenant", reason="overlap", claimed=1.02, finished=1.02),
    ]
    without_line = history([job], lines, runs)
    assert rules(check(without_line)) == ["3 unaccounted"]
    committed = [
        NodeEvent("run_succeeded", NODE_1, T0 + 1.3, "r0", 1),
        NodeEvent("run_succeeded", NODE_2, T0 + 5.0, "r0", 1),  # another node's: not it
    ]
    assert check(history([job], lines, runs, events=committed)).ok
