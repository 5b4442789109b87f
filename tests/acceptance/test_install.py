"""The Dockerfile's own steps, replayed without Docker: its build-stage RUN lines install
the locked dependencies and the project's wheel into fresh virtual environments, then
the image's ENTRYPOINT, CMD and HEALTHCHECK run with the image's ENV and WORKDIR.

The image's folders (/opt, /src, /app, /var/lib/scheduler) are moved under a temporary
root; the interpreter is this machine's Python rather than python:3.13-slim's, and the
runtime stage's RUN (creating the system user and its data folder) is done by hand."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from scheduler.config import DISTRIBUTION
from scheduler.registry import load_jobs
from scheduler.states import RunStatus
from tests import dockerfile
from tests.acceptance.records import run_rows, table_counts

pytestmark = pytest.mark.slow

ROOT = dockerfile.ROOT
OWNED = re.compile(r"(?<![\w.\-])(/opt|/src|/app|/var/lib/scheduler)(?=[/\s\"':;]|$)")
BUILD_TIMEOUT_S = 600
EXAMPLES = "/opt/scheduler-examples/jobs"


@dataclass
class Image:
    """The built image, laid out under `root`."""

    root: Path
    env: dict[str, str] = field(default_factory=dict)
    workdir: Path = Path()
    entrypoint: list[str] = field(default_factory=list)
    cmd: list[str] = field(default_factory=list)
    healthcheck: list[str] = field(default_factory=list)

    def map(self, text: str) -> str:
        return OWNED.sub(lambda match: f"{self.root}{match.group(1)}", text)

    def environment(self, **extra: str) -> dict[str, str]:
        return {**self.env, **extra}

    def run(
        self, args: list[str], timeout: float = 60, **env: str
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*self.entrypoint, *args],
            cwd=self.workdir,
            env=self.environment(**env),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def start(self, log: Path, **env: str) -> subprocess.Popen[bytes]:
        """`docker run IMAGE`: ENTRYPOINT + CMD."""
        with log.open("wb") as out:
            return subprocess.Popen(
                [*self.entrypoint, *self.cmd],
                cwd=self.workdir,
                env=self.environment(**env),
                stdout=out,
                stderr=subprocess.STDOUT,
            )

    @property
    def database_url(self) -> str:
        return self.env["SCHEDULER_DATABASE_URL"]

    @property
    def examples(self) -> str:
        """The example jobs, where the image keeps them off its import path."""
        return self.map(EXAMPLES)


def _clean_environment(root: Path) -> dict[str, str]:
    """What a fresh base image offers: a `python` on PATH, no venv, no SCHEDULER_*."""
    bin_dir = root / "usr" / "local" / "bin"
    bin_dir.mkdir(parents=True)
    base = getattr(sys, "_base_executable", sys.executable)
    (bin_dir / "python").symlink_to(base)
    drop = ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME", "PIP_REQUIRE_VIRTUALENV")
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("SCHEDULER_") and key not in drop
    }
    env["PATH"] = f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}"
    return env


def _expand(value: str, env: Mapping[str, str]) -> str:
    return re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: env.get(m.group(1) or m.group(2), ""), value)


def _copy(image: Image, instruction: dockerfile.Instruction) -> None:
    flags, sources, target = dockerfile.copy_arguments(instruction)
    mapped = Path(image.map(target))
    destination = mapped if mapped.is_absolute() else image.workdir / target
    for source in sources:
        origin = Path(image.map(source)) if "from" in flags else ROOT / source
        if origin == destination:
            continue  # --from=build /opt/x /opt/x: one root serves every stage
        if origin.is_dir():
            shutil.copytree(
                origin,
                destination,
                dirs_exist_ok=True,
                ignore=shutil.ignore_patterns("__pycache__", "*.pyc"),
            )
        else:
            folder = destination if target.endswith("/") else destination.parent
            folder.mkdir(parents=True, exist_ok=True)
            shutil.copy2(origin, folder / origin.name if target.endswith("/") else destination)


def _replay(image: Image, stage: dockerfile.Stage, *, run: bool, base_env: dict[str, str]) -> None:
    image.env = dict(base_env)
    image.workdir = image.root
    for instruction in stage.instructions:
        keyword = instruction.keyword
        if keyword == "ENV":
            for key, value in dockerfile.env_pairs(instruction):
                image.env[key] = image.map(_expand(value, image.env))
        elif keyword == "WORKDIR":
            image.workdir = Path(image.map(instruction.text))
            image.workdir.mkdir(parents=True, exist_ok=True)
        elif keyword == "COPY":
            _copy(image, instruction)
        elif keyword == "RUN" and run:
            command = image.map(dockerfile.run_command(instruction))
            done = subprocess.run(
                ["sh", "-c", command],
                cwd=image.workdir,
                env=image.env,
                capture_output=True,
                text=True,
                timeout=BUILD_TIMEOUT_S,
                check=False,
            )
            assert done.returncode == 0, (
                f"RUN {command}\n{done.stdout[-3000:]}{done.stderr[-3000:]}"
            )


@pytest.fixture(scope="module")
def image(tmp_path_factory: pytest.TempPathFactory) -> Image:
    stages = dockerfile.parse()
    built = Image(root=tmp_path_factory.mktemp("image"))
    base_env = _clean_environment(built.root)
    for stage in stages[:-1]:
        _replay(built, stage, run=True, base_env=base_env)
    runtime = stages[-1]
    _replay(built, runtime, run=False, base_env=base_env)
    # The runtime stage's RUN creates the user `scheduler` and its data folder.
    (built.root / "var" / "lib" / "scheduler").mkdir(parents=True, exist_ok=True)
    built.entrypoint = runtime.last("ENTRYPOINT").exec_form()
    built.cmd = runtime.last("CMD").exec_form()
    built.healthcheck = dockerfile.healthcheck(runtime)[1]
    return built


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _events(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]


def _wait_for(log: Path, process: subprocess.Popen[bytes], event: str) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and process.poll() is None:
        if any(item.get("event") == event for item in _events(log)):
            return
        time.sleep(0.1)
    raise AssertionError(f"{event} not seen; log:\n{log.read_text()[-3000:]}")


@pytest.fixture
def running(image: Image, tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], Path, str]]:
    """`docker run IMAGE` on the image's SQLite default, its HTTP port made free."""
    migrated = image.run(["migrate"])
    assert migrated.returncode == 0, migrated.stderr
    address = f"127.0.0.1:{_free_port()}"
    log = tmp_path / "run.log"
    process = image.start(log, SCHEDULER_HTTP=address, SCHEDULER_JOBS=image.examples)
    try:
        _wait_for(log, process, "node_started")
        yield process, log, address
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
        process.wait(timeout=60)


