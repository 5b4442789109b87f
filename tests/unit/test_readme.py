"""The README is a front page: short, honest in its first paragraphs, with the
two commands, a comparison, and links that lead somewhere. Everything else lives in
docs/, which `mkdocs build --strict` checks."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).parents[2]
README = (ROOT / "README.md").read_text()
LINK = re.compile(r"\]\(([^)#]+)(?:#[^)]*)?\)")


def test_it_is_a_front_page() -> None:
    assert len(README.splitlines()) <= 200


def test_every_link_leads_to_a_file_of_the_repository() -> None:
    targets = [target for target in LINK.findall(README) if "://" not in target]
    assert targets, "the README links into the docs"
    missing = [target for target in targets if not (ROOT / target).exists()]
    assert missing == []


def test_the_headline_says_what_can_run_again() -> None:
    """The caveat stands beside the promise, not pages after it."""
    head = README[: README.index("\n## ")]
    for words in ("at most once", "next attempt", "at-least-once", "`ctx.once`"):
        assert words in head, words


def test_the_two_commands_are_there_as_they_run() -> None:
    blocks = re.findall(r"```sh\n(.*?)```", README, re.S)
    commands = {line.strip() for block in blocks for line in block.splitlines()}
    assert (
        "python3 -m venv .venv && .venv/bin/pip install . && .venv/bin/scheduler run --migrate"
        in commands
    )
    assert "scripts/test" in commands
    assert (ROOT / "scripts" / "test").stat().st_mode & 0o111


def test_it_compares_with_the_alternatives() -> None:
    rows = [line for line in README.splitlines() if line.startswith("| **")]
    names = {re.match(r"\| \*\*(.+?)\*\*", row).group(1) for row in rows}  # type: ignore[union-attr]
    assert {
        "cronclaim",
        "APScheduler 3.x",
        "Celery beat",
        "procrastinate",
        "DBOS",
        "Kubernetes CronJob",
    } <= names
