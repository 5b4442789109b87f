"""The soak's judge: pure functions over what the soak left behind (the ledger the bodies
wrote, the runs, attempts and user items tables, the nodes' JSON logs, the fault log).

Each rule is a function of a `History` returning `Finding`s (what fails the soak) and,
for rule 1, the doubles it allowed and why. `check` runs them all and counts what the
summary prints. Times are wall-clock seconds (the nodes, their bodies and the server
share one host, so one clock).
"""

from __future__ import annotations

import functools
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from tests.soak import plan as kinds
from tests.soak.injector import Exit, FaultRecord
from tests.soak.ledger import CANCELLED, CLOSING, END, ERROR, SEEN, START, Line, node_name

# Rule 1 (b): how long after a body's end its node may be hit for the outcome to be lost.
OUTCOME_WINDOW_S = 2.0
# A server back with less than this left of a lease: no node can renew it in time, and
# the run is taken over although its body completed (window (b)).
RESTORED_S = 1.0
# Rule 1 (b): the faults that may keep a node from writing an outcome.
OUTCOME_FAULTS = (kinds.KILL, kinds.STOP, kinds.CUT, kinds.BLACKHOLE)
# Rule 3, skips: slack around the skip's decision (database statement times vs ledger).
SKIP_SLACK_S = 0.25
# Rule 4: how early a body may start by the ledger's clock (the same host's).
EARLY_SLACK_S = 0.05

FINAL_FAULT_STATUSES = ("failed", "abandoned", "timed_out")
# The holder's line for an outcome, said once its write committed.
OUTCOME_LINES = ("run_succeeded", "run_failed")
IN_HAND = ("claimed", "running", "queued")
WINDOW_A = "a: non-cooperative body told to stop, went on (lease_lost, run_orphaned)"
WINDOW_B = "b: outcome lost to a fault of its node"
WINDOW_C = "c: completed as its frozen node thawed (run_orphaned)"
# A body frozen with its node (SIGSTOP) past its lease may run this long once thawed:
# the node's lease watch tells it at once, and it stops at its next look (a child
# process is killed), but the instant between is the body's.
THAW_TAIL_S = 1.0


@dataclass(frozen=True)
class JobSpec:
    name: str
    overlap: str  # skip, queue, allow
    process: bool  # isolation="process": the body is a child the node kills
    due: tuple[datetime, ...]  # periods due in the judged window
    non_cooperative: bool = False  # rule 1 (a) may apply
    items: bool = False  # rule 2 applies
    pool: str | None = None  # rule 5: its pool's members run at most `pool_limit` at once
    pool_limit: int = 0


@dataclass(frozen=True)
class RunRow:
    job: str
    period: datetime
    run_id: str
    status: str
    reason: str | None
    origin: str
    attempt: int
    holder: str | None
    claimed_at: float
    started_at: float | None
    finished_at: float | None


@dataclass(frozen=True)
class AttemptRow:
    run_id: str
    attempt: int
    job: str
    period: datetime
    node: str | None
    status: str
    reason: str | None
    started_at: float | None
    finished_at: float | None


@dataclass(frozen=True)
class ItemRow:
    key: str
    run_id: str
    attempt: int
    node: str


@dataclass(frozen=True)
class NodeEvent:
    """A line of a node's JSON log that the rules read."""

    event: str
    node: str  # the node's id
    wall: float
    run_id: str | None = None
    attempt: int | None = None
    pid: int | None = None  # node_started


@dataclass(frozen=True, eq=False)  # hashed by identity: the rules cache what they derive
class History:
    jobs: Mapping[str, JobSpec]
    ledger: Sequence[Line]
    runs: Sequence[RunRow]
    attempts: Sequence[AttemptRow]
    items: Sequence[ItemRow]
    events: Sequence[NodeEvent]
    faults: Sequence[FaultRecord]
    exits: Sequence[Exit]
    window: tuple[float, float]  # periods due in [start, settle start) are judged
    observed_until: float  # the end of the settle: when the tables were read


@dataclass(frozen=True)
class Finding:
    rule: str
    job: str
    period: datetime | None
    message: str

    def __str__(self) -> str:
        at = f" {self.period.isoformat()}" if self.period else ""
        return f"[{self.rule}] {self.job}{at}: {self.message}"


