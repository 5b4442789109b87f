"""The console on both backends shows a run still running past its timeout: a `timed_out`
row whose lease its holder still keeps. Its page says so (as `scheduler check` does) and
the nodes page lists it among what its node runs; a timed-out run whose lease was
dropped, or ran out with a dead holder, is neither."""

from __future__ import annotations

from datetime import timedelta

from scheduler.console.app import create_app
from scheduler.console.auth import from_environment
from scheduler.store.database import Database
from tests.integration import seed
from tests.sql import update

STILL_RUNNING = "<dt>still running</dt>"


def test_a_run_past_its_timeout_is_shown_on_its_page_and_on_its_node(database: Database) -> None:
    now = seed.now()
    seed.add_node(database, "node-a", heartbeat_at=now)
    seed.add_job(database, "export", "0 * * * *", first_seen=now - timedelta(days=1))
    period = (now - timedelta(hours=2)).replace(minute=0, second=0, microsecond=0)
    runs = {
        name: seed.add_run(
            database,
            "export",
            period + timedelta(minutes=offset),
            "timed_out",
            finished_at=now - timedelta(minutes=5),
            duration_ms=30_000,
        )
        for name, offset in (("lingering", 0), ("returned", 1), ("dead holder", 2))
    }
    with database.transaction() as connection:
        for name, lease in (
            ("lingering", now + timedelta(seconds=30)),
            ("dead holder", now - timedelta(seconds=1)),
        ):
            update(connection, "scheduler_runs", {"id": runs[name]}, lease_expires_at=lease)

    client = create_app(database, from_environment({})).test_client()
    page = client.get(f"/runs/{runs['lingering']}").get_data(as_text=True)
    assert STILL_RUNNING in page
    assert "timed out after 30.0s and still running on node-a (" in page
    assert "later periods are skipped until it returns" in page
    # Where its log lines are: the node's output, by this run's id.
    assert "The scheduler stores no log lines" in page
    assert f'select(.run_id == "{runs["lingering"]}")' in page
    for name in ("returned", "dead holder"):
        other = client.get(f"/runs/{runs[name]}")
        assert other.status_code == 200
        assert STILL_RUNNING not in other.get_data(as_text=True), name

    nodes = client.get("/nodes").get_data(as_text=True)
    assert f'<a href="/runs/{runs["lingering"]}">' in nodes
    assert "(timed out, still running)" in nodes
    for name in ("returned", "dead holder"):
        assert f"/runs/{runs[name]}" not in nodes, name
