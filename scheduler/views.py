"""What the operator commands print: one record per row for `--json`, and aligned tables.

Each view builds its JSON records first and draws the table from those same
records, so the two outputs cannot disagree. Times are UTC, ISO-8601.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from scheduler import calendars
from scheduler.check import NODE_SILENT_AFTER, Report, alive
from scheduler.cron import parse_schedule
from scheduler.durations import format_duration
from scheduler.errors import ScheduleError
from scheduler.instants import utc_text
from scheduler.model import ONE_SHOT, JobRow
from scheduler.states import Origin, status_text
from scheduler.store.queries import AttemptRow, NodeRow, RunRow
from scheduler.tables import table

Record = dict[str, Any]
TRACEBACK_LINES = 12
ERROR_WIDTH = 60


def iso(moment: datetime | None) -> str | None:
    """Full-precision UTC ISO-8601 with a `Z`, for JSON."""
    if moment is None:
        return None
    return utc_text(moment)


def short_time(value: str | None) -> str:
    """An ISO time from a record, to the second, for a table cell."""
    if value is None:
        return "-"
    return datetime.fromisoformat(value).astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def period_text(value: str | None) -> str:
    """A period for a table cell: to the second, or in full when it has a fraction (a
    manual run's), so that `runs show JOB PERIOD` finds what the table printed."""
    if value is None:
        return "-"
    moment = datetime.fromisoformat(value).astimezone(UTC)
    return (iso(moment) or "-") if moment.microsecond else short_time(value)


def origin_text(origin: str, attempt: int) -> str:
    """How a run came to be, as `runs` shows it: `retry` for a later attempt the
    scheduler started by itself (a retry after a failure, a takeover of an expired
    lease) of a scheduled or caught-up period; otherwise the stored origin."""
    if attempt > 1 and origin in (Origin.SCHEDULE, Origin.CATCHUP):
        return "retry"
    return origin


def duration_text(milliseconds: int | None) -> str:
    if milliseconds is None:
        return "-"
    if milliseconds < 1000:
        return f"{milliseconds}ms"
    seconds = milliseconds / 1000
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes}m{rest:02d}s"


def error_summary(error_type: str | None, message: str | None, width: int = ERROR_WIDTH) -> str:
    """`ValueError: first line of the message`, cut to fit a table."""
    if not error_type:
        return ""
    lines = (message or "").strip().splitlines()
    text = error_type.rsplit(".", 1)[-1] + (f": {lines[0]}" if lines else "")
    return text if len(text) <= width else text[: width - 1] + "…"


# -- scheduler jobs ---------------------------------------------------------------


def job_record(job: JobRow, last: RunRow | None, now: datetime, *, retired: bool = False) -> Record:
    try:
        upcoming = parse_schedule(job.cron, job.timezone).next_after(now)
    except ScheduleError:
        upcoming = None
    return {
        "name": job.name,
        # A template has no schedule of its own: its schedules are created at run time.
        "cron": job.cron or "template",
        "timezone": job.timezone,
        "paused": job.paused,
        "retired": retired,
        "paused_at": iso(job.paused_at),
        # Why the scheduler paused it (a failure streak); None for an operator's pause.
        "pause_reason": job.pause_reason,
        # The calendars its periods skip: name and last date (None: a function).
        "calendars": [
            {"name": c.name, "last": c.last.isoformat() if c.last else None}
            for c in calendars.stored(job.calendars)
        ],
        "next_period": iso(upcoming),
        "first_seen": iso(job.first_seen),
        "last_seen": iso(job.last_seen),
        "lease_s": job.lease_seconds,
        "timeout_s": job.timeout_seconds,
        "retries": job.retries,
        "alert_after_s": job.alert_after_seconds,
        "last_run": None
        if last is None
        else {
            "period": iso(last.period),
            "status": last.status,
            "reason": last.reason,
            "attempt": last.attempt,
            "finished_at": iso(last.finished_at),
        },
    }


def job_records(
    jobs: Sequence[JobRow],
    latest: Mapping[str, RunRow],
    now: datetime,
    retired: Collection[str] = (),
) -> list[Record]:
    return [job_record(job, latest.get(job.name), now, retired=job.name in retired) for job in jobs]