@dataclass(frozen=True)
class Allowed:
    window: str
    job: str
    period: datetime
    message: str

    def __str__(self) -> str:
        return f"[{self.window[0]}] {self.job} {self.period.isoformat()}: {self.message}"


@dataclass
class Verdict:
    findings: list[Finding] = field(default_factory=list)
    allowed: list[Allowed] = field(default_factory=list)
    periods_checked: int = 0
    completed: int = 0
    skipped_justified: int = 0
    ended_by_fault: int = 0
    duplicates: int = 0
    unaccounted: int = 0

    @property
    def ok(self) -> bool:
        return not self.findings


# Bodies ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Body:
    """One call of a job's function, from its ledger lines: `end` is when it was last
    seen alive: its closing line, or else when its process surely ended (None: never)."""

    job: str
    period: datetime
    run_id: str
    attempt: int
    node: str
    pid: int
    start: float
    close: str | None  # the closing event, None if the body left no closing line
    end: float | None

    @property
    def completed(self) -> bool:
        return self.close == END

    @property
    def attempt_key(self) -> tuple[str, int]:
        return (self.run_id, self.attempt)

    def describe(self) -> str:
        end = f"{self.end:.3f}" if self.end is not None else "never"
        return (
            f"attempt {self.attempt} on {self.node} (pid {self.pid}) {self.start:.3f}..{end}"
            f" {self.close or 'no closing line'}"
        )


def bodies(history: History) -> list[Body]:
    """Every body the ledger shows. A body without a closing line ended when its node's
    process was seen gone, or (a child process) when its node gave the run up or
    abandoned it, whichever came first."""
    starts: dict[tuple[str, int], Line] = {}
    closes: dict[tuple[str, int], Line] = {}
    for line in history.ledger:
        if line.event == START:
            starts.setdefault(line.attempt_key, line)
        elif line.event in CLOSING:
            closes.setdefault(line.attempt_key, line)
    pids = {e.node: e.pid for e in history.events if e.event == "node_started" and e.pid}
    found = []
    for key, start in starts.items():
        close = closes.get(key)
        end = close.wall if close else _inferred_end(history, start, pids)
        found.append(
            Body(
                start.job,
                start.period,
                start.run_id,
                start.attempt,
                start.node,
                start.pid,
                start.wall,
                close.event if close else None,
                end,
            )
        )
    return sorted(found, key=lambda body: body.start)


def _inferred_end(history: History, start: Line, pids: Mapping[str, int]) -> float | None:
    candidates = []
    node_pid = pids.get(start.node)
    for gone in history.exits:
        if gone.pid in (node_pid, start.pid) and gone.wall >= start.wall:
            candidates.append(gone.wall)
    spec = history.jobs.get(start.job)
    if spec is not None and spec.process:
        candidates += [
            event.wall
            for event in history.events
            if event.event in ("lease_lost", "run_abandoned", "run_timed_out")
            and (event.run_id, event.attempt) == start.attempt_key
            and event.wall >= start.wall
        ]
    return min(candidates) if candidates else None


def _by_period(found: Iterable[Body]) -> dict[tuple[str, datetime], list[Body]]:
    grouped: dict[tuple[str, datetime], list[Body]] = defaultdict(list)
    for body in found:
        grouped[(body.job, body.period)].append(body)
    return grouped


@functools.lru_cache(maxsize=4)
def _outcome_records(history: History) -> dict[tuple[str, int], RunRow | AttemptRow]:
    """Each attempt's record, where one was written: the runs row for its attempt, and
    the attempts table for the attempts before it."""
    records: dict[tuple[str, int], RunRow | AttemptRow] = {}
    for attempt in history.attempts:
        records[(attempt.run_id, attempt.attempt)] = attempt
    for row in history.runs:
        records[(row.run_id, row.attempt)] = row
    return records


@functools.lru_cache(maxsize=4)
def _attempt_events(history: History) -> dict[tuple[str, int], list[NodeEvent]]:
    """The node log lines about each attempt (run id, attempt)."""
    found: dict[tuple[str, int], list[NodeEvent]] = defaultdict(list)
    for event in history.events:
        if event.run_id is not None and event.attempt is not None:
            found[(event.run_id, event.attempt)].append(event)
    return found


