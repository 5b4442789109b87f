"""The distribution's name is not `scheduler` (another project on PyPI); the import name
and the command are."""

from __future__ import annotations

import tomllib
from importlib import metadata
from pathlib import Path

from scheduler.config import DISTRIBUTION

PYPROJECT = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())


def test_the_distribution_is_named_apart_from_the_import_name() -> None:
    project = PYPROJECT["project"]
    assert project["name"] == DISTRIBUTION != "scheduler"
    assert project["scripts"] == {"scheduler": "scheduler.cli:main"}
    assert metadata.packages_distributions()["scheduler"] == [DISTRIBUTION]
    assert metadata.version(DISTRIBUTION) == project["version"]
