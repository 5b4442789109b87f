"""The `scheduler` command: one group, and the commands of each module under it.

Each command module defines its commands and imports nothing from here; this module
puts them together, so nothing imports the CLI back.
"""

from __future__ import annotations

import click

from scheduler.cli import console, events, items, repair, serve, views
from scheduler.cli.options import Group
from scheduler.config import DISTRIBUTION


@click.group(cls=Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name=DISTRIBUTION, prog_name="scheduler")
def main() -> None:
    """Run cron jobs once per period across any number of replicas."""


for command in (
    serve.run,
    serve.migrate,
    repair.run_once,
    repair.backfill,
    repair.trigger,
    repair.rerun,
    repair.pause,
    repair.resume,
    repair.plan,
    views.list_jobs,
    views.list_runs,
    views.list_nodes,
    views.check,
    events.list_events,
    items.list_items,
    items.prune,
    console.serve_console,
):
    main.add_command(command)