@functools.lru_cache(maxsize=4)
def _rows(history: History) -> dict[tuple[str, datetime], RunRow]:
    return {(row.job, row.period): row for row in history.runs}


# Rule 1 ------------------------------------------------------------------------------


def orphaned(history: History, body: Body) -> bool:
    """Window (a): the body is the non-cooperative job's, and the node that ran it said
    `run_orphaned` for that very attempt (it gave the run up while the function, which
    it cannot stop, was still inside), or told it to stop (`lease_lost`) before it
    completed: it went on, and its period runs again elsewhere."""
    spec = history.jobs.get(body.job)
    if spec is None or not spec.non_cooperative:
        return False
    events = _attempt_events(history)[body.attempt_key]
    if any(event.event == "run_orphaned" for event in events):
        return True
    return body.end is not None and given_up_before(history, body, body.end)


def given_up_before(history: History, body: Body, instant: float) -> bool:
    """Whether the body's node had given its run up (`lease_lost` for that attempt)
    before `instant`."""
    return any(
        event.event == "lease_lost" and event.wall < instant
        for event in _attempt_events(history)[body.attempt_key]
    )


def outcome_lost_to_fault(history: History, body: Body) -> FaultRecord | None:
    """Window (b), at-least-once across crashes: the body completed while its node still
    held the run (no `lease_lost` for that attempt before its end, and the attempt not
    yet ended or taken over in the tables then: a body that completes after its run was
    given up is window (a)'s case), no `succeeded` or `failed` record of its attempt
    exists, and a SIGKILL, SIGSTOP, cut or black hole of its node was
    active at some moment of [its end, its end + 2 s] (it began in that window, or had
    begun earlier and was still going: either way the node could not write the outcome
    in time); or a server restart was, and the attempt was taken over within RESTORED_S
    of the server's return (its lease ran out before anyone could renew it). The fault
    that explains it, or None."""
    if body.end is None or given_up_before(history, body, body.end):
        return None
    record = _outcome_records(history).get(body.attempt_key)
    if record is not None and record.status in ("succeeded", "failed"):
        return None
    if record is not None and record.finished_at is not None and record.finished_at < body.end:
        return None  # taken over (or ended) before the body completed: not held any more
    name = node_name(body.node)
    for fault in history.faults:
        if (
            fault.kind in OUTCOME_FAULTS
            and fault.node == name
            and fault.start <= body.end + OUTCOME_WINDOW_S
            and fault.end >= body.end
        ):
            return fault
        if (
            fault.kind == "server_restart"
            and fault.start <= body.end + OUTCOME_WINDOW_S
            and fault.end >= body.end
            and record is not None
            and record.finished_at is not None
            and record.finished_at <= fault.end + RESTORED_S
        ):
            return fault  # the server came back with the lease all but spent
    return None


def completed_twice(history: History, found: Sequence[Body]) -> tuple[list[Finding], list[Allowed]]:
    """Rule 1: a (job, period) whose body completed (`end`) more than once fails, unless
    every completion but the one the runs table recorded (or, with none recorded, the
    last) falls in window (a) or (b). Each allowed double is reported with its reason."""
    findings, allowed = [], []
    rows = _rows(history)
    for (job, period), group in _by_period(found).items():
        completions = sorted((b for b in group if b.completed), key=lambda b: b.end or 0.0)
        if len(completions) < 2:
            continue
        row = rows.get((job, period))
        recorded = [
            b
            for b in completions
            if row is not None and row.status == "succeeded" and b.attempt == row.attempt
        ]
        kept = recorded[0] if recorded else completions[-1]
        for body in completions:
            if body is kept:
                continue
            if orphaned(history, body):
                allowed.append(Allowed(WINDOW_A, job, period, body.describe()))
                continue
            if completed_as_thawed(history, body):
                allowed.append(Allowed(WINDOW_C, job, period, body.describe()))
                continue
            fault = outcome_lost_to_fault(history, body)
            if fault is not None:
                allowed.append(
                    Allowed(
                        WINDOW_B,
                        job,
                        period,
                        f"{body.describe()}; {fault.kind} of {fault.node} at {fault.start:.3f}",
                    )
                )
                continue
            findings.append(
                Finding(
                    "1 completed twice",
                    job,
                    period,
                    f"{body.describe()} and {kept.describe()}",
                )
            )
    return findings, allowed


