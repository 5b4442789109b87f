"""`python manage.py scheduler COMMAND …`: the `scheduler` command line, configured by the
project's settings (`scheduler.django.settings`). Every command and option is the CLI's
own (`manage.py scheduler --help`); what the settings give is what a `SCHEDULER_*`
variable would, and a flag on the command line still wins."""

from __future__ import annotations

import os
import sys
from argparse import REMAINDER, ArgumentParser
from pathlib import Path
from typing import Any

from django.apps import apps
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from scheduler.cli import main
from scheduler.django.settings import environment
from scheduler.errors import UserError

USER_ERROR = 2
# Options of Django's own that manage.py reads before any command (and leaves in argv).
DJANGO_OPTIONS = ("--settings", "--pythonpath")


class Command(BaseCommand):
    help = "The scheduler's commands (run, migrate, jobs, runs, check, …) on this project."

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("args", nargs=REMAINDER, help="a scheduler command and its options")

    def run_from_argv(self, argv: list[str]) -> None:
        """Hand the whole command line to the scheduler's own parser (its `--help` too)."""
        prog = f"{Path(argv[0]).name} {argv[1]}"
        sys.exit(delegate(_without_django_options(argv[2:]), prog))

    def handle(self, *args: Any, **options: Any) -> None:
        """`call_command("scheduler", "jobs")`: the same, an error as Django's."""
        status = delegate(list(args), "manage.py scheduler")
        if status:
            raise CommandError(
                f"scheduler {' '.join(args)}: exit status {status}", returncode=status
            )


def delegate(args: list[str], prog: str) -> int:
    """Run one `scheduler` command in this process with the settings' configuration."""
    try:
        variables = environment(
            settings.DATABASES,
            getattr(settings, "SCHEDULER", None),
            [config.name for config in apps.get_app_configs()],
        )
    except UserError as error:
        sys.stderr.write(f"error: {error}\n")
        return USER_ERROR
    os.environ.update(variables)
    try:
        main.main(args=args, prog_name=prog)
    except SystemExit as exit_:
        code = exit_.code
        if code is None:
            return 0
        if isinstance(code, int):
            return code
        sys.stderr.write(f"{code}\n")
        return 1
    return 0


def _without_django_options(args: list[str]) -> list[str]:
    kept: list[str] = []
    skip = False
    for arg in args:
        if skip:
            skip = False
        elif arg in DJANGO_OPTIONS:
            skip = True
        elif not arg.startswith(tuple(f"{option}=" for option in DJANGO_OPTIONS)):
            kept.append(arg)
    return kept
