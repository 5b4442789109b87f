"""The console's pages of schedules created at run time, on both backends: a page is one
range of keys (prefix, job and state filters, keyset paging) in statements that do not
grow with the schedules; a schedule's page shows its own periods only; markup in a key
or an argument stays text; pause, resume and delete are refused without a credential
and a form token, as the job actions are."""

from __future__ import annotations

import io
import json
import re
from datetime import timedelta
from html import unescape

import pytest
from flask.testing import FlaskClient

from scheduler.admin import Admin
from scheduler.console import reading
from scheduler.console.app import create_app
from scheduler.console.auth import Credentials
from scheduler.node.registration import register
from scheduler.registry import TEMPLATE_CRON
from scheduler.schedules import Schedules
from scheduler.store.database import Database
from tests.acceptance.jobmods.tenants import tenant_report
from tests.integration import seed
from tests.log_capture import configured

ALICE = {"Authorization": "Basic YWxpY2U6czNjcmV0"}  # alice:s3cret
MARKUP_KEY = "tenant-9:<b>odd</b>/a?b#c%2F d"
PAYLOAD = "<script>alert(1)</script>"
TOKEN = re.compile(r'name="form_token" value="([0-9a-f]*)"')


@pytest.fixture
def schedules(database: Database) -> Schedules:
    register(database, {"tenant_report": tenant_report})
    seed.add_job(database, "digest", TEMPLATE_CRON, first_seen=seed.now())
    return Schedules(database)


def _create(schedules: Schedules, *keys: str, job: str = "tenant_report") -> None:
    for key in keys:
        tenant = int(key.split(":")[0].removeprefix("tenant-"))
        schedules.create(key, job, cron="0 9 * * *", args={"tenant": tenant})


def _keys(listing: reading.ScheduleList) -> list[str]:
    return [schedule.key for schedule in listing.schedules]


def _read(
    database: Database, schedules: Schedules, after: str | None = None, **filters: object
) -> reading.ScheduleList:
    chosen = reading.ScheduleFilters(**filters)  # type: ignore[arg-type]
    return reading.read_schedules(Admin(database), schedules, chosen, after=after)


def test_a_page_is_one_range_of_keys_filtered_by_prefix_job_and_state(
    database: Database, schedules: Schedules
) -> None:
    _create(schedules, "tenant-1:daily", "tenant-1:weekly", "tenant-10:daily", "tenant-2:daily")
    _create(schedules, "tenant-1:digest", "tenant-2:digest", job="digest")
    schedules.pause("tenant-1:weekly")

    assert _keys(_read(database, schedules, prefix="tenant-1:")) == [
        "tenant-1:daily",
        "tenant-1:digest",
        "tenant-1:weekly",
    ], "tenant-10 is another tenant"
    assert _keys(_read(database, schedules, job="digest")) == ["tenant-1:digest", "tenant-2:digest"]
    assert _keys(_read(database, schedules, paused=True)) == ["tenant-1:weekly"]
    active = _read(database, schedules, prefix="tenant-1:", paused=False)
    assert _keys(active) == ["tenant-1:daily", "tenant-1:digest"]

    # Keyset paging: each page starts after the previous one's last key, none twice.
    walked: list[str] = []
    after: str | None = None
    while True:
        page = _read(database, schedules, after, per=2)
        assert len(page.schedules) <= 2
        walked += _keys(page)
        if page.next_after is None:
            break
        assert page.next_after == walked[-1]
        after = page.next_after
    assert walked == sorted(walked)
    assert len(walked) == len(set(walked)) == 6
    within = _read(database, schedules, "tenant-1:daily", prefix="tenant-1:", per=1)
    assert (_keys(within), within.next_after) == (["tenant-1:digest"], "tenant-1:digest")
    assert _read(database, schedules, "tenant-1:weekly", prefix="tenant-1:").schedules == []


def test_a_page_reads_one_limited_statement_however_many_schedules(
    database: Database, schedules: Schedules
) -> None:
    counts: list[int] = []
    for tenants in (3, 60):
        _create(schedules, *(f"tenant-{n}:daily" for n in range(len(counts) * 3, tenants)))
        with database.recording() as sent:
            page = _read(database, schedules, per=10)
        assert len(page.schedules) == min(tenants, 10)
        reads = [statement for statement in sent if "scheduler_schedules" in statement]
        assert all("LIMIT" in statement for statement in reads)
        counts.append(len(reads))
    assert counts == [1, 1]