def job_state(record: Record) -> str:
    """retired: no node runs it any more; paused; or active."""
    if record["retired"]:
        return "retired"
    if record["paused"]:
        return "paused (failures)" if record.get("pause_reason") else "paused"
    return "active"


def jobs_table(records: Sequence[Record]) -> str:
    rows = []
    for record in records:
        last = record["last_run"] or {}
        rows.append(
            [
                record["name"],
                record["cron"],
                record["timezone"],
                short_time(record["next_period"]) if record["next_period"] else "never",
                period_text(last.get("period")),
                status_text(last["status"], last["reason"]) if last else "-",
                job_state(record),
            ]
        )
    headers = ["JOB", "SCHEDULE", "ZONE", "NEXT PERIOD", "LAST PERIOD", "LAST STATUS", "STATE"]
    return table(headers, rows)


# -- scheduler runs ---------------------------------------------------------------


def run_record(run: RunRow) -> Record:
    return {
        "id": run.id,
        "job": run.job,
        "period": iso(run.period),
        "status": run.status,
        "reason": run.reason,
        "origin": run.origin,
        "retry": origin_text(run.origin, run.attempt) == "retry",
        "attempt": run.attempt,
        "node": run.holder,
        "claimed_at": iso(run.claimed_at),
        "started_at": iso(run.started_at),
        "finished_at": iso(run.finished_at),
        "duration_ms": run.duration_ms,
        "error_type": run.error_type,
        "error_message": run.error_message,
    }


def runs_table(records: Sequence[Record]) -> str:
    rows = [
        [
            record["job"],
            period_text(record["period"]),
            status_text(record["status"], record["reason"]),
            "retry" if record["retry"] else record["origin"],
            str(record["attempt"]),
            record["node"] or "-",
            duration_text(record["duration_ms"]),
            error_summary(record["error_type"], record["error_message"]),
        ]
        for record in records
    ]
    headers = ["JOB", "PERIOD", "STATUS", "ORIGIN", "ATTEMPT", "NODE", "DURATION", "ERROR"]
    return table(headers, rows)


# -- scheduler runs show ----------------------------------------------------------


def merged_attempts(run: RunRow, recorded: Sequence[AttemptRow]) -> list[AttemptRow]:
    """Every attempt, oldest first; the run's own row is the truth for its current attempt."""
    current = AttemptRow(
        attempt=run.attempt,
        node=run.holder,
        status=run.status,
        reason=run.reason,
        started_at=run.started_at,
        finished_at=run.finished_at,
        duration_ms=run.duration_ms,
        error_type=run.error_type,
        error_message=run.error_message,
        error_traceback=run.error_traceback,
    )
    earlier = [attempt for attempt in recorded if attempt.attempt != run.attempt]
    return sorted([*earlier, current], key=lambda attempt: attempt.attempt)


def run_detail_record(run: RunRow, recorded: Sequence[AttemptRow]) -> Record:
    return {
        "run": {
            **run_record(run),
            "lease_expires_at": iso(run.lease_expires_at),
            "retry_at": iso(run.retry_at),
            "error_traceback": run.error_traceback,
        },
        "attempts": [
            {
                "attempt": attempt.attempt,
                "current": attempt.attempt == run.attempt,
                "node": attempt.node,
                "status": attempt.status,
                "reason": attempt.reason,
                "started_at": iso(attempt.started_at),
                "finished_at": iso(attempt.finished_at),
                "duration_ms": attempt.duration_ms,
                "error_type": attempt.error_type,
                "error_message": attempt.error_message,
                "error_traceback": attempt.error_traceback,
            }
            for attempt in merged_attempts(run, recorded)
        ],
    }


