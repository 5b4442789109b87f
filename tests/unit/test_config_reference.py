"""The docs' configuration reference (docs/reference/configuration.md) and command list
(docs/reference/cli.md) agree with the CLI's own click definitions: every option of every
command, its variable and its default, and each row says what its option does."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from tests.cli_model import commands, flags

DOCS = Path(__file__).parents[2] / "docs" / "reference"
# The table of every option, and the list of every command, each on its own page.
CONFIGURATION = DOCS / "configuration.md"
COMMANDS = DOCS / "cli.md"
CODE = re.compile(r"`([^`]+)`")
COMMAND_WORD = re.compile(r"[a-z][a-z0-9-]*$")


@dataclass(frozen=True)
class Row:
    flags: frozenset[str]
    envvars: frozenset[str]
    default: str
    commands: frozenset[str]

    def markdown(self) -> str:
        def spans(values: frozenset[str], order: list[str] | None = None) -> str:
            ordered = sorted(values, key=(order or sorted(values)).index)
            return " ".join(f"`{value}`" for value in ordered) or "—"

        shown = self.default if self.default in ("on", "off", "—") else f"`{self.default}`"
        order = list(commands())
        return (
            f"| {spans(self.flags)} | {spans(self.envvars)} | {shown} "
            f"| {spans(self.commands, order)} |"
        )


HEADER = ["flag", "variable", "default", "commands", "what it does"]


def _tables(text: str) -> list[list[list[str]]]:
    """The markdown tables of a text, each as its rows of cells (header included)."""
    tables: list[list[list[str]]] = []
    current: list[list[str]] = []
    for line in [*text.splitlines(), ""]:
        if line.startswith("|"):
            current.append([cell.strip() for cell in line.strip().strip("|").split("|")])
        elif current:
            tables.append([current[0], *current[2:]])  # without the --- separator
            current = []
    return tables


def _section(heading: str) -> str:
    text = COMMANDS.read_text()
    match = re.search(rf"^## {re.escape(heading)}\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    assert match, f"{COMMANDS.name} has no '## {heading}' section"
    return match.group(1)


def _default_of(cell: str) -> str:
    """`auto` (coloured on a terminal…) -> auto; off (`HOST:PORT` serves…) -> off."""
    if cell.startswith("`"):
        return str(CODE.findall(cell)[0])
    return cell.split(maxsplit=1)[0] if cell else ""


def _documented_rows() -> set[Row]:
    tables = [table for table in _tables(CONFIGURATION.read_text()) if table[0] == HEADER]
    assert len(tables) == 1, f"{CONFIGURATION.name} needs one table headed | {' | '.join(HEADER)} |"
    return {
        Row(
            flags=frozenset(CODE.findall(cells[0])),
            envvars=frozenset(CODE.findall(cells[1])),
            default=_default_of(cells[2]),
            commands=frozenset(CODE.findall(cells[3])),
        )
        for cells in tables[0][1:]
    }


def _code_rows() -> set[Row]:
    """One row per option, merged across the commands that share it unchanged."""
    merged: dict[tuple[frozenset[str], frozenset[str], str], set[str]] = {}
    for flag in flags():
        key = (frozenset(flag.flags), frozenset(flag.envvars), flag.default)
        merged.setdefault(key, set()).add(flag.command)
    return {Row(*key, commands=frozenset(names)) for key, names in merged.items()}


def _table(rows: set[Row]) -> str:
    def order(row: Row) -> tuple[bool, str]:
        return (not row.envvars, min(row.flags))

    lines = [f"| {' | '.join(HEADER)} |", "| --- " * len(HEADER) + "|"]
    return "\n".join(lines + [f"{row.markdown()} … |" for row in sorted(rows, key=order)])


def test_every_option_is_documented_with_its_variable_and_default() -> None:
    documented, actual = _documented_rows(), _code_rows()
    missing = "\n  ".join(sorted(row.markdown() for row in actual - documented))
    stale = "\n  ".join(sorted(row.markdown() for row in documented - actual))
    assert (missing, stale) == ("", ""), (
        f"{CONFIGURATION} disagrees with the CLI.\n"
        f"Missing or different in the docs:\n  {missing or '-'}\n"
        f"In the docs but not the CLI:\n  {stale or '-'}\n"
        f"The table the CLI defines:\n{_table(actual)}"
    )


def test_every_option_says_what_it_does() -> None:
    """The last column is a sentence of its own, not a dash nor the flag again."""
    tables = [table for table in _tables(CONFIGURATION.read_text()) if table[0] == HEADER]
    assert len(tables) == 1, f"{CONFIGURATION.name} needs one table headed | {' | '.join(HEADER)} |"
    vague = [
        cells[0]
        for cells in tables[0][1:]
        if len(cells) != len(HEADER) or len(re.sub(r"`[^`]*`", "", cells[-1]).split()) < 3
    ]
    assert not vague, f"{CONFIGURATION.name}: these rows do not say what the option does: {vague}"


def test_every_variable_is_scheduler_prefixed_and_means_one_thing() -> None:
    meaning: dict[str, tuple[str, ...]] = {}
    for flag in flags():
        for name in flag.envvars:
            assert name.startswith("SCHEDULER_"), (flag.command, name)
            assert meaning.setdefault(name, flag.flags) == flag.flags, (
                f"{name} sets {meaning[name]} in one command and {flag.flags} in another"
            )


def test_every_command_is_listed() -> None:
    listed: set[str] = set()
    for table in _tables(_section("Commands")):
        for cells in table[1:]:
            for span in CODE.findall(cells[0]):
                words = span.split()
                if words and words[0] == "scheduler":
                    listed.add(_command_path(words[1:]))
    missing = sorted(set(commands()) - listed)
    assert not missing, f"{COMMANDS} 'Commands' tables do not list: {missing}"


def _command_path(words: list[str]) -> str:
    path = []
    for word in words:
        if not COMMAND_WORD.match(word):
            break
        path.append(word)
    return " ".join(path)