def test_a_schedule_shows_its_own_periods_newest_first_and_a_deleted_one_stays_readable(
    database: Database, schedules: Schedules
) -> None:
    admin = Admin(database)
    _create(schedules, "tenant-1:daily", "tenant-1:daily-eu")
    schedules.change("tenant-1:daily", catchup_window="2h", catchup_limit=3)
    start = seed.now().replace(microsecond=0) - timedelta(days=3)
    own = [
        seed.add_run(database, "@tenant-1:daily", start + timedelta(days=day), status)
        for day, status in enumerate(("succeeded", "failed", "succeeded"))
    ]
    seed.add_run(database, "@tenant-1:daily-eu", start, "succeeded")
    seed.add_run(database, "tenant-1:daily", start, "succeeded")

    page = reading.read_schedule(admin, schedules, "tenant-1:daily")
    assert page is not None
    assert page.state == "active"
    assert [run.id for run in page.runs] == own[::-1], "its own runs only, newest first"
    assert page.upcoming[0][0] == page.schedule.next_due
    assert len(page.upcoming) == reading.SCHEDULE_UPCOMING
    assert page.catchup == "window 2h, at most 3 periods; the job's for the rest"
    assert reading.read_schedule(admin, schedules, "tenant-1:") is None
    assert reading.read_schedule(admin, schedules, "tenant-1:dail") is None

    schedules.pause("tenant-1:daily")
    paused = reading.read_schedule(admin, schedules, "tenant-1:daily")
    assert paused is not None
    assert (paused.state, paused.upcoming) == ("paused", [])

    assert schedules.delete("tenant-1:daily")
    deleted = reading.read_schedule(admin, schedules, "tenant-1:daily")
    assert deleted is not None
    assert deleted.state == "deleted"
    assert deleted.schedule.deleted_at is not None
    assert [run.id for run in deleted.runs] == own[::-1], "its runs stay readable"
    assert _keys(_read(database, schedules)) == ["tenant-1:daily-eu"], "no longer listed"


def test_the_pages_escape_keys_and_arguments_and_carry_the_filters_into_the_pager(
    database: Database, schedules: Schedules
) -> None:
    schedules.create(MARKUP_KEY, "tenant_report", every="1h", args={"tenant": 9, "note": PAYLOAD})
    _create(schedules, "tenant-9:a", "tenant-9:b", "tenant-90:a")
    client = create_app(database, Credentials({})).test_client()

    # In key order `<` comes before the letters: the markup key first, then a, then b.
    listing = client.get("/schedules?prefix=tenant-9:&per=2").get_data(as_text=True)
    assert '<a href="/schedules">Schedules</a>' in listing, "in the navigation"
    assert "tenant-9:&lt;b&gt;odd&lt;/b&gt;/a?b#c%2F d" in listing
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in listing
    assert "<b>odd</b>" not in listing
    assert PAYLOAD not in listing
    assert ">tenant-9:a</a>" in listing
    assert "tenant-9:b" not in listing, "on the next page"
    assert "tenant-90:a" not in listing
    pager = re.search(r'<a rel="next" href="([^"]+)"', listing)
    assert pager is not None
    following = unescape(pager.group(1))
    assert "prefix=tenant-9:&" in following
    assert "per=2" in following
    assert "after=tenant-9:a&" in following

    second = client.get(following).get_data(as_text=True)
    assert "tenant-9:b" in second
    assert ">tenant-9:a</a>" not in second
    assert "tenant-90:a" not in second
    assert '<a rel="next"' not in second, "the last page"
    assert '<a rel="first" href="/schedules?prefix=tenant-9:&amp;per=2">' in second
    link = re.search(r'<td class="key"><a href="([^"]+)">tenant-9:&lt;', listing)
    assert link is not None

    page = client.get(unescape(link.group(1)))
    assert page.status_code == 200, "a key with /, ?, # and % finds its page"
    body = page.get_data(as_text=True)
    assert "<h1>tenant-9:&lt;b&gt;odd&lt;/b&gt;/a?b#c%2F d <span" in body
    assert json.dumps(PAYLOAD)[1:-1].replace("<", "&lt;").replace(">", "&gt;") in body
    assert PAYLOAD not in body
    assert f"@{MARKUP_KEY}" not in body
    assert "every 1h from" in body
    assert 'href="/jobs/tenant_report"' in body

    assert client.get("/schedule?key=tenant-404").status_code == 404
    assert client.get("/schedule?key=").status_code == 404
    assert client.get("/schedules?state=bogus&per=0").status_code == 200


def test_a_run_of_a_schedule_links_to_its_schedule(
    database: Database, schedules: Schedules
) -> None:
    _create(schedules, "tenant-1:daily")
    run = seed.add_run(database, "@tenant-1:daily", seed.now().replace(microsecond=0), "failed")
    client = create_app(database, Credentials({})).test_client()
    body = client.get(f"/runs/{run}").get_data(as_text=True)
    assert '<a href="/schedule?key=tenant-1:daily">@tenant-1:daily</a>' in body
    assert "/actions/rerun" not in body, "a schedule's period is not a job's to rerun"
    template = client.get("/jobs/tenant_report").get_data(as_text=True)
    assert '<a href="/schedules?job=tenant_report">' in template