# Rule 2 ------------------------------------------------------------------------------


def items_done_twice(history: History) -> list[Finding]:
    """Rule 2: any key with more than one row in the user table fails, no exception; and
    a period of the items job recorded `succeeded` must have its key's row (the row and
    `ctx.once`'s record commit together, so a success without it lost the item)."""
    findings = []
    counts = Counter(item.key for item in history.items)
    for key, count in sorted(counts.items()):
        if count > 1:
            holders = [f"{i.run_id}/{i.attempt}@{i.node}" for i in history.items if i.key == key]
            findings.append(Finding("2 item done twice", "items", None, f"{key}: {holders}"))
    for spec in history.jobs.values():
        if not spec.items:
            continue
        for row in history.runs:
            key = f"item-{row.period.isoformat()}"
            if row.job == spec.name and row.status == "succeeded" and counts[key] == 0:
                findings.append(
                    Finding("2 item lost", row.job, row.period, "succeeded, no item row")
                )
    return findings


# Rule 3 ------------------------------------------------------------------------------


def occupancy(history: History, body: Body) -> tuple[float, float]:
    """When a body kept its job occupied: from its attempt's start (the runs or attempts
    table's `started_at`, when the run was marked running: a child process writes its
    first line only once its interpreter is up) or its first line, whichever came first,
    until it ended or its outcome was written, whichever came later (a run stays in hand
    until its outcome is written). Written means committed: the row's `finished_at` is
    when the outcome's statement began, and the holder's outcome line (`run_succeeded`,
    `run_failed`) is said once its commit came back; a peer's claim until then sees the
    run in hand, its body running (a statement waiting on the loaded machine took 0.9 s
    to commit in the soak of seed 727686450)."""
    record = _outcome_records(history).get(body.attempt_key)
    starts = [body.start]
    ends = [t for t in (body.end,) if t is not None]
    if record is not None:
        starts += [record.started_at] if record.started_at is not None else []
        ends += [record.finished_at] if record.finished_at is not None else []
    ends += [
        event.wall
        for event in _attempt_events(history)[body.attempt_key]
        if event.event in OUTCOME_LINES and event.node == body.node
    ]
    return min(starts), max(ends) if ends else float("inf")


def skip_justified(history: History, row: RunRow, found: Sequence[Body]) -> bool:
    """A period recorded `skipped` (overlap) is justified when, within [its instant -
    0.25 s, the skip's decision + 0.25 s] (the decision: the skip row's finished_at,
    the statement's time), the ledger shows a body of an earlier period of the job
    occupying it (see `occupancy`). A `queue` job needs two earlier periods, one of
    them running so, the other running too or claimed and not yet started then (its
    latest attempt: a retry or a takeover waiting its turn counts)."""
    spec = history.jobs[row.job]
    if spec.overlap == "allow":
        return False
    low = row.period.timestamp() - SKIP_SLACK_S
    high = (row.finished_at or row.claimed_at) + SKIP_SLACK_S
    earlier = [b for b in found if b.job == row.job and b.period < row.period]
    running = set()
    for body in earlier:
        start, end = occupancy(history, body)
        if start <= high and end >= low:
            running.add(body.period)
    if spec.overlap == "skip":
        return bool(running)
    if not running:
        return False
    rows = _rows(history)
    first_start: dict[datetime, float] = {}
    # When each attempt first started its body.
    started: dict[tuple[str, int], float] = {}
    for body in earlier:
        first_start[body.period] = min(first_start.get(body.period, body.start), body.start)
        started[body.attempt_key] = min(started.get(body.attempt_key, body.start), body.start)
    waiting = set()
    for (job, period), other in rows.items():
        if job != row.job or period >= row.period or period in running:
            continue
        if other.status == "skipped":
            continue
        # Claimed by the skip's decision and no body begun by the period's instant (an
        # earlier period: its first claim came at its own instant).
        claimed_by_then = other.attempt > 1 or other.claimed_at <= high
        never_started = first_start.get(period, float("inf")) >= low
        # Or its latest attempt, a retry or a takeover from a dead node (which moves
        # `claimed_at` to its own claim), claimed by then and waiting its turn behind the
        # body running: its first attempt's body may have begun, and died, before.
        latest = started.get((other.run_id, other.attempt), float("inf"))
        retaken_waiting = other.attempt > 1 and other.claimed_at <= high and latest >= low
        if (claimed_by_then and never_started) or retaken_waiting:
            waiting.add(period)
    return len(running) + len(waiting) >= 2


