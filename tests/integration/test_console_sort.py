"""The overview at hundreds of jobs: a `last` column says each job's newest period's
status in words, and `sort=` orders the jobs by name, by the worst newest period first,
or by the soonest next period, across pages (on both backends)."""

from __future__ import annotations

import re
from datetime import timedelta

from scheduler.console.app import create_app
from scheduler.console.auth import from_environment
from scheduler.store.database import Database
from tests.integration import seed

JOBS = {
    # name: (cron, the newest period's status)
    "a-nightly": ("0 3 * * *", "succeeded"),
    "b-hourly": ("0 * * * *", "failed"),
    "c-minutely": ("* * * * *", "skipped"),
    "d-weekly": ("0 4 * * 1", "timed_out"),
}


def _names(page: str) -> list[str]:
    return re.findall(r'<td class="name"><a href="/jobs/[^"]+">([^<]+)</a>', page)


def test_the_overview_shows_each_jobs_last_status_and_sorts(database: Database) -> None:
    now = seed.now()
    for name, (cron, status) in JOBS.items():
        seed.add_job(database, name, cron, first_seen=now - timedelta(days=8))
        seed.add_run(database, name, now - timedelta(days=7, minutes=1), "succeeded")
        seed.add_run(database, name, now - timedelta(days=7), status)
    client = create_app(database, from_environment({})).test_client()

    page = client.get("/").get_data(as_text=True)
    assert _names(page) == sorted(JOBS)
    lasts = re.findall(r'<td class="last"><span class="status s-(\w+)"[^>]*>(\w+)</span>', page)
    assert lasts == [(status, status) for _, status in (JOBS[name] for name in sorted(JOBS))]

    worst = client.get("/?sort=last").get_data(as_text=True)
    assert _names(worst) == ["b-hourly", "d-weekly", "c-minutely", "a-nightly"]
    assert '<option value="last" selected>' in worst

    soonest = client.get("/?sort=next").get_data(as_text=True)
    assert _names(soonest)[0] == "c-minutely"
    assert _names(soonest)[-1] in {"a-nightly", "d-weekly"}

    # The order holds across pages, and the pager keeps it.
    first = client.get("/?sort=last&per=2").get_data(as_text=True)
    assert _names(first) == ["b-hourly", "d-weekly"]
    assert "sort=last" in first.split('rel="next"', 1)[1].split(">", 1)[0]
    second = client.get("/?sort=last&per=2&page=2").get_data(as_text=True)
    assert _names(second) == ["c-minutely", "a-nightly"]
    # An unknown order is the default one.
    assert _names(client.get("/?sort=bogus").get_data(as_text=True)) == sorted(JOBS)