def _post(client: FlaskClient, action: str, key: str, token: str | None = None, **headers: str):
    form = {"schedule": key} if token is None else {"schedule": key, "form_token": token}
    return client.post(f"/actions/schedule/{action}", data=form, headers=headers)


def test_a_read_only_console_offers_no_button_and_refuses_a_post(
    database: Database, schedules: Schedules
) -> None:
    _create(schedules, "tenant-1:daily")
    client = create_app(database, Credentials({})).test_client()
    page = client.get("/schedule?key=tenant-1:daily").get_data(as_text=True)
    assert "Read-only" in page
    assert "/actions/schedule/" not in page
    assert 'id="pause"' not in page
    for action in ("pause", "delete"):
        refused = _post(client, action, "tenant-1:daily", "anything", Authorization="Bearer x")
        assert refused.status_code == 403
        assert "no credentials are configured" in refused.get_data(as_text=True)
    found = schedules.get("tenant-1:daily")
    assert found is not None
    assert not found.paused


def test_pause_resume_and_delete_need_a_credential_and_a_form_token_and_are_logged(
    database: Database, schedules: Schedules
) -> None:
    _create(schedules, "tenant-1:daily", "tenant-1:weekly")
    client = create_app(database, Credentials({"alice": "s3cret", "bot": "tok"})).test_client()
    out = io.StringIO()
    with configured(out):
        anonymous = client.get("/schedule?key=tenant-1:daily").get_data(as_text=True)
        assert 'id="pause"' in anonymous, "a button that says to sign in, as a job's"
        assert _post(client, "pause", "tenant-1:daily").status_code == 401
        told = _post(client, "pause", "tenant-1:daily", "")
        assert told.status_code == 403
        assert "Sign in to act" in told.get_data(as_text=True)

        page = client.get("/schedule?key=tenant-1:daily", headers=ALICE).get_data(as_text=True)
        assert "signed in as <b>alice</b>" in page
        match = TOKEN.search(page)
        assert match is not None
        token = match.group(1)
        assert _post(client, "pause", "tenant-1:daily", **ALICE).status_code == 403
        forged = _post(
            client, "pause", "tenant-1:daily", token, Origin="http://evil.example", **ALICE
        )
        assert forged.status_code == 403
        paused_now = schedules.get("tenant-1:daily")
        assert paused_now is not None
        assert not paused_now.paused, "nothing refused changed anything"

        done = _post(client, "pause", "tenant-1:daily", token, **ALICE)
        assert done.status_code == 303
        assert done.location == "/schedule?key=tenant-1:daily&notice=paused"
        after = client.get(done.location, headers=ALICE).get_data(as_text=True)
        assert "Paused: its periods while paused" in after
        assert '<span class="badge paused">paused</span>' in after
        assert 'id="resume"' in after
        assert 'id="pause"' not in after
        found = schedules.get("tenant-1:daily")
        assert found is not None
        assert found.paused
        listed = client.get("/schedules?state=paused").get_data(as_text=True)
        assert "tenant-1:daily" in listed
        assert "tenant-1:weekly" not in listed

        resumed = _post(client, "resume", "tenant-1:daily", Authorization="Bearer tok")
        assert resumed.status_code == 303, "a script's bearer token needs no form token"
        found = schedules.get("tenant-1:daily")
        assert found is not None
        assert not found.paused

        deleted = _post(client, "delete", "tenant-1:daily", token, **ALICE)
        assert (deleted.status_code, deleted.location) == (303, "/schedules?notice=deleted")
        assert schedules.get("tenant-1:daily") is None
        gone = client.get(deleted.location).get_data(as_text=True)
        assert "Deleted: it fires nothing more" in gone
        assert "tenant-1:daily<" not in gone
        again = _post(client, "delete", "tenant-1:daily", token, **ALICE)
        assert again.status_code == 400
        assert "no such schedule" in again.get_data(as_text=True)
        page = client.get("/schedule?key=tenant-1:daily", headers=ALICE).get_data(as_text=True)
        assert '<span class="badge deleted">deleted</span>' in page
        assert "/actions/schedule/" not in page, "nothing to do to a deleted schedule"

    events = [json.loads(line) for line in out.getvalue().splitlines()]
    actions = [
        (event["actor"], event["action"], event["schedule"], event["outcome"])
        for event in events
        if event["event"] == "console_action"
    ]
    assert actions == [
        ("alice", "pause", "tenant-1:daily", "done"),
        ("bot", "resume", "tenant-1:daily", "done"),
        ("alice", "delete", "tenant-1:daily", "done"),
        ("alice", "delete", "tenant-1:daily", "refused"),
    ]
    denied = [
        (event["reason"], event["schedule"])
        for event in events
        if event["event"] == "console_action_denied"
    ]
    assert denied == [
        ("no credentials", "tenant-1:daily"),
        ("no credentials", "tenant-1:daily"),
        ("form token or origin", "tenant-1:daily"),
        ("form token or origin", "tenant-1:daily"),
    ]
