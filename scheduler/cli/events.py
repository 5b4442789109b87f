"""`scheduler events`: the alert events of the fleet and where each delivery stands
(`scheduler.cli.main` puts it in the group). Reads the database only, like `runs`."""

from __future__ import annotations

from typing import Any

import click

from scheduler import views
from scheduler.cli.options import database_option
from scheduler.cli.views import emit, json_option, reading
from scheduler.config import parse_period
from scheduler.states import Delivery
from scheduler.store import events as stored_events
from scheduler.store.events import EventRow


def event_record(row: EventRow) -> dict[str, Any]:
    return {
        **row.event.as_dict(),
        "state": row.state.value,
        "tries": row.tries,
        "next_try_at": views.iso(row.next_try_at) if row.state is Delivery.PENDING else None,
        "taken_by": row.taken_by,
        "delivered_at": views.iso(row.delivered_at),
        "delivered_to": list(row.delivered_to),
        "last_error": row.last_error,
    }


def events_table(records: list[dict[str, Any]]) -> str:
    if not records:
        return "no events"
    rows = [
        [
            views.short_time(record["created_at"]),
            record["kind"],
            record["job"],
            views.period_text(record["period"]),
            record["state"],
            str(record["tries"]),
            (record["last_error"] or record["detail"] or "")[:80],
        ]
        for record in records
    ]
    headers = ["CREATED", "KIND", "JOB", "PERIOD", "DELIVERY", "TRIES", "DETAIL / LAST ERROR"]
    return views.table(headers, rows)


@click.command(name="events")
@click.argument("job", required=False)
@click.option("--period", help="Only the events of this period (UTC ISO-8601).")
@click.option(
    "--state",
    type=click.Choice([state.value for state in Delivery]),
    help="Only events in this delivery state.",
)
@click.option(
    "--limit", type=click.IntRange(min=1), default=50, show_default=True, help="At most this many."
)
@database_option
@json_option
def list_events(
    *,
    job: str | None,
    period: str | None,
    state: str | None,
    limit: int,
    database_url: str,
    as_json: bool,
) -> None:
    """List the alert events (failed, retrying, timed_out, missed, skipped, recovered,
    stuck_item), newest first, of JOB or of every job, with where each delivery stands:
    pending, delivered, failed (tries ran out) or unrouted (no hook listens)."""
    at = parse_period(period)
    with reading(database_url) as database:
        rows = stored_events.recent(
            database,
            job=job,
            period=at,
            state=Delivery(state) if state else None,
            limit=limit,
        )
    emit(as_json, [event_record(row) for row in rows], events_table)
