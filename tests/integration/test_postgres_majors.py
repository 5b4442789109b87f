"""The claim and migration tests on other PostgreSQL majors than the shared test
server's (Debian 12's 15): a throwaway server of each, whose programs
`scripts/ensure-postgres-majors` unpacks under `.venv/postgresql/MAJOR/`. Missing, the
test fails: a supported version the suite cannot reach is a finding, not a skip."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

from tests.postgres_cluster import throwaway_cluster

pytestmark = [pytest.mark.slow, pytest.mark.postgres_majors]
REPOSITORY = Path(__file__).resolve().parents[2]
# The modules whose tests are run again on each major: the claim (the promise) and the
# schema's migrations, up and down.
SUITES = (
    "tests/integration/test_claim.py",
    "tests/integration/test_claim_starts.py",
    "tests/integration/test_migrations.py",
)


def programs(major: int) -> Path:
    """The folder of that major's initdb and pg_ctl, as the ensure script left it."""
    root = Path(sys.prefix) / "postgresql" / str(major)
    listed = root / "PROGRAMS"
    folder = root / listed.read_text().strip() if listed.exists() else None
    if folder is None or not (folder / "pg_ctl").exists():
        pytest.fail(
            f"PostgreSQL {major}'s programs are not installed under {root}: "
            "run scripts/ensure-postgres-majors",
            pytrace=False,
        )
    return folder


@pytest.mark.timeout(600)
@pytest.mark.parametrize("major", [16, 17])
def test_claims_and_migrations_on_another_major(major: int) -> None:
    with throwaway_cluster(programs(major)) as cluster:
        with psycopg.connect(cluster.admin_url, autocommit=True) as admin:
            row = admin.execute("SHOW server_version_num").fetchone()
        assert row is not None
        assert major * 10000 <= int(row[0]) < (major + 1) * 10000, row
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")},
            "SCHEDULER_TEST_POSTGRES_URL": cluster.admin_url,
        }
        done = subprocess.run(
            [sys.executable, "-m", "pytest", *SUITES, "-q", "-p", "no:cacheprovider", "-rfEs"],
            cwd=REPOSITORY,
            env=env,
            capture_output=True,
            text=True,
            timeout=540,
            check=False,
        )
    output = done.stdout + done.stderr
    summary = output.strip().splitlines()[-1] if output.strip() else ""
    assert done.returncode == 0, output[-6000:]
    counts = {word: int(number) for number, word in re.findall(r"(\d+) (\w+)", summary)}
    assert set(counts) == {"passed"}, summary
    assert counts["passed"] >= 25, summary
