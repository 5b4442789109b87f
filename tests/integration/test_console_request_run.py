"""The console on both backends says how a carried-out request's run is going: a trigger
request is `done` once its run is claimed and handed to a node's workers, so while that
run still goes the request reads "done; its run: still running" (not a bare "done",
which would read as finished), both on /requests and on the request's own page."""

from __future__ import annotations

import re
from datetime import timedelta

from scheduler.console.app import create_app
from scheduler.console.auth import from_environment
from scheduler.store import requests as asked
from scheduler.store.database import Database
from scheduler.store.requests import Draft, RequestKind, RequestOutcome
from tests.integration import seed
from tests.sql import update

# Each status a run may be in before it ends, and how a done request shows it.
UNDER_WAY = {
    "running": "done; its run: still running",
    "queued": "done; its run: queued for a worker",
    "claimed": "done; its run: claimed, not started yet",
    "succeeded": "done; its run: succeeded",
}


def _carried_out(database: Database, run_id: str) -> str:
    """A trigger request a node took and carried out by claiming the run `run_id`."""
    request_id = asked.add(
        database, Draft(job="export", kind=RequestKind.TRIGGER, requested_by="ops")
    )
    now = seed.now()
    with database.transaction() as connection:
        update(
            connection,
            asked.REQUESTS,
            {"id": request_id},
            taken_by="node-a",
            taken_at=now - timedelta(seconds=2),
            taken_until=now + timedelta(seconds=30),
            tries=1,
            finished_at=now - timedelta(seconds=1),
            outcome=RequestOutcome.DONE.value,
            detail="manual run claimed",
            run_id=run_id,
        )
    return request_id


def _state_cell(page: str, request_id: str) -> str:
    """The text of the state cell in the /requests row of `request_id`."""
    row = re.search(rf'<a href="/requests/{request_id}">.*?</tr>', page, re.S)
    assert row, f"/requests lists no request {request_id}"
    cells = re.findall(r"<td>(.*?)</td>", row.group(0), re.S)
    return str(cells[3]).strip()  # by, job, what, then state (the match opens inside "asked")


def test_a_done_request_whose_run_still_goes_says_so_on_both_pages(database: Database) -> None:
    now = seed.now()
    seed.add_node(database, "node-a", heartbeat_at=now)
    seed.add_job(database, "export", "0 * * * *", first_seen=now - timedelta(days=1))
    hour = now.replace(minute=0, second=0, microsecond=0)
    requests = {}
    for offset, (status, shown) in enumerate(UNDER_WAY.items()):
        run_id = seed.add_run(
            database,
            "export",
            hour - timedelta(hours=offset),
            status,
            origin="manual",
            lease_expires_at=now + timedelta(seconds=30) if status != "succeeded" else None,
            finished_at=now if status == "succeeded" else None,
            duration_ms=1_000 if status == "succeeded" else None,
        )
        requests[_carried_out(database, run_id)] = (status, shown)

    client = create_app(database, from_environment({})).test_client()
    listed = client.get("/requests").get_data(as_text=True)
    for request_id, (status, shown) in requests.items():
        assert _state_cell(listed, request_id) == shown, status
        page = client.get(f"/requests/{request_id}").get_data(as_text=True)
        state = re.search(r'<dd id="request-state" class="state-done">(.*?)</dd>', page, re.S)
        assert state, f"the page of the request whose run is {status} shows no done state"
        assert state.group(1).strip() == shown, status
