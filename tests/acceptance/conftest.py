"""Fixtures shared by acceptance tests that install the project as its users do: the
sdist and wheel built once per session (`python -m build`, as a release is), and clean
virtual environments holding the wheel with one extra each."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.acceptance.processes import REPOSITORY

INSTALL_TIMEOUT_S = 300


def clean_env(path: Path | None = None, **extra: str) -> dict[str, str]:
    """This machine's environment without a virtual environment, PYTHONPATH or SCHEDULER_*
    setting; `path` alone on the import path when given (an app's folder)."""
    drop = ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME", "PIP_REQUIRE_VIRTUALENV")
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in drop and not key.startswith("SCHEDULER_")
    }
    if path is not None:
        env["PYTHONPATH"] = str(path)
    return {**env, **extra}


@pytest.fixture(scope="session")
def built_distributions(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The project's sdist and wheel, built from this checkout once per session by
    `python -m build` (the wheel from the sdist, as a release builds it)."""
    folder = tmp_path_factory.mktemp("dist")
    built = subprocess.run(
        [sys.executable, "-m", "build", "--outdir", str(folder), str(REPOSITORY)],
        capture_output=True,
        text=True,
        timeout=INSTALL_TIMEOUT_S,
        check=False,
    )
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    (sdist,) = folder.glob("cronclaim-*.tar.gz")
    (wheel,) = folder.glob("cronclaim-*.whl")
    return sdist, wheel


@pytest.fixture(scope="session")
def built_wheel(built_distributions: tuple[Path, Path]) -> Path:
    return built_distributions[1]


def make_venv(folder: Path) -> Path:
    """A fresh virtual environment from this machine's base interpreter."""
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", str(folder)], check=True, timeout=120)
    return folder


def pip_install(venv: Path, *requirements: str) -> None:
    """`pip install` into `venv`, from the package index through pip's cache."""
    installed = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", *requirements],
        capture_output=True,
        text=True,
        timeout=INSTALL_TIMEOUT_S,
        check=False,
        env=clean_env(),
    )
    assert installed.returncode == 0, installed.stdout[-3000:] + installed.stderr[-3000:]


@pytest.fixture(scope="session")
def installed_extra(
    built_wheel: Path, tmp_path_factory: pytest.TempPathFactory
) -> Callable[[str], Path]:
    """`installed_extra("celery")`: a virtual environment holding `cronclaim[celery]` from
    the wheel and nothing else (`""`: the bare distribution), made once per session."""
    made: dict[str, Path] = {}

    def venv_with(extra: str) -> Path:
        if extra not in made:
            venv = make_venv(tmp_path_factory.mktemp(f"extra-{extra or 'none'}") / "venv")
            name = f"cronclaim[{extra}]" if extra else "cronclaim"
            pip_install(venv, f"{name} @ {built_wheel.as_uri()}")
            made[extra] = venv
        return made[extra]

    return venv_with
