"""`--jobs` takes what people type: module names, and paths of files and folders, relative
or absolute. An entry that defines no job is refused in one line, before anything is
written."""

from __future__ import annotations

from pathlib import Path

import pytest

from scheduler.states import RunStatus
from tests.acceptance.processes import run_command
from tests.acceptance.records import run_rows, table_counts

EMPTY = {"scheduler_runs": 0, "scheduler_jobs": 0, "scheduler_nodes": 0}
NIGHTLY = (
    'from scheduler import job\n\n\n@job(cron="0 3 * * *", name="nightly")\n'
    "def nightly():\n    pass\n"
)
PACKAGED = (
    "from scheduler import job\n\nfrom .helper import EVERY\n\n\n"
    '@job(cron=EVERY, name="packaged")\ndef packaged():\n    pass\n'
)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """An application folder: a job file, a package with a job module and a helper, and a
    module without jobs."""
    (tmp_path / "myjobs.py").write_text(NIGHTLY)
    package = tmp_path / "src" / "tasks"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "helper.py").write_text('EVERY = "*/5 * * * *"\n')
    (package / "billing.py").write_text(PACKAGED)
    (tmp_path / "settings.py").write_text("DEBUG = False\n")
    return tmp_path


@pytest.mark.parametrize(
    ("entry", "job"),
    [
        ("./myjobs.py", "nightly"),
        ("myjobs.py", "nightly"),
        ("{root}/myjobs.py", "nightly"),
        ("myjobs", "nightly"),
        ("src/tasks", "packaged"),
        ("./src/tasks/", "packaged"),
        ("{root}/src/tasks", "packaged"),
        ("src/tasks/billing.py", "packaged"),
    ],
)
def test_jobs_takes_module_names_and_paths(project: Path, entry: str, job: str) -> None:
    result = run_command(
        ["plan", job, "--count", "1", "--jobs", entry.format(root=project)], project
    )
    assert (result.returncode, result.stderr) == (0, ""), result.stderr
    assert len(result.stdout.splitlines()) == 2  # the header and one period


def test_a_job_file_given_by_path_runs(project: Path, sqlite_url: str) -> None:
    result = run_command(
        ["run-once", "nightly", "--jobs", "./myjobs.py", "--database-url", sqlite_url], project
    )
    assert result.returncode == 0, result.stderr + result.stdout
    assert [row["status"] for row in run_rows(sqlite_url, "nightly")] == [RunStatus.SUCCEEDED]


@pytest.mark.parametrize("entry", ["settings", "./settings.py"])
def test_a_module_without_jobs_is_refused(project: Path, database_url: str, entry: str) -> None:
    result = run_command(["run", "--jobs", entry, "--database-url", database_url], project)
    assert result.returncode == 2, result.stderr + result.stdout
    (line,) = result.stderr.splitlines()
    assert line.startswith("error: --jobs: module 'settings' defines no job"), line
    assert table_counts(database_url) == EMPTY


@pytest.mark.parametrize(
    ("entry", "fragment"),
    [
        ("./absent.py", "no file or folder './absent.py'"),
        ("./my-jobs.py", "'my-jobs' is not a Python name"),
        ("./json.py", "the name 'json' is already taken"),
    ],
)
def test_paths_that_cannot_be_imported_are_refused(
    project: Path, sqlite_url: str, entry: str, fragment: str
) -> None:
    for name in ("my-jobs.py", "json.py"):
        (project / name).write_text(NIGHTLY)
    result = run_command(["run", "--jobs", entry, "--database-url", sqlite_url], project)
    assert result.returncode == 2, result.stderr + result.stdout
    (line,) = result.stderr.splitlines()
    assert line.startswith("error: --jobs: "), line
    assert fragment in line, line
    assert table_counts(sqlite_url) == EMPTY
