"""The unit tests, and the claim and migration tests, on the other Python versions the
project supports (3.12 and 3.13; the suite itself runs on 3.11): each in a clean venv of
its own, with the project, its extras and the test tools of its dev extra installed
from this tree (the linters, type checker and docs builder run once, on 3.11). An interpreter
that cannot be found fails the test: a supported version the suite cannot reach is a
finding, not a skip."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.python_versions]
REPOSITORY = Path(__file__).resolve().parents[2]
SUITES = (
    "tests/unit",
    "tests/integration/test_claim.py",
    "tests/integration/test_claim_starts.py",
    "tests/integration/test_migrations.py",
)
# What the dev extra brings that these suites never import: the checks of scripts/test
# and the docs site, which run once on the suite's own interpreter, and the browser.
NOT_FOR_TESTS = {
    "mypy",
    "import-linter",
    "ruff",
    "build",
    "twine",
    "django-stubs",
    "types-pyyaml",
    "selenium",
    "pytest-xdist",
}
NOT_FOR_TESTS_EXTRAS = {"docs", "dev", "bench"}


def requirements() -> list[str]:
    """The project with its extras, and the dev extra's test tools, from pyproject.toml."""
    project = tomllib.loads((REPOSITORY / "pyproject.toml").read_text())["project"]
    extras = sorted(set(project["optional-dependencies"]) - NOT_FOR_TESTS_EXTRAS)
    tools = [
        need
        for need in project["optional-dependencies"]["dev"]
        if not need.startswith("cronclaim")
        and re.split(r"[<>=!~\[ ]", need, maxsplit=1)[0] not in NOT_FOR_TESTS
    ]
    return [f"{REPOSITORY}[{','.join(extras)}]", *tools]


def interpreter(version: str) -> str:
    """That version's interpreter: on PATH, or one pyenv installed."""
    versions = Path("~/.pyenv/versions").expanduser()
    found = sorted(versions.glob(f"{version}.*/bin/python{version}"))
    if found:
        return str(found[-1])
    on_path = shutil.which(f"python{version}")
    if (
        on_path is None
        or subprocess.run([on_path, "-V"], capture_output=True, check=False).returncode
    ):
        pytest.fail(
            f"no Python {version} on this machine (PATH or ~/.pyenv/versions)", pytrace=False
        )
    return on_path


@pytest.mark.timeout(900)
@pytest.mark.parametrize("version", ["3.12", "3.13"])
def test_the_unit_claim_and_migration_tests_pass(version: str, tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    subprocess.run([interpreter(version), "-m", "venv", str(venv)], check=True)
    python = str(venv / "bin" / "python")
    said = subprocess.run(
        [python, "-c", "import sys; print(sys.version)"], capture_output=True, text=True, check=True
    )
    assert said.stdout.startswith(version + "."), said.stdout
    install = subprocess.run(
        [python, "-m", "pip", "install", "--quiet", *requirements()],
        capture_output=True,
        text=True,
        check=False,
    )
    assert install.returncode == 0, install.stderr[-3000:]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    done = subprocess.run(
        [python, "-m", "pytest", *SUITES, "-q", "-p", "no:cacheprovider", "-rfEs", "-x"],
        cwd=REPOSITORY,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    tail = done.stdout[-4000:] + done.stderr[-2000:]
    assert done.returncode == 0, tail
    assert " passed" in done.stdout.splitlines()[-1], tail