def explained_end(history: History, row: RunRow, found: Sequence[Body]) -> str | None:
    """Why a period that ended `failed`, `timed_out` or `abandoned` is accounted for, or
    None. `failed`/`timed_out`: the job's own code failed because of a fault, i.e. the
    body of the final attempt closed with `error` (it raised because something under it
    failed) while a fault of the server (terminate_all, restart) or of that attempt's
    node was active, from 1 s before the body started to 1 s after it ended. A failure
    the job chose (`fail`: soak-flaky's attempt 1, which has a retry), one recorded for
    an attempt whose body never raised (the scheduler's own doing), or one with no
    body are unaccounted. `abandoned`: only once a node gave the run up for good
    (`run_given_up`, the crash-loop limit); an abandoned run is otherwise retried by
    another node, so one still abandoned after the settle is lost."""
    if row.status == "abandoned":
        for event in history.events:
            if event.event == "run_given_up" and event.run_id == row.run_id:
                return f"run_given_up by {event.node}"
        return None
    final = [b for b in found if b.attempt_key == (row.run_id, row.attempt)]
    if not final or final[0].close != ERROR:
        return None
    body = final[0]
    end = body.end if body.end is not None else history.observed_until
    for fault in history.faults:
        if fault.node is not None and fault.node != node_name(body.node):
            continue
        if fault.start <= end + 1 and fault.end >= body.start - 1:
            return f"{fault.kind} of {fault.node or 'the server'}"
    return None


def unaccounted_periods(history: History, found: Sequence[Body], verdict: Verdict) -> list[Finding]:
    """Rule 3: every period due for every job in the judged window must have a row, and
    its final state must be `succeeded` (with a completed body in the ledger: `end`, or
    for the items job `seen`), `skipped` for overlap where `skip_justified` (never for
    `allow` jobs), or `failed`/`abandoned`/`timed_out` where `explained_end`. A run
    still claimed, running or queued once the settle is over, a missed period, any other
    skip, or no row at all is unaccounted."""
    findings = []
    rows = _rows(history)
    completions = {(b.job, b.period) for b in found if b.close in (END, SEEN)}
    start, settle = history.window

    def unaccounted(job: str, period: datetime, message: str) -> None:
        verdict.unaccounted += 1
        findings.append(Finding("3 unaccounted", job, period, message))

    for spec in history.jobs.values():
        for period in spec.due:
            if not start <= period.timestamp() < settle:
                continue
            verdict.periods_checked += 1
            row = rows.get((spec.name, period))
            if row is None:
                unaccounted(spec.name, period, "no row")
            elif row.status == "succeeded":
                if (spec.name, period) in completions:
                    verdict.completed += 1
                else:
                    unaccounted(spec.name, period, "succeeded, but no body completed")
            elif row.status == "skipped" and row.reason == "overlap":
                if skip_justified(history, row, found):
                    verdict.skipped_justified += 1
                else:
                    unaccounted(
                        spec.name,
                        period,
                        f"skipped (overlap) behind nothing running ({spec.overlap})",
                    )
            elif row.status in FINAL_FAULT_STATUSES:
                if explained_end(history, row, found) is not None:
                    verdict.ended_by_fault += 1
                else:
                    why = (
                        f"{row.status} ({row.reason}, attempt {row.attempt}), no fault explains it"
                    )
                    unaccounted(spec.name, period, why)
            elif row.status in IN_HAND:
                unaccounted(
                    spec.name, period, f"still {row.status} after the settle ({row.holder})"
                )
            else:
                unaccounted(spec.name, period, f"{row.status} ({row.reason})")
    return findings


# Rule 4 ------------------------------------------------------------------------------


