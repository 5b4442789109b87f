"""`pip install 'cronclaim[celery]'` alone, in a clean virtual environment, is enough to
run jobs on Celery with Redis or RabbitMQ, the documented brokers: from the built wheel (no `dev`
extra to bring what the `celery` extra forgets), a real node sends and a real worker
runs, both from that environment, with the jobs module of the Celery tests copied
beside them (nothing of this checkout on their path). And the image compose.celery.yaml
builds (from requirements-celery.lock), replayed without Docker as test_install replays
the Dockerfile, runs its demo with the commands of its services."""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from scheduler.states import RunStatus
from tests import dockerfile
from tests.acceptance.celery_workers import RABBITMQ_URL, REDIS_URL, Worker, unique_queue
from tests.acceptance.conftest import clean_env
from tests.acceptance.processes import REPOSITORY
from tests.acceptance.records import executions, run_rows
from tests.acceptance.test_install import Image, _clean_environment, _replay

pytestmark = [pytest.mark.slow, pytest.mark.postgres]
JOBS = REPOSITORY / "tests" / "acceptance" / "jobmods" / "on_celery.py"
RUNS = 3


def _clean_env(app: Path, **extra: str) -> dict[str, str]:
    """This machine's environment without a virtual environment, PYTHONPATH or SCHEDULER_*
    setting: only the app's folder on the path."""
    return clean_env(app, **extra)


@pytest.fixture(scope="module")
def celery_venv(installed_extra: Callable[[str], Path]) -> Path:
    """A virtual environment holding `cronclaim[celery]` from the wheel, and nothing else."""
    return installed_extra("celery")


@pytest.mark.parametrize("broker", [f"{REDIS_URL}/11", RABBITMQ_URL], ids=["redis", "rabbitmq"])
def test_the_celery_extra_alone_sends_through_its_broker_and_runs_on_a_worker(
    celery_venv: Path, tmp_path: Path, postgres_url: str, broker: str
) -> None:
    app = tmp_path / "app"
    app.mkdir()
    shutil.copy(JOBS, app / "on_celery.py")
    evidence = tmp_path / "executions.txt"
    queue = unique_queue()
    env = _clean_env(
        app,
        SCHEDULER_DATABASE_URL=postgres_url,
        CELERY_TEST_BROKER=broker,
        CELERY_TEST_QUEUE=queue,
        EXECUTION_LOG=str(evidence),
    )
    bin_dir = celery_venv / "bin"
    worker_log, node_log = tmp_path / "worker.log", tmp_path / "node.log"
    name = f"w-{queue[-10:]}"  # a name of its own on the shared broker
    command = [
        *(str(bin_dir / "celery"), "-A", "on_celery", "worker", "-Q", queue, "-n", f"{name}@%h"),
        *("-c", "1", "-l", "info", "--without-gossip", "--without-mingle", "--without-heartbeat"),
    ]
    with worker_log.open("wb") as out:
        process = subprocess.Popen(
            command,
            cwd=app,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    worker = Worker("clean", process, worker_log)
    node = None
    try:
        worker.wait_for(lambda text: " ready." in text)
        with node_log.open("wb") as out:
            node = subprocess.Popen(
                [str(bin_dir / "scheduler"), "run", "--jobs", "on_celery", "--log-format", "json"],
                cwd=app,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + 30
        while sum(executions(evidence).values()) < RUNS and time.monotonic() < deadline:
            assert node.poll() is None, node_log.read_text()[-3000:]
            time.sleep(0.2)
    finally:
        if node is not None and node.poll() is None:
            node.terminate()
            node.wait(timeout=60)
        worker.stop()
    log = node_log.read_text()
    assert "run_send_failed" not in log, log[-3000:]
    ran = executions(evidence)
    assert sum(ran.values()) >= RUNS, f"{dict(ran)}\n{worker.text()[-3000:]}"
    assert [period for period, times in ran.items() if times > 1] == []
    succeeded = [
        row for row in run_rows(postgres_url, "remote_tick") if row["status"] == RunStatus.SUCCEEDED
    ]
    assert len(succeeded) >= RUNS
    assert all(row["holder"].startswith(f"{name}@") for row in succeeded)


# -- the image of compose.celery.yaml ----------------------------------------------------

COMPOSE = yaml.safe_load((REPOSITORY / "compose.celery.yaml").read_text())
DEMO_BROKER = f"{REDIS_URL}/10"


@pytest.fixture(scope="module")
def compose_image(tmp_path_factory: pytest.TempPathFactory) -> Image:
    """The build stage replayed (its RUN lines install the celery lock and the wheel into
    a virtual environment under a temporary root); the runtime stage's files and ENV
    laid out, its RUN (a system user) left out."""
    stages = dockerfile.parse_text(COMPOSE["x-image"]["build"]["dockerfile_inline"])
    built = Image(root=tmp_path_factory.mktemp("celery-image"))
    base_env = _clean_environment(built.root)
    for stage in stages[:-1]:
        _replay(built, stage, run=True, base_env=base_env)
    _replay(built, stages[-1], run=False, base_env=base_env)
    return built


def _service(image: Image, name: str, database_url: str) -> tuple[list[str], dict[str, str]]:
    """A service's command and its environment, the database and broker this machine's."""
    service = COMPOSE["services"][name]
    env = {key: image.map(str(value)) for key, value in service["environment"].items()}
    env |= {"SCHEDULER_DATABASE_URL": database_url, "CELERY_BROKER_URL": DEMO_BROKER}
    return list(service["command"]), image.environment(**env)


def test_the_celery_demo_image_runs_its_job_on_a_worker(
    compose_image: Image, tmp_path: Path, postgres_url: str
) -> None:
    command, env = _service(compose_image, "migrate", postgres_url)
    migrated = subprocess.run(
        command, cwd=compose_image.workdir, env=env, capture_output=True, text=True, check=False
    )
    assert migrated.returncode == 0, migrated.stdout + migrated.stderr
    command, env = _service(compose_image, "worker", postgres_url)
    worker_log = tmp_path / "worker.log"
    with worker_log.open("wb") as out:
        process = subprocess.Popen(
            command,
            cwd=compose_image.workdir,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    worker = Worker("demo", process, worker_log)
    node = None
    try:
        worker.wait_for(lambda text: " ready." in text)
        command, env = _service(compose_image, "scheduler", postgres_url)
        node_log = tmp_path / "node.log"
        with node_log.open("wb") as out:
            node = subprocess.Popen(
                command, cwd=compose_image.workdir, env=env, stdout=out, stderr=subprocess.STDOUT
            )
        # The demo job runs every ten seconds: one period, on the worker, within 30 s.
        worker.wait_for(lambda text: '"report_written"' in text, timeout=30)
    finally:
        if node is not None and node.poll() is None:
            node.terminate()
            node.wait(timeout=60)
        worker.stop()
    ended = [
        row for row in run_rows(postgres_url, "celery_demo.report") if row["status"] != "queued"
    ]
    assert ended, "no period of the demo job ended"
    row = ended[0]
    assert row["status"] == RunStatus.SUCCEEDED, row
    assert row["holder"].startswith("celery@"), row
