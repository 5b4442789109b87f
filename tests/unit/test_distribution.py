"""The distribution's name is not `scheduler` (another project on PyPI); the import name
and the command are."""

from __future__ import annotations

import re
import tomllib
from importlib import metadata
from pathlib import Path

from click.testing import CliRunner

import scheduler
from scheduler.cli import main
from scheduler.config import DISTRIBUTION, conflicting_distribution, version
from tests import dockerfile

ROOT = Path(__file__).parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_the_distribution_is_named_apart_from_the_import_name() -> None:
    project = PYPROJECT["project"]
    assert project["name"] == DISTRIBUTION != "scheduler"
    assert project["scripts"] == {"scheduler": "scheduler.cli:main"}
    assert metadata.packages_distributions()["scheduler"] == [DISTRIBUTION]
    assert metadata.version(DISTRIBUTION) == project["version"]


VERSION = PYPROJECT["project"]["version"]


def test_the_version_is_pyprojects_everywhere() -> None:
    """pyproject.toml writes the version once; the package, `--version` and the image's
    label say the same."""
    assert version() == scheduler.__version__ == VERSION
    labels = dockerfile.parse()[-1].all("LABEL")
    assert any(f'org.opencontainers.image.version="{VERSION}"' in item.text for item in labels)
    tags = re.findall(r"scheduler:(\d[\w.]*)", dockerfile.DOCKERFILE.read_text())
    assert tags, "the Dockerfile's comments show a tagged build"
    assert set(tags) == {VERSION}


def test_scheduler_version_prints_the_version() -> None:
    result = CliRunner().invoke(main, ["--version"])
    assert result.exit_code == 0, result.output
    assert result.output == f"scheduler, version {VERSION}\n"


def test_the_supported_versions_are_stated() -> None:
    project = PYPROJECT["project"]
    assert project["requires-python"] == ">=3.11"
    stated = {
        item.rsplit(" :: ", 1)[1]
        for item in project["classifiers"]
        if re.fullmatch(r"Programming Language :: Python :: 3\.\d+", item)
    }
    assert stated == {"3.11", "3.12", "3.13"}
    assert "Typing :: Typed" in project["classifiers"]
    assert (ROOT / "scheduler" / "py.typed").exists()


def test_no_conflicting_distribution_here() -> None:
    """This environment holds cronclaim alone (scripts/test uninstalls the old name);
    the acceptance test installs the other project for real."""
    assert conflicting_distribution() is None