def started_early(found: Sequence[Body]) -> list[Finding]:
    """Rule 4, clock: no body starts before its period (50 ms slack: the ledger's
    clock is the server's, on the same host)."""
    return [
        Finding(
            "4 early",
            body.job,
            body.period,
            f"started {body.period.timestamp() - body.start:.3f}s early: {body.describe()}",
        )
        for body in found
        if body.start < body.period.timestamp() - EARLY_SLACK_S
    ]


def thawed_tail(history: History, first: Body, second: Body) -> bool:
    """The earlier body was frozen with its node (SIGSTOP) when the later one started,
    and ended within THAW_TAIL_S of the thaw (stopped when told, its child killed, or,
    as window (c) allows, completed): it did nothing while frozen, and only the instant
    a thawed thread runs before it is told falls beside the later one."""
    if first.end is None:
        return False
    name = node_name(first.node)
    return any(
        fault.kind == "sigstop"
        and fault.node == name
        and fault.start <= second.start <= fault.end
        and first.end <= fault.end + THAW_TAIL_S
        for fault in history.faults
    )


def completed_as_thawed(history: History, body: Body) -> bool:
    """Window (c): the body's node was frozen (SIGSTOP, the node and its children, as a
    paused VM) and the body completed within THAW_TAIL_S of the thaw, having waited out
    its work in the freeze, before the node could tell it; and the node said so
    (`run_orphaned` for that attempt, as a function that returned past its lease)."""
    if body.end is None or not body.completed:
        return False
    name = node_name(body.node)
    frozen = any(
        fault.kind == "sigstop"
        and fault.node == name
        and fault.start <= body.end <= fault.end + THAW_TAIL_S
        for fault in history.faults
    )
    return frozen and any(
        event.event == "run_orphaned" for event in _attempt_events(history)[body.attempt_key]
    )


def ran_together(history: History, found: Sequence[Body]) -> list[Finding]:
    """Rule 4, overlap: no two bodies of one period run at the same time (one starts
    before the other's end, a body with no known end running for ever), unless the
    earlier one is in rule 1's window (a) (its node said `run_orphaned` for it) or was
    frozen with its node and stopped as soon as it was thawed (`thawed_tail`)."""
    findings = []
    for (job, period), group in _by_period(found).items():
        ordered = sorted(group, key=lambda b: b.start)
        for index, first in enumerate(ordered):
            for second in ordered[index + 1 :]:
                end = first.end if first.end is not None else float("inf")
                if (
                    second.start < end
                    and not orphaned(history, first)
                    and not thawed_tail(history, first, second)
                ):
                    findings.append(
                        Finding(
                            "4 ran together",
                            job,
                            period,
                            f"{first.describe()} and {second.describe()}",
                        )
                    )
    return findings


def over_pool_limit(history: History, found: Sequence[Body]) -> list[Finding]:
    """Rule 5, pools: at no instant do more bodies of a pool's members run than its
    limit, leaving out, as rule 4 does, a body in window (a) (told to stop, went on) or
    frozen with its node and stopped as it thawed, once a later body began."""
    findings = []
    pools: dict[str, list[Body]] = defaultdict(list)
    limits: dict[str, int] = {}
    for body in found:
        spec = history.jobs.get(body.job)
        if spec is not None and spec.pool is not None:
            pools[spec.pool].append(body)
            limits[spec.pool] = spec.pool_limit
    for pool, members in pools.items():
        ordered = sorted(members, key=lambda b: b.start)
        for index, body in enumerate(ordered):
            beside = [
                other
                for other in ordered[:index]
                if body.start < (other.end if other.end is not None else float("inf"))
                and not orphaned(history, other)
                and not thawed_tail(history, other, body)
            ]
            if len(beside) >= limits[pool]:
                running = "; ".join(f"{other.job} {other.describe()}" for other in beside)
                findings.append(
                    Finding(
                        "5 over the pool's limit",
                        body.job,
                        body.period,
                        f"{body.describe()} began while {running} ran (pool {pool})",
                    )
                )
    return findings


def never_ended(history: History, found: Sequence[Body]) -> list[Finding]:
    """Rule 4, ends: a body with no closing line whose process was never seen to end,
    nor (a child) given up, is still running once the soak is over: every started run
    must end."""
    return [
        Finding("4 never ended", body.job, body.period, body.describe())
        for body in found
        if body.end is None and body.close is None
    ]


