"""The released files, as users install them: the sdist and the wheel pass `twine check`,
and each extra alone, from the wheel in a clean virtual environment, brings what its
feature needs (the bare distribution runs a job; `console` serves a page; `sentry` sends
check-ins; `otel` loads the tracing; `django`'s example project migrates, lists and runs
its job through `manage.py scheduler`). `cronclaim[celery]` alone has its own test, with a
real worker on Redis and on RabbitMQ (test_celery_extra). And the unrelated PyPI project
`scheduler`, installed beside it, is named in one line by `--version` and at start."""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
import signal
import sqlite3
import subprocess
import sys
import tarfile
import time
import urllib.request
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from scheduler.config import version
from tests.acceptance.celery_workers import free_port
from tests.acceptance.conftest import clean_env, make_venv, pip_install
from tests.acceptance.django_project import EXAMPLE
from tests.receivers import receiver
from tests.waiting import wait_until

pytestmark = pytest.mark.slow
VERSION = version()
APP = """
from scheduler import job


@job(cron="* * * * *", name="tick")
def tick(ctx):
    print("ticked", ctx.period.isoformat(), flush=True)
"""


def _app(tmp_path: Path) -> Path:
    """A folder holding one jobs module, `tasks`, off this checkout's path."""
    app = tmp_path / "app"
    app.mkdir()
    (app / "tasks.py").write_text(APP)
    return app


