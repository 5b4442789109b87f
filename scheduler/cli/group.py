"""The error style of every `scheduler` command: a user's mistake (ours or click's
usage errors) prints one line on stderr and exits 2. Light on purpose: `--help` loads
this and nothing of the commands."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import click

from scheduler.errors import UserError

USER_ERROR = 2


class Group(click.Group):
    """Turns a UserError anywhere below into one line on stderr and exit status 2, and
    click's own usage errors (a missing argument, an unknown option) into the same shape."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except UserError as error:
            click.echo(f"error: {error}", err=True)
            ctx.exit(USER_ERROR)

    def main(  # one signature for both of click's overloads
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        try:
            status = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except click.exceptions.NoArgsIsHelpError as error:
            error.show()  # the bare command: its help, as click shows it
            sys.exit(USER_ERROR)
        except click.UsageError as error:
            click.echo(f"error: {usage_line(error)}", err=True)
            sys.exit(USER_ERROR)
        except click.ClickException as error:
            click.echo(f"error: {error.format_message()}", err=True)
            sys.exit(error.exit_code)
        except click.Abort:
            click.echo("error: aborted", err=True)
            sys.exit(1)
        sys.exit(status if isinstance(status, int) else 0)


def usage_line(error: click.UsageError) -> str:
    """click's message on one line, with the command to ask for help."""
    message = " ".join(error.format_message().split())
    if error.ctx is None:
        return message
    return f"{error.ctx.command_path}: {message} (see `{error.ctx.command_path} --help`)"