def unexpected_exits(history: History) -> list[Finding]:
    """A node that left by itself (a crash, a side thread that stopped it) fails the
    soak: no fault the plan injects is a reason for a node to exit."""
    return [
        Finding("node exited", gone.node, None, f"pid {gone.pid} exited {gone.code} unasked")
        for gone in history.exits
        if not gone.expected
    ]


def check(history: History) -> Verdict:
    verdict = Verdict()
    found = bodies(history)
    doubles, allowed = completed_twice(history, found)
    verdict.allowed = allowed
    items = items_done_twice(history)
    verdict.duplicates = len(doubles) + sum(1 for f in items if f.rule == "2 item done twice")
    verdict.findings += doubles
    verdict.findings += items
    verdict.findings += unaccounted_periods(history, found, verdict)
    verdict.findings += started_early(found)
    verdict.findings += ran_together(history, found)
    verdict.findings += over_pool_limit(history, found)
    verdict.findings += never_ended(history, found)
    verdict.findings += unexpected_exits(history)
    return verdict


def summary(history: History, verdict: Verdict) -> str:
    faults = Counter(fault.kind for fault in history.faults)
    by_window = Counter(a.window for a in verdict.allowed)
    lines = [
        "faults injected: "
        + (", ".join(f"{kind} {faults[kind]}" for kind in kinds.KINDS if faults[kind]) or "none"),
        f"periods checked: {verdict.periods_checked}",
        f"completed: {verdict.completed}",
        f"skipped (overlap, justified): {verdict.skipped_justified}",
        f"ended by a fault (failed/abandoned/timed_out, explained): {verdict.ended_by_fault}",
        "allowed doubles: " + (", ".join(f"{w} {n}" for w, n in sorted(by_window.items())) or "0"),
        f"duplicates (must be 0): {verdict.duplicates}",
        f"unaccounted (must be 0): {verdict.unaccounted}",
        f"bodies: {sum(1 for line in history.ledger if line.event == START)}"
        f" (cancelled {sum(1 for line in history.ledger if line.event == CANCELLED)})",
    ]
    lines += [f"  allowed {a}" for a in verdict.allowed]
    return "\n".join(lines)


def timeline(history: History, job: str, period: datetime) -> str:
    """Everything known of one period, in time order, with the faults around it: the
    example a failure shows."""
    moments: list[tuple[float, str]] = [(period.timestamp(), "the period falls due")]
    for line in history.ledger:
        if (line.job, line.period) == (job, period):
            moments.append(
                (
                    line.wall,
                    f"ledger {line.event} attempt {line.attempt} on {line.node} pid {line.pid}",
                )
            )
    run_ids = {row.run_id for row in history.runs if (row.job, row.period) == (job, period)}
    for row in history.runs:
        if row.run_id in run_ids:
            moments.append(
                (row.claimed_at, f"row claimed (last attempt {row.attempt}) by {row.holder}")
            )
            if row.finished_at is not None:
                moments.append(
                    (
                        row.finished_at,
                        f"row {row.status} ({row.reason}) attempt {row.attempt} by {row.holder}",
                    )
                )
    for attempt in history.attempts:
        if attempt.run_id in run_ids and attempt.finished_at is not None:
            moments.append(
                (
                    attempt.finished_at,
                    f"attempt {attempt.attempt} recorded {attempt.status} ({attempt.reason})"
                    f" on {attempt.node}",
                )
            )
    for event in history.events:
        if event.run_id in run_ids:
            moments.append(
                (event.wall, f"{event.node} logged {event.event} attempt {event.attempt}")
            )
    low, high = period.timestamp() - 15, max(t for t, _ in moments) + 5
    for fault in history.faults:
        if fault.start <= high and fault.end >= low:
            moments.append((fault.start, f"FAULT {fault.kind} {fault.node or 'server'} begins"))
            moments.append((fault.end, f"FAULT {fault.kind} {fault.node or 'server'} over"))
    for gone in history.exits:
        if low <= gone.wall <= high:
            moments.append((gone.wall, f"{gone.node} pid {gone.pid} exited ({gone.code})"))
    zero = period.timestamp()
    return "\n".join(
        f"  {t - zero:+8.3f}s  {text}" for t, text in sorted(moments, key=lambda m: m[0])
    )