def test_the_installed_command_answers(image: Image) -> None:
    helped = image.run(["--help"])
    assert helped.returncode == 0, helped.stderr
    for command in ("run", "migrate", "run-once"):
        assert re.search(rf"^\s+{command}\s", helped.stdout, re.M), helped.stdout
    version = image.run(["--version"])
    assert version.stdout.strip() == "scheduler, version 0.1.0", version.stdout


def test_the_package_comes_from_the_wheel_not_the_source(image: Image) -> None:
    script = (
        "import scheduler, sys; from importlib import metadata; print(scheduler.__file__); "
        "print(sys.prefix); print(*metadata.packages_distributions()['scheduler'])"
    )
    located = subprocess.run(
        ["python", "-c", script],
        cwd=image.workdir,
        env=image.env,
        capture_output=True,
        text=True,
        check=True,
    )
    package, prefix, distribution = located.stdout.split()
    assert distribution == DISTRIBUTION, "the wheel's name, not `scheduler` (another project)"
    assert prefix == str(image.root / "opt" / "scheduler")
    assert package.startswith(prefix)
    assert (Path(package).parent / "_migrations" / "env.py").is_file()


def test_docker_run_runs_no_jobs_until_told_which(image: Image) -> None:
    assert image.run(["migrate"]).returncode == 0
    before = table_counts(image.database_url)
    refused = image.run(["run"])
    assert refused.returncode == 2, refused.stderr + refused.stdout
    (line,) = refused.stderr.splitlines()
    assert line.startswith("error: --jobs: name your job modules with --jobs or SCHEDULER_JOBS")
    assert image.run(["run-once", "heartbeat"]).returncode == 2
    assert table_counts(image.database_url) == before, "nothing written"


def test_docker_run_migrates_and_runs_the_example_jobs_when_asked(
    image: Image, running: tuple[subprocess.Popen[bytes], Path, str]
) -> None:
    process, log, _ = running
    time.sleep(2)
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=60) == 0, log.read_text()
    events = _events(log)  # every line is JSON: SCHEDULER_LOG_FORMAT=json in the image
    registered = {item["job"] for item in events if item["event"] == "job_registered"}
    assert registered == set(load_jobs(["jobs"])), "every example job in jobs/ is in the image"
    assert events[-1]["event"] == "node_stopped"
    assert image.database_url.startswith(f"sqlite:///{image.root}/var/lib/scheduler/")


def test_the_healthcheck_passes_while_the_daemon_runs(
    image: Image, running: tuple[subprocess.Popen[bytes], Path, str]
) -> None:
    process, log, address = running
    env = image.environment(SCHEDULER_HTTP=address)
    checked = subprocess.run(
        image.healthcheck, env=env, capture_output=True, text=True, check=False
    )
    assert checked.returncode == 0, checked.stderr + log.read_text()[-2000:]
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=60) == 0
    after = subprocess.run(image.healthcheck, env=env, capture_output=True, text=True, check=False)
    assert after.returncode != 0, "the health check passed with no daemon running"


def test_run_once_runs_an_example_job_when_asked(image: Image) -> None:
    assert image.run(["migrate"]).returncode == 0
    done = image.run(["run-once", "heartbeat"], SCHEDULER_JOBS=image.examples)
    assert done.returncode == 0, done.stderr + done.stdout
    rows = run_rows(image.database_url, "heartbeat")
    assert [row["status"] for row in rows][-1:] == [RunStatus.SUCCEEDED]


def test_the_image_has_no_console_and_its_root_says_how_to_add_it(
    image: Image, running: tuple[subprocess.Popen[bytes], Path, str]
) -> None:
    """The image carries the daemon only (requirements.lock has no console extra):
    /healthz works, / names the extra, and `scheduler console` refuses in one line."""
    _process, log, address = running
    with urllib.request.urlopen(f"http://{address}/healthz", timeout=10) as response:
        assert response.status == 200, log.read_text()[-2000:]
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(f"http://{address}/", timeout=10)
    assert refused.value.code == 404
    assert "pip install 'cronclaim[console]'" in refused.value.read().decode()
    console = image.run(["console", "--http", "127.0.0.1:0"])
    assert console.returncode == 2
    assert console.stderr == (
        "error: console: the web console needs its extra: pip install 'cronclaim[console]'\n"
    )