def _scheduler(venv: Path, app: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(venv / "bin" / "scheduler"), *args],
        cwd=app,
        env=clean_env(app, SCHEDULER_DATABASE_URL=f"sqlite:///{app / 'db.sqlite'}", **env),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _run_tick(venv: Path, app: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """`scheduler migrate`, then `scheduler run-once tick` with JSON logs."""
    migrated = _scheduler(venv, app, "migrate", "--log-format", "json")
    assert migrated.returncode == 0, migrated.stdout + migrated.stderr
    return _scheduler(
        venv, app, "run-once", "tick", "--jobs", "tasks", "--log-format", "json", **env
    )


def _events(output: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in output.splitlines() if line.startswith("{")]


def _importable(venv: Path, module: str) -> bool:
    found = subprocess.run(
        [str(venv / "bin" / "python"), "-c", f"import {module}"],
        capture_output=True,
        env=clean_env(),
        timeout=60,
        check=False,
    )
    return found.returncode == 0


def test_the_sdist_and_the_wheel_pass_twine_check(built_distributions: tuple[Path, Path]) -> None:
    sdist, wheel = built_distributions
    checked = subprocess.run(
        [sys.executable, "-m", "twine", "check", "--strict", str(sdist), str(wheel)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert sdist.name == f"cronclaim-{VERSION}.tar.gz"
    assert wheel.name == f"cronclaim-{VERSION}-py3-none-any.whl"
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
    assert {"scheduler/py.typed", "scheduler/_migrations/env.py"} <= names
    assert not any(name.startswith(("tests/", "jobs/", "bench/")) for name in names)
    with tarfile.open(sdist) as archive:
        members = {member.name.split("/", 1)[1] for member in archive.getmembers()}
    assert {"pyproject.toml", "README.md", "CHANGELOG.md", "migrations/env.py"} <= members


def test_the_bare_distribution_runs_a_job_and_needs_no_extra(
    installed_extra: Callable[[str], Path], tmp_path: Path
) -> None:
    venv = installed_extra("")
    app = _app(tmp_path)
    shown = _scheduler(venv, app, "--version")
    assert (shown.returncode, shown.stdout, shown.stderr) == (
        0,
        f"scheduler, version {VERSION}\n",
        "",
    )
    ran = _run_tick(venv, app)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "ticked " in ran.stdout
    assert "distribution_conflict" not in ran.stdout
    for module in ("flask", "celery", "sentry_sdk", "opentelemetry", "django"):
        assert not _importable(venv, module), f"{module} came without its extra"
    # An extra's feature asked for without it: one line naming the extra to install.
    refused = _run_tick(venv, app, SCHEDULER_TRACING="on")
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert refused.stderr.strip() == (
        "error: SCHEDULER_TRACING: opentelemetry-api is not installed"
        " (pip install 'cronclaim[otel]')"
    )


def test_the_console_extra_alone_serves_its_pages(
    installed_extra: Callable[[str], Path], tmp_path: Path
) -> None:
    venv = installed_extra("console")
    app = _app(tmp_path)
    ran = _run_tick(venv, app)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    port = free_port()
    log = tmp_path / "console.log"
    with log.open("wb") as out:
        console = subprocess.Popen(
            [str(venv / "bin" / "scheduler"), "console", "--http", f"127.0.0.1:{port}"],
            cwd=app,
            env=clean_env(app, SCHEDULER_DATABASE_URL=f"sqlite:///{app / 'db.sqlite'}"),
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        pages: dict[str, str] = {}

        def served() -> bool:
            assert console.poll() is None, log.read_text()
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5) as page:
                    pages["/"] = page.read().decode()
            except OSError:
                return False
            return True

        wait_until(served, timeout=30)
    finally:
        console.send_signal(signal.SIGTERM)
        console.wait(timeout=30)
    assert "tick" in pages["/"]
    # The footer names the version, the same one `--version` and the image label give.
    assert f"cronclaim {VERSION}" in pages["/"]


def test_the_sentry_extra_alone_sends_check_ins(
    installed_extra: Callable[[str], Path], tmp_path: Path
) -> None:
    venv = installed_extra("sentry")
    app = _app(tmp_path)
    with receiver() as sentry:
        port = sentry.url.rsplit(":", 1)[1]
        ran = _run_tick(venv, app, SCHEDULER_SENTRY_DSN=f"http://public@127.0.0.1:{port}/7")
        assert ran.returncode == 0, ran.stdout + ran.stderr
        wait_until(lambda: len(sentry.check_ins()) >= 2, timeout=15)
        statuses = [check_in["status"] for check_in in sentry.check_ins()]
    assert statuses == ["in_progress", "ok"]
    assert {check_in["monitor_slug"] for check_in in sentry.check_ins()} == {"tick"}


def test_the_otel_extra_alone_loads_the_tracing(
    installed_extra: Callable[[str], Path], tmp_path: Path
) -> None:
    venv = installed_extra("otel")
    app = _app(tmp_path)
    ran = _run_tick(venv, app, SCHEDULER_TRACING="on")
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "ticked " in ran.stdout
    assert _importable(venv, "scheduler.alerting.tracing")
    assert not _importable(venv, "sentry_sdk")


# Its virtual environment (Django and the wheel) is made inside the test: minutes, not
# seconds, on a loaded machine.
@pytest.mark.timeout(300)
def test_the_django_extra_alone_runs_the_example_project(
    installed_extra: Callable[[str], Path], tmp_path: Path
) -> None:
    venv = installed_extra("django")
    project = tmp_path / "project"
    shutil.copytree(EXAMPLE, project, ignore=shutil.ignore_patterns("__pycache__", "*.sqlite3"))
    database = project / "db.sqlite3"

    def manage(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(venv / "bin" / "python"), "manage.py", *args],
            cwd=project,
            env=clean_env(project, EXAMPLE_DATABASE_URL=f"sqlite:///{database}"),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    shown = manage("scheduler", "--help")
    assert shown.returncode == 0, shown.stdout + shown.stderr
    assert shown.stdout.startswith("Usage: manage.py scheduler [OPTIONS] COMMAND [ARGS]...")
    migrated = manage("migrate", "--no-input")
    assert migrated.returncode == 0, migrated.stdout + migrated.stderr
    assert "Scheduler tables: upgraded from None to " in migrated.stdout
    # The job of billing/jobs.py, found without naming it, writes its invoice once
    # (every third period fails once after writing it: either way one row).
    ran = manage("scheduler", "run-once", "invoice", "--log-format", "json")
    assert ran.returncode in (0, 1), ran.stdout + ran.stderr
    assert [event["event"] for event in _events(ran.stdout) if event["event"].startswith("run_")][
        -1
    ] in ("run_succeeded", "run_failed")
    with sqlite3.connect(database) as connection:
        invoices = connection.execute("SELECT count(*) FROM billing_invoice").fetchone()
        items = connection.execute("SELECT key, state FROM scheduler_items").fetchall()
    connection.close()
    assert invoices == (1,)
    assert len(items) == 1
    assert items[0][1] == "done"
    listed = manage("scheduler", "jobs")
    assert listed.returncode == 0, listed.stderr
    assert "invoice" in listed.stdout
    for module in ("flask", "celery", "sentry_sdk", "opentelemetry"):
        assert not _importable(venv, module), f"{module} came with the django extra"


# -- the unrelated `scheduler` distribution -------------------------------------------


def _fake_scheduler_wheel(folder: Path) -> Path:
    """A wheel of a distribution named `scheduler`, 0.8.8, whose package is `scheduler`,
    as the unrelated project on PyPI is: it writes its own `scheduler/core.py` beside
    ours (the real one overwrites `scheduler/__init__.py` too)."""
    dist_info = "scheduler-0.8.8.dist-info"
    files = {
        "scheduler/core.py": b'"""Not this project: the unrelated PyPI `scheduler`."""\n',
        f"{dist_info}/METADATA": (
            b"Metadata-Version: 2.1\nName: scheduler\nVersion: 0.8.8\n"
            b"Summary: A stand-in for the unrelated PyPI project of this name\n"
        ),
        f"{dist_info}/WHEEL": (
            b"Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        ),
    }

    def record(name: str, data: bytes) -> str:
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
        return f"{name},sha256={digest.decode()},{len(data)}"

    lines = [record(name, data) for name, data in files.items()] + [f"{dist_info}/RECORD,,"]
    files[f"{dist_info}/RECORD"] = ("\n".join(lines) + "\n").encode()
    wheel = folder / "scheduler-0.8.8-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for name, data in files.items():
            archive.writestr(name, data)
    return wheel


def test_the_unrelated_scheduler_distribution_is_named_in_one_line(
    built_wheel: Path, tmp_path: Path
) -> None:
    venv = make_venv(tmp_path / "venv")
    pip_install(venv, f"cronclaim @ {built_wheel.as_uri()}")
    pip_install(venv, "--no-deps", str(_fake_scheduler_wheel(tmp_path)))
    app = _app(tmp_path)
    shown = _scheduler(venv, app, "--version")
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout == f"scheduler, version {VERSION}\n"
    assert shown.stderr == (
        f"warning: the unrelated PyPI project 'scheduler' 0.8.8 is installed beside cronclaim"
        f" {VERSION} and overwrites the same `scheduler` package: run `pip uninstall scheduler`"
        f" then `pip install --force-reinstall cronclaim=={VERSION}`\n"
    )
    started = time.monotonic()
    ran = _run_tick(venv, app)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert time.monotonic() - started < 60
    (conflict,) = [
        event for event in _events(ran.stdout) if event["event"] == "distribution_conflict"
    ]
    assert conflict["level"] == "warning"
    assert "'scheduler' 0.8.8" in conflict["message"]