def run_detail_text(record: Record) -> str:
    run = record["run"]
    fields = [
        ("job", run["job"]),
        ("period", run["period"]),
        ("run id", run["id"]),
        ("status", status_text(run["status"], run["reason"])),
        ("origin", "retry" if run["retry"] else run["origin"]),
        ("attempt", str(run["attempt"])),
        ("node", run["node"] or "-"),
        ("claimed", run["claimed_at"]),
        ("started", run["started_at"] or "-"),
        ("finished", run["finished_at"] or "-"),
        ("duration", duration_text(run["duration_ms"])),
        ("lease expires", run["lease_expires_at"] or "-"),
        ("retry at", run["retry_at"] or "-"),
    ]
    lines = [f"{name + ':':<15}{value}" for name, value in fields]
    rows = [
        [
            str(attempt["attempt"]),
            attempt["node"] or "-",
            status_text(attempt["status"], attempt["reason"]),
            short_time(attempt["started_at"]),
            short_time(attempt["finished_at"]),
            duration_text(attempt["duration_ms"]),
            error_summary(attempt["error_type"], attempt["error_message"]),
        ]
        for attempt in record["attempts"]
    ]
    headers = ["ATTEMPT", "NODE", "STATUS", "STARTED", "FINISHED", "DURATION", "ERROR"]
    lines += ["", table(headers, rows)]
    for attempt in record["attempts"]:
        if attempt["error_type"]:
            lines += ["", f"attempt {attempt['attempt']}: {attempt['error_type']}"]
            lines += _indented(attempt["error_message"] or "")
            if attempt["error_traceback"]:
                lines.append("  traceback (last lines):")
                lines += _indented(_tail(attempt["error_traceback"]), "    ")
    return "\n".join(lines)


def _tail(text: str, count: int = TRACEBACK_LINES) -> str:
    return "\n".join(text.rstrip().splitlines()[-count:])


def _indented(text: str, prefix: str = "  ") -> list[str]:
    return [prefix + line for line in text.rstrip().splitlines()]


# -- scheduler nodes --------------------------------------------------------------


def node_state(node: NodeRow, now: datetime) -> str:
    """alive: beating; stopped: shut down cleanly; lost: went silent without stopping."""
    if node.stopped_at is not None:
        return "stopped"
    return "alive" if alive(node, now) else "lost"


def node_record(node: NodeRow, now: datetime) -> Record:
    return {
        "id": node.id,
        "name": node.name,
        "host": node.host,
        "pid": node.pid,
        "version": node.version,
        "kind": "one-shot" if node.jobs_digest == ONE_SHOT else "daemon",
        "state": node_state(node, now),
        "started_at": iso(node.started_at),
        "heartbeat_at": iso(node.heartbeat_at),
        "stopped_at": iso(node.stopped_at),
        "heartbeat_age_s": round((now - node.heartbeat_at).total_seconds(), 3),
    }


def nodes_table(records: Sequence[Record]) -> str:
    rows = [
        [
            record["id"],
            record["host"],
            str(record["pid"]),
            record["version"],
            record["kind"],
            record["state"],
            short_time(record["started_at"]),
            f"{short_time(record['heartbeat_at'])} ({record['heartbeat_age_s']:.0f}s ago)",
        ]
        for record in records
    ]
    headers = ["NODE", "HOST", "PID", "VERSION", "KIND", "STATE", "STARTED", "LAST HEARTBEAT"]
    return table(headers, rows)


# -- scheduler check --------------------------------------------------------------


def check_record(report: Report) -> Record:
    return {
        "ok": report.ok,
        "checked_at": iso(report.checked_at),
        "window_s": report.window.total_seconds(),
        "jobs": report.jobs,
        "paused": report.paused,
        "retired": report.retired,
        "nodes_alive": report.nodes_alive,
        "findings": [
            {
                "problem": finding.problem.value,
                "job": finding.job,
                "period": iso(finding.period),
                "status": finding.status,
                "reason": finding.reason,
                "detail": finding.detail,
            }
            for finding in report.findings
        ],
    }


def check_text(record: Record, window: str) -> str:
    width = max((len(finding["job"]) for finding in record["findings"]), default=0)
    lines = [
        f"{finding['problem'].upper():<10}{finding['job']:<{width}}  "
        f"{period_text(finding['period'])}  {finding['detail']}"
        for finding in record["findings"]
    ]
    jobs = f"{record['jobs']} job{'' if record['jobs'] == 1 else 's'}"
    notes = [f"{record['paused']} paused"] if record["paused"] else []
    if record["retired"]:
        notes.append(f"{record['retired']} retired not checked")
    if notes:
        jobs += f" ({', '.join(notes)})"
    if record["findings"]:
        lines.append(f"{len(record['findings'])} problem(s) in {jobs}, window {window}")
    else:
        lines.append(f"ok: {jobs}, nothing overdue, failed or missed in the last {window}")
    if record["nodes_alive"] == 0:
        silent = format_duration(NODE_SILENT_AFTER)
        lines.append(f"note: no node is alive (no heartbeat in the last {silent})")
    return "\n".join(lines)
