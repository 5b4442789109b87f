"""The `scheduler` command: one group, and the commands of each module under it.

Each command module defines its commands and imports nothing from here; this module
names them, and imports a command's module only when that command runs: `scheduler
jobs` loads neither the daemon nor the web console, and `--help` loads no command.
"""

from __future__ import annotations

import importlib

import click

from scheduler.cli.group import Group
from scheduler.config import DISTRIBUTION

# name: (module under scheduler.cli, attribute, the summary `--help` lists). The
# summaries are each command's own first sentence; a unit test keeps them equal.
COMMANDS: dict[str, tuple[str, str, str]] = {
    "run": ("serve", "run", "Run the scheduler daemon until SIGTERM or SIGINT."),
    "migrate": (
        "serve",
        "migrate",
        "Create or upgrade the scheduler's tables to this version's schema.",
    ),
    "run-once": (
        "repair",
        "run_once",
        "Claim one period of JOB and run it here; exit 0 if it succeeded or another node"
        " holds it, 1 if it failed.",
    ),
    "backfill": (
        "repair",
        "backfill",
        "Run JOB's periods from --from to --to that have no successful run, oldest first.",
    ),
    "trigger": (
        "repair",
        "trigger",
        "Run JOB now, in the foreground, as a manual run (exit 0 on success, 1 on failure).",
    ),
    "rerun": (
        "repair",
        "rerun",
        "Run PERIOD of JOB again as its next attempt (refuses a succeeded one without --force).",
    ),
    "pause": (
        "repair",
        "pause",
        "Pause JOB on every node: its periods are recorded skipped (reason paused).",
    ),
    "resume": (
        "repair",
        "resume",
        "Resume JOB; the periods that passed while paused are not caught up.",
    ),
    "plan": (
        "plan",
        "plan",
        "Print JOB's next periods (or those of --cron) in UTC and in its time zone.",
    ),
    "jobs": (
        "views",
        "list_jobs",
        "List the jobs the nodes registered: schedule, next period, last run, paused.",
    ),
    "runs": (
        "views",
        "list_runs",
        "List runs, newest period first: status, attempt, node, duration, error.",
    ),
    "nodes": (
        "views",
        "list_nodes",
        "List the daemon nodes: alive, stopped or lost, with their last heartbeat and version.",
    ),
    "check": (
        "views",
        "check",
        "Exit 1 listing overdue jobs and failed or missed periods; exit 0 when all is well.",
    ),
    "events": (
        "events",
        "list_events",
        "List the alert events (failed, retrying, timed_out, missed, skipped, recovered, "
        "stuck_item), newest first, of JOB or of every job, with where each delivery "
        "stands: pending, delivered, failed (tries ran out) or unrouted (no hook "
        "listens).",
    ),
    "items": (
        "items",
        "list_items",
        "List the items of JOB (with --stuck and no JOB: every job's stuck items), most"
        " recently claimed first.",
    ),
    "prune": (
        "items",
        "prune",
        "Delete old runs (with their attempts) and old done items, in small batches.",
    ),
    "console": (
        "console",
        "serve_console",
        "Serve the web console (and /healthz, /readyz, /metrics) until SIGTERM or SIGINT.",
    ),
    "deferred": (
        "deferred",
        "deferred",
        "List the periods deferred by a catch-up budget, and run or skip them.",
    ),
    "pools": (
        "pools",
        "pools",
        "List the concurrency pools, and change or reset their limits at run time.",
    ),
    "schedules": (
        "schedules",
        "schedules",
        "List, show, create, change, pause, resume and delete the schedules created at run time.",
    ),
}


def summary_of(name: str) -> click.Command:
    """A stand-in with the command's summary, which click shortens as it would the real
    command's help."""
    return click.Command(name, help=COMMANDS[name][2])


class LazyGroup(Group):
    """Imports a command's module when the command is looked up, not before."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in COMMANDS:
            return None
        module, attribute, _ = COMMANDS[cmd_name]
        command = getattr(importlib.import_module(f"scheduler.cli.{module}"), attribute)
        assert isinstance(command, click.Command)
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The list of commands from their summaries, without importing any."""
        limit = formatter.width - 6 - max(len(name) for name in COMMANDS)
        rows = [(name, summary_of(name).get_short_help_str(limit)) for name in sorted(COMMANDS)]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


def _print_version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    """`scheduler, version X` (pyproject's, as installed), and on stderr one line more if
    the unrelated `scheduler` distribution shares the package."""
    if not value or ctx.resilient_parsing:
        return
    from scheduler.config import conflicting_distribution, version  # noqa: PLC0415

    click.echo(f"scheduler, version {version()}")
    conflict = conflicting_distribution()
    if conflict:
        click.echo(f"warning: {conflict}", err=True)
    ctx.exit()


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--version",
    is_flag=True,
    expose_value=False,
    is_eager=True,
    callback=_print_version,
    help=f"Show the version ({DISTRIBUTION}'s) and exit.",
)
def main() -> None:
    """Run cron jobs once per period across any number of replicas."""
