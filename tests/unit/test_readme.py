"""The README is a front page: short, honest in its first paragraphs, with the
two commands, a comparison, and links that lead somewhere. Everything else lives in
docs/, which `mkdocs build --strict` checks."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import yaml

from tests import dockerfile

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


def _summaries() -> dict[str, str]:
    """Each place that says in one sentence what the scheduler promises."""
    first = README[README.index("\n\n") + 2 :]
    label = " ".join(item.text for item in dockerfile.parse()[-1].all("LABEL"))
    described = re.search(r'org\.opencontainers\.image\.description="([^"]*)"', label)
    assert described, "the image has a description label"
    site = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return {
        "README's first sentence": first[: first.index("**;") + 3],
        "pyproject description (PyPI's summary)": pyproject["project"]["description"],
        "Dockerfile image description": described.group(1),
        "mkdocs.yml site_description": site["site_description"],
    }


def test_every_one_line_summary_says_exactly_what_holds() -> None:
    """Not the bare "at most once across replicas": a body runs to completion at most
    once, one whose node died runs again as its next attempt, and effects through
    `ctx.once` happen exactly once."""
    for where, text in _summaries().items():
        plain = " ".join(text.replace("*", "").replace("`", "").split())
        for words in (
            "runs to completion at most once",
            "node died mid-run runs again as",
            "next attempt",
            "effects through ctx.once happen exactly once",
        ):
            assert words in plain, (where, words)


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
