"""Real Celery workers and a throwaway Redis for tests: start, read, kill, restart.

Workers run `celery -A tests.acceptance.jobmods.on_celery worker` in a session of their
own, so that SIGKILL takes the whole prefork pool at once, as a lost machine would.
A test that restarts its broker gets a `redis-server` of its own: the shared Redis and
RabbitMQ on this machine are never restarted.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.acceptance.processes import environment

REDIS_URL = os.environ.get("SCHEDULER_TEST_REDIS_URL", "redis://127.0.0.1:6379")
RABBITMQ_URL = os.environ.get("SCHEDULER_TEST_RABBITMQ_URL", "amqp://guest:guest@127.0.0.1:5672//")
REDIS_SERVER = shutil.which("redis-server") or "/usr/bin/redis-server"
APP = "tests.acceptance.jobmods.on_celery"


def unique_queue() -> str:
    """A queue of the test's own, so that no test sees another's messages."""
    return f"cronclaim-test-{uuid.uuid4().hex[:10]}"


def celery_env(tmp_path: Path, postgres_url: str, broker: str, **extra: str) -> dict[str, str]:
    """What a node and a worker of one test share: its database, broker, a queue of its
    own and the execution log."""
    return {
        "SCHEDULER_DATABASE_URL": postgres_url,
        "CELERY_TEST_BROKER": broker,
        "CELERY_TEST_QUEUE": unique_queue(),
        "EXECUTION_LOG": str(tmp_path / "executions.txt"),
        **extra,
    }


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@dataclass
class Worker:
    """One `celery worker` process (and its pool), its output captured to a file."""

    name: str
    process: subprocess.Popen[bytes]
    log_path: Path

    def text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def events(self) -> list[dict[str, Any]]:
        found = []
        for line in self.text().splitlines():
            if line.startswith("{"):
                try:
                    found.append(json.loads(line))
                except json.JSONDecodeError:
                    continue
        return found

    def wait_for(self, predicate: Callable[[str], bool], timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if predicate(self.text()):
                return
            if self.process.poll() is not None:
                break
            time.sleep(0.05)
        raise AssertionError(f"worker {self.name}: not seen in {timeout}s:\n{self.text()[-3000:]}")

    def kill(self) -> None:
        """SIGKILL the worker and its pool, as if its machine were gone."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=30)

    def stop(self, timeout: float = 60) -> int:
        """SIGTERM to the worker (not its pool): Celery's warm shutdown, in which the
        running task finishes first."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise


def start_worker(
    cwd: Path,
    name: str,
    *,
    queue: str,
    env: Mapping[str, str],
    concurrency: int = 2,
    pool: str = "prefork",
    app: str = APP,
) -> Worker:
    log_path = cwd / f"{name}.log"
    with log_path.open("wb") as out:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                app,
                "worker",
                "-Q",
                queue,
                "-n",
                f"{name}@%h",
                "-c",
                str(concurrency),
                "-P",
                pool,
                "-l",
                "info",
                "--without-gossip",
                "--without-mingle",
                "--without-heartbeat",
            ],
            cwd=cwd,
            env=environment(**{**env, "CELERY_TEST_QUEUE": queue}),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    worker = Worker(name, process, log_path)
    try:
        worker.wait_for(lambda text: " ready." in text)
    except AssertionError:
        worker.kill()  # a worker that never came up is not left behind
        raise
    return worker


@dataclass
class ThrowawayRedis:
    """A `redis-server` of the test's own, with no persistence: a restart loses what it
    held, as a broker that crashed would."""

    port: int
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.process = subprocess.Popen(
            [REDIS_SERVER, "--port", str(self.port), "--save", "", "--appendonly", "no"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return
            except OSError:
                time.sleep(0.05)
        raise AssertionError(f"redis-server did not listen on {self.port}")

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)
