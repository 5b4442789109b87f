"""Operator commands for items and retention: `items`, `items release`,
`items done` and `prune` (`scheduler.cli.main` puts them in the group).
"""

from __future__ import annotations

from typing import Any

import click

from scheduler import views
from scheduler.admin import Admin
from scheduler.cli.options import database_option
from scheduler.cli.views import emit, json_option, reading
from scheduler.errors import UserError
from scheduler.node.pruner import parse_retention
from scheduler.store import items as stored_items
from scheduler.store import prune as retention
from scheduler.store.items import ItemRow
from scheduler.tables import table


class ItemsGroup(click.Group):
    """`items JOB` lists; `items release JOB KEY` and `items done JOB KEY` act on one item.

    Click reads a group's own arguments before its subcommand, so a first word that
    names a subcommand is routed to it instead of being taken for a job; options may
    follow JOB (`items billing --stuck`).
    """

    allow_interspersed_args = True

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and args[0] in self.commands:
            click.Command.parse_args(self, ctx, [])  # the group's options take their defaults
            # As click.Group.parse_args splits them: the subcommand, then its arguments.
            ctx._protected_args, ctx.args = args[:1], args[1:]
            return ctx.args
        return super().parse_args(ctx, args)


def item_record(row: ItemRow) -> dict[str, Any]:
    return {
        "job": row.job,
        "key": row.key,
        "state": row.state,
        "stuck": row.stuck,
        "period": views.iso(row.period),
        "run_id": row.run_id,
        "attempt": row.attempt,
        "node": row.node,
        "claimed_at": views.iso(row.claimed_at),
        "done_at": views.iso(row.done_at),
    }


def items_table(records: list[dict[str, Any]]) -> str:
    if not records:
        return "no items"
    rows = [
        [
            record["job"],
            record["key"],
            "stuck" if record["stuck"] else record["state"],
            views.period_text(record["period"]),
            str(record["attempt"]),
            record["node"] or "-",
            views.short_time(record["claimed_at"]),
            views.short_time(record["done_at"]),
        ]
        for record in records
    ]
    headers = ["JOB", "KEY", "STATE", "PERIOD", "ATTEMPT", "NODE", "CLAIMED", "DONE"]
    return table(headers, rows)


@click.group(name="items", cls=ItemsGroup, invoke_without_command=True)
@click.argument("job", required=False)
@database_option
@json_option
@click.option(
    "--stuck",
    is_flag=True,
    help="Only items claimed by an attempt that ended without finishing them.",
)
@click.option(
    "--limit", type=click.IntRange(min=1), default=100, show_default=True, help="At most this many."
)
@click.pass_context
def list_items(
    ctx: click.Context,
    *,
    job: str | None,
    database_url: str,
    as_json: bool,
    stuck: bool,
    limit: int,
) -> None:
    """List the items of JOB (with --stuck and no JOB: every job's stuck items), most
    recently claimed first.

    A stuck item was claimed but never done: the process died while handling it, so
    its effect may or may not have happened. Check it by hand, then `items done` or
    `items release` it.
    """
    if ctx.invoked_subcommand is not None:
        return
    if job is None and not stuck:
        raise UserError(
            "items: name the job (`scheduler items billing`), or list every job's stuck "
            "items with `scheduler items --stuck`"
        )
    with Admin(database_url) as admin:
        named = job and admin.recorded_job(job)
        rows = stored_items.list_items(admin.database, named, stuck_only=stuck, limit=limit)
    emit(as_json, [item_record(row) for row in rows], items_table)


@list_items.command(name="release")
@click.argument("job")
@click.argument("key")
@database_option
def release_item(job: str, key: str, database_url: str) -> None:
    """Forget KEY of JOB, so that the next run that reaches it handles it again."""
    with Admin(database_url) as admin:
        row = admin.release_item(job, key)
    state = "stuck" if row.stuck else row.state
    click.echo(f"released {key!r} of job {row.job!r} (it was {state})")


@list_items.command(name="done")
@click.argument("job")
@click.argument("key")
@database_option
def mark_item_done(job: str, key: str, database_url: str) -> None:
    """Record a stuck KEY of JOB as done, once you have checked that its effect happened."""
    with Admin(database_url) as admin:
        job = admin.recorded_job(job)
        marked = admin.mark_item_done(job, key)
    if not marked:
        click.echo(f"{key!r} of job {job!r} is already done")
        return
    click.echo(f"marked {key!r} of job {job!r} done")


@click.command(name="prune")
@click.option(
    "--older-than",
    required=True,
    help="Delete runs whose period, and done items finished, longer ago than this (90d).",
)
@click.option("--dry-run", is_flag=True, help="Only count what would be deleted.")
@database_option
@json_option
def prune(older_than: str, dry_run: bool, database_url: str, as_json: bool) -> None:
    """Delete old runs (with their attempts) and old done items, in small batches.

    Each job's newest run and newest success stay, and so does every claimed item,
    however old: a stuck item waits for an operator.
    """
    age = parse_retention("--older-than", older_than)
    with reading(database_url) as database:
        result = retention.prune(database, retention.cutoff_for(database, age), dry_run=dry_run)
    record = {
        "dry_run": dry_run,
        "older_than_s": age.total_seconds(),
        "cutoff": views.iso(result.cutoff),
        "runs": result.runs,
        "attempts": result.attempts,
        "items": result.items,
        "stuck_items_kept": result.stuck_kept,
        "events": result.events,
        "schedules": result.schedules,
    }
    emit(as_json, record, prune_text)


def prune_text(record: dict[str, Any]) -> str:
    verb = "would delete" if record["dry_run"] else "deleted"
    text = (
        f"{verb} {record['runs']} runs ({record['attempts']} earlier attempts) and "
        f"{record['items']} done items from before {record['cutoff']}"
    )
    if record.get("events"):
        text += f", and {record['events']} settled alert events"
    if record.get("schedules"):
        text += f", and {record['schedules']} schedules deleted before then"
    if record["stuck_items_kept"]:
        text += (
            f"; kept {record['stuck_items_kept']} items claimed before then and never done "
            "(see `scheduler items JOB --stuck`)"
        )
    return text
