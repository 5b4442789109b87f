"""`scheduler events`: the alert events of the fleet and where each delivery stands
(`scheduler.cli.main` puts it in the group). Reads the database only, like `runs`."""

from __future__ import annotations

import click

from scheduler.admin import Admin
from scheduler.cli.event_records import event_record, events_table
from scheduler.cli.options import database_option
from scheduler.cli.views import emit, json_option
from scheduler.config import parse_period
from scheduler.states import Delivery
from scheduler.store import deliveries as stored_events


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
    with Admin(database_url) as admin:
        rows = stored_events.recent(
            admin.database,
            job=job and admin.recorded_job(job),
            period=at,
            state=Delivery(state) if state else None,
            limit=limit,
        )
    emit(as_json, [event_record(row) for row in rows], events_table)
