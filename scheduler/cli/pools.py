"""`scheduler pools`: the concurrency pools (`@job(pool=Pool(...))`), what runs in each
and what waits, and an operator's limits at run time (`scheduler.cli.main` puts the
group in the `scheduler` command)."""

from __future__ import annotations

import getpass
import socket
from typing import Any

import click

from scheduler import views
from scheduler.admin import Admin
from scheduler.cli.options import database_option
from scheduler.cli.views import emit, json_option, reading
from scheduler.store.concurrency import PoolState
from scheduler.tables import table


@click.group(name="pools")
def pools() -> None:
    """List the concurrency pools, and change or reset their limits at run time.

    A pool caps how many runs of its member jobs and schedules run at once across the
    fleet (and, with a per-key cap, how many of one concurrency key); a period that
    finds it full waits, claimed, and starts in order as a slot frees.
    """


@pools.command(name="list")
@database_option
@json_option
def list_pools(database_url: str, as_json: bool) -> None:
    """List each pool: its limits in force, how many of its runs run and wait now, and
    since when the oldest waits."""
    with reading(database_url) as database:
        found = Admin(database).pools()
    emit(as_json, [_record(state) for state in found], _text)


@pools.command(name="set")
@click.argument("name", metavar="POOL")
@click.option("--limit", type=int, help="Runs of the pool at once, fleet-wide.")
@click.option("--per-key", "per_key", type=int, help="Runs of one concurrency key at once.")
@database_option
def set_pool(name: str, limit: int | None, per_key: int | None, database_url: str) -> None:
    """Change POOL's limits: in force at every node's next start, kept over the code's
    until `scheduler pools reset`."""
    with reading(database_url) as database:
        state = Admin(database).set_pool(name, limit=limit, per_key=per_key, by=_operator())
    click.echo(f"pool {name}: {_limits(state)} (set by {state.changed_by})")


@pools.command(name="reset")
@click.argument("name", metavar="POOL")
@database_option
def reset_pool(name: str, database_url: str) -> None:
    """Give POOL back the limits its code declares."""
    with reading(database_url) as database:
        state = Admin(database).reset_pool(name, by=_operator())
    click.echo(f"pool {name}: {_limits(state)} (the code's)")


def _operator() -> str:
    """Who changed a pool, as the pools table records it."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "unknown"
    return f"{user}@{socket.gethostname()}"


def _limits(state: PoolState) -> str:
    per_key = f", {state.per_key} per key" if state.per_key is not None else ""
    return f"limit {state.limit}{per_key}"


def _record(state: PoolState) -> dict[str, Any]:
    return {
        "pool": state.name,
        "limit": state.limit,
        "per_key": state.per_key,
        "declared_limit": state.declared_limit,
        "declared_per_key": state.declared_per_key,
        "changed_by": state.changed_by,
        "changed_at": views.iso(state.changed_at),
        "overridden": state.overridden,
        "running": state.running,
        "waiting": state.waiting,
        "waiting_since": views.iso(state.waiting_since),
    }


def _text(records: list[dict[str, Any]]) -> str:
    if not records:
        return "no pools (a node declares one when it registers a job that names it)"
    return table(
        ["POOL", "LIMIT", "PER KEY", "RUNNING", "WAITING", "WAITING SINCE", "SET BY"],
        [
            [
                record["pool"],
                str(record["limit"]),
                "-" if record["per_key"] is None else str(record["per_key"]),
                str(record["running"]),
                str(record["waiting"]),
                views.short_time(record["waiting_since"]),
                record["changed_by"] if record["overridden"] else "code",
            ]
            for record in records
        ],
    )
