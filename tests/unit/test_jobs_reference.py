"""docs/reference/jobs.md lists every option `@job` takes, and nothing it does not: a
team reads that list to know what it can ask of a job."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

from scheduler.registry import job

PAGE = (Path(__file__).parents[2] / "docs" / "reference" / "jobs.md").read_text()


def _listed() -> set[str]:
    """The options each bullet of the Options section opens with: the names in code
    before its first colon, leaving out what parentheses say about them."""
    section = PAGE[PAGE.index("## Options\n") :]
    section = section[: section.index("\n## ")]
    bullets = re.split(r"^- ", section, flags=re.M)[1:]
    names: set[str] = set()
    for bullet in bullets:
        head = re.sub(r"\([^()]*\)", "", " ".join(bullet.split())).split(":", 1)[0]
        names.update(re.findall(r"`([a-z_]+)`", head))
    return names


def test_every_option_of_job_is_listed() -> None:
    options = set(inspect.signature(job).parameters)
    assert _listed() == options
