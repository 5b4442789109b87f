"""Fixtures shared by acceptance tests that install the project as its users do."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.acceptance.processes import REPOSITORY


@pytest.fixture(scope="session")
def built_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The project's wheel, built from this checkout once per session (as a release is)."""
    folder = tmp_path_factory.mktemp("wheel")
    built = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--wheel-dir",
            str(folder),
            str(REPOSITORY),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    (wheel,) = folder.glob("cronclaim-*.whl")
    return wheel
