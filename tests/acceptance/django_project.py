"""The example Django project (examples/django) as its users run it: `python manage.py …`
processes on a database of the test's own."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from tests.acceptance.processes import REPOSITORY, Node, environment

EXAMPLE = REPOSITORY / "examples" / "django"


def manage(
    database_url: str, *args: str, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """`python manage.py ARGS` in the example project, to completion."""
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=EXAMPLE,
        env=environment(EXAMPLE_DATABASE_URL=database_url, **(env or {})),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def start_replica(logs: Path, name: str, database_url: str, extra_args: Sequence[str] = ()) -> Node:
    """`python manage.py scheduler run` with JSON logs, its output in `logs/NAME.log`."""
    log_path = logs / f"{name}.log"
    with log_path.open("wb") as out:
        process = subprocess.Popen(
            [
                sys.executable,
                "manage.py",
                "scheduler",
                "run",
                "--log-format",
                "json",
                "--node-name",
                name,
                *extra_args,
            ],
            cwd=EXAMPLE,
            env=environment(EXAMPLE_DATABASE_URL=database_url),
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    return Node(name, process, log_path)
