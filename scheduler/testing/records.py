"""What a harness's database says happened, read through the store's own queries, and
assertions on it that say exactly what differed."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from scheduler.model import Event
from scheduler.store import deliveries, items, queries
from scheduler.store.database import Database
from scheduler.store.items import ItemRow
from scheduler.store.queries import AttemptRow, RunRow
from scheduler.testing.clock import parse_instant
from scheduler.testing.logs import LogCapture

# More rows than any test makes.
_ALL = 1_000_000


class Records:
    """Reads over the harness's database: runs, attempts, items, alert events, log lines."""

    def __init__(self, database: Database, logs: LogCapture) -> None:
        self.database = database
        self._logs = logs

    def runs(self, job: str | None = None, *, status: str | None = None) -> list[RunRow]:
        """Runs (their latest attempt), oldest period first."""
        found = queries.list_runs(
            self.database,
            jobs=[job] if job else (),
            statuses=[status] if status else (),
            limit=_ALL,
        )
        return sorted(found, key=lambda run: (run.period, run.job))

    def run(self, job: str, period: datetime | str) -> RunRow:
        """The run of one period; AssertionError if it has none."""
        moment = parse_instant(period)
        found = queries.run_at(self.database, job, moment)
        if found is None:
            raise AssertionError(f"job {job!r} has no run for {moment.isoformat()}")
        return found

    def periods(self, job: str, *, status: str | None = None) -> list[datetime]:
        """The periods of a job that have a run (in `status`), oldest first."""
        return [run.period for run in self.runs(job, status=status)]

    def statuses(self, job: str) -> dict[datetime, str]:
        """Each period of a job and its status."""
        return {run.period: run.status for run in self.runs(job)}

    def attempts(self, job: str, period: datetime | str) -> list[AttemptRow]:
        """Every attempt of one period, the first first: the earlier ones as recorded when
        the next began, then the run's current one."""
        run = self.run(job, period)
        earlier = queries.attempts_of(self.database, run.id)
        current = AttemptRow(
            run.attempt,
            run.holder,
            run.status,
            run.reason,
            run.started_at,
            run.finished_at,
            run.duration_ms,
            run.error_type,
            run.error_message,
            run.error_traceback,
        )
        found = [attempt for attempt in earlier if attempt.attempt != run.attempt]
        return sorted([*found, current], key=lambda attempt: attempt.attempt)

    def items(self, job: str | None = None) -> list[ItemRow]:
        """Items claimed through `ctx.once`/`ctx.item`, oldest first (those a body claimed
        at one virtual instant by job and key)."""
        found = items.list_items(self.database, job, limit=_ALL)
        return sorted(found, key=lambda item: (item.claimed_at, item.job, item.key))

    def events(self, job: str | None = None) -> list[Event]:
        """Alert events (failed, skipped, missed, …), oldest first."""
        rows = deliveries.recent(self.database, job=job, limit=_ALL)
        return [row.event for row in reversed(rows)]

    def log_lines(self, event: str | None = None, **fields: Any) -> list[dict[str, Any]]:
        """The node's log lines (one event's, with these field values), in order."""
        if event is None:
            return list(self._logs.lines)
        return self._logs.named(event, **fields)

    def assert_periods(
        self, job: str, expected: list[str] | list[datetime], *, status: str | None = "succeeded"
    ) -> None:
        """The periods of `job` in `status` (None: any) are exactly `expected`, in order."""
        wanted = [parse_instant(moment).isoformat() for moment in expected]
        found = [period.isoformat() for period in self.periods(job, status=status)]
        if found != wanted:
            missing = [moment for moment in wanted if moment not in found]
            extra = [moment for moment in found if moment not in wanted]
            raise AssertionError(
                f"job {job!r}, status {status or 'any'}: periods {found}; "
                f"expected {wanted} (missing {missing}, unexpected {extra})"
            )
