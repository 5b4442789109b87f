"""What the `scheduler` command really accepts, read from its click definitions, so that
documentation and deployment files can be checked against the code instead of a copy."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

import click
import pytest

from scheduler.cli import main

ENV_PREFIX = "SCHEDULER_"


@dataclass(frozen=True)
class Flag:
    """One option of one command, as `--help` and the environment see it."""

    command: str
    flags: tuple[str, ...]
    envvars: tuple[str, ...]
    default: str


def commands() -> dict[str, click.Command]:
    """Every runnable command by its path below `scheduler` (`run`, `runs show`, …)."""
    found: dict[str, click.Command] = {}

    def visit(group: click.Group, context: click.Context, prefix: str) -> None:
        for name in group.list_commands(context):
            command = group.get_command(context, name)
            if command is None or command.hidden:
                continue
            path = f"{prefix} {name}".strip()
            if isinstance(command, click.Group):
                visit(command, click.Context(command, info_name=name, parent=context), path)
            if not isinstance(command, click.Group) or command.invoke_without_command:
                found[path] = command

    visit(main, click.Context(main, info_name="scheduler"), "")
    return found


def options(command: click.Command) -> Iterator[click.Option]:
    for param in command.params:
        if isinstance(param, click.Option) and param.expose_value:
            yield param


def flags() -> list[Flag]:
    """Every option of every command, with its variable and its default as documented."""
    found = []
    for path, command in commands().items():
        context = click.Context(command, info_name=path)
        for option in options(command):
            found.append(
                Flag(
                    command=path,
                    flags=(*option.opts, *option.secondary_opts),
                    envvars=envvars(option),
                    default=shown_default(option, context),
                )
            )
    return found


def envvars(option: click.Option) -> tuple[str, ...]:
    if not option.envvar:
        return ()
    if isinstance(option.envvar, str):
        return (option.envvar,)
    return tuple(option.envvar)


def shown_default(option: click.Option, context: click.Context) -> str:
    """The default as a reader needs it: the value, `on`/`off` for a switch, the
    `[default: …]` of the help text when the value is computed at run time, else `—`."""
    value = option.get_default(context, call=False)
    if option.is_flag and option.is_bool_flag:
        return "on" if value else "off"
    if isinstance(value, str | int | float) and not isinstance(value, bool):
        return str(value)
    if isinstance(value, list | tuple) and value:
        return ",".join(str(item) for item in value)
    computed = re.search(r"\[default: ([^\]]+)\]", option.help or "")
    return computed.group(1) if computed else "—"


def accepted_envvars(command: click.Command) -> set[str]:
    return {name for option in options(command) for name in envvars(option)}


def resolve(argv: Sequence[str]) -> tuple[str, click.Command, list[str]]:
    """Split `run --http …` into the command it names and that command's arguments."""
    group: click.Command = main
    context = click.Context(main, info_name="scheduler")
    rest = list(argv)
    path: list[str] = []
    while isinstance(group, click.Group):
        assert rest, f"`scheduler {' '.join(argv)}` names no command"
        name = rest.pop(0)
        command = group.get_command(context, name)
        assert command is not None, f"`scheduler {name}` is not a command of the CLI"
        path.append(name)
        context = click.Context(command, info_name=name, parent=context)
        group = command
        if isinstance(command, click.Group) and not rest and command.invoke_without_command:
            break
    return " ".join(path), group, rest


def check_invocation(
    argv: Sequence[str], env: Mapping[str, str], monkeypatch: pytest.MonkeyPatch
) -> str:
    """Parse `scheduler ARGV` under ENV exactly as the CLI would, without running it:
    unknown flags, bad choices, missing arguments and SCHEDULER_* variables that the
    command does not read all fail. Returns the command's path."""
    path, command, rest = resolve(argv)
    ours = {name: value for name, value in env.items() if name.startswith(ENV_PREFIX)}
    unknown = sorted(set(ours) - accepted_envvars(command))
    assert not unknown, f"`scheduler {path}` does not read {unknown}"
    with monkeypatch.context() as patch:
        for name in [name for name in os.environ if name.startswith(ENV_PREFIX)]:
            patch.delenv(name)
        for name, value in ours.items():
            patch.setenv(name, value)
        try:
            command.make_context(path, list(rest))
        except click.ClickException as error:
            pytest.fail(
                f"`scheduler {' '.join(argv)}` is refused by the CLI: {error.format_message()}"
            )
    return path
