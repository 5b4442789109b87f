"""The scheduler in the Django admin of the example project: a staff user with the view
permissions sees jobs, runs (a failure's traceback on its page), items and schedules
and can change nothing; with the permissions, the actions pause and resume jobs and
schedules, and the add page creates a tenant's schedule, through the scheduler's API.
The project's own model acts too: the tenants' admin (examples/django/billing/admin.py)
starts and pauses a tenant's schedule in one transaction with the tenant's row."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.acceptance.django_project import manage

# Run by `manage.py shell`: seeds the scheduler's tables, then drives the admin with
# Django's test client and prints what each request answered, as JSON.
SCRIPT = """
import json
from datetime import UTC, datetime

from django.contrib.auth.models import Permission, User
from django.test import Client
from django.test.utils import setup_test_environment

from billing.jobs import tenant_report
from billing.models import Tenant
from scheduler.django.admin import _url
from scheduler.schedules import Schedules
from scheduler.store.database import open_database
from tests.integration.seed import add_item, add_job, add_run

setup_test_environment()
period = datetime(2026, 12, 1, 6, tzinfo=UTC)
database = open_database(_url())
add_job(database, "invoice", "*/2 * * * * *", first_seen=period)
add_job(database, "tenant-report", "", first_seen=period)  # a template, as a node registers it
run_id = add_run(database, "invoice", period, "failed", error="card declined <b>")
add_item(database, "invoice", "invoice:42", period, run_id, state="done")
database.dispose()
with Schedules(_url()) as schedules:
    schedules.create("tenant-7:report", tenant_report, every="1h", args={"tenant": "7"})

viewer = User.objects.create_user("viewer", password="x", is_staff=True)
viewer.user_permissions.add(
    *Permission.objects.filter(content_type__app_label="cronclaim", codename__startswith="view_")
)
operator = User.objects.create_user("operator", password="x", is_staff=True)
operator.user_permissions.add(
    *Permission.objects.filter(content_type__app_label="cronclaim")
)
answers = {"run_id": run_id}
pages = answers["pages"] = {}


def page(client, who, path):
    response = client.get(path)
    pages[f"{who} GET {path}"] = [response.status_code, response.content.decode()]


def act(client, who, path, action, pk):
    response = client.post(path, {"action": action, "_selected_action": [pk]}, follow=True)
    pages[f"{who} {action}"] = [response.status_code, response.content.decode()]


as_viewer, as_operator = Client(), Client()
as_viewer.force_login(viewer)
as_operator.force_login(operator)
for path in (
    "/admin/cronclaim/job/",
    "/admin/cronclaim/run/",
    "/admin/cronclaim/run/?status=failed",
    "/admin/cronclaim/run/?status=succeeded",
    f"/admin/cronclaim/run/{run_id}/change/",
    "/admin/cronclaim/item/",
    "/admin/cronclaim/schedule/",
    "/admin/cronclaim/schedule/add/",
):
    page(as_viewer, "viewer", path)
act(as_viewer, "viewer", "/admin/cronclaim/job/", "pause_jobs", "invoice")
act(as_operator, "operator", "/admin/cronclaim/job/", "pause_jobs", "invoice")
act(as_operator, "operator", "/admin/cronclaim/schedule/", "pause_schedules", "tenant-7:report")
form = {"key": "tenant-8:report", "job": "tenant-report", "every_seconds": "3600",
        "timezone": "UTC", "args": '{"tenant": "8"}'}
for who, client, fields in (
    ("operator adds", as_operator, form),
    ("operator adds a bad cron", as_operator,
     {**form, "key": "tenant-9:report", "every_seconds": "", "cron": "61 * * * *"}),
    ("viewer adds", as_viewer, {**form, "key": "tenant-10:report"}),
):
    response = client.post("/admin/cronclaim/schedule/add/", fields, follow=True)
    pages[who] = [response.status_code, response.content.decode()]
# The tenants' own admin: a clerk with the tenant's permissions (none of the
# scheduler's) starts the weekly report of two tenants, pauses one, then starts it again,
# which the scheduler refuses: the tenant's row goes back to what it was.
acme, globex = Tenant.objects.create(name="Acme"), Tenant.objects.create(name="Globex")
answers["tenants"] = [acme.pk, globex.pk]
clerk = User.objects.create_user("clerk", password="x", is_staff=True)
clerk.user_permissions.add(*Permission.objects.filter(content_type__app_label="billing"))
as_clerk = Client()
as_clerk.force_login(clerk)
flags = answers["weekly report"] = {}
for who, client, action, tenants in (
    ("clerk starts", as_clerk, "start_weekly_report", [acme.pk, globex.pk]),
    ("clerk pauses", as_clerk, "pause_weekly_report", [acme.pk]),
    ("clerk starts again", as_clerk, "start_weekly_report", [acme.pk]),
    ("viewer starts", as_viewer, "start_weekly_report", [acme.pk]),
):
    response = client.post(
        "/admin/billing/tenant/", {"action": action, "_selected_action": tenants}, follow=True
    )
    pages[who] = [response.status_code, response.content.decode()]
    flags[who] = [tenant.weekly_report for tenant in Tenant.objects.order_by("pk")]
with Schedules(_url()) as schedules:
    answers["tenant schedules"] = {
        tenant.pk: [found.job, found.args, found.trigger.cron, found.trigger.timezone, found.paused]
        for tenant in (acme, globex)
        if (found := schedules.get(f"tenant-{tenant.pk}:report"))
    }
with Schedules(_url()) as schedules:
    answers["schedule paused"] = schedules.get("tenant-7:report").paused
    created = schedules.get("tenant-8:report")
    answers["created"] = [created.job, created.args, created.paused] if created else None
    answers["others"] = [schedules.get(f"tenant-{n}:report") is None for n in (9, 10)]
database = open_database(_url())
with database.transaction() as connection:
    answers["job paused"] = connection.execute(
        "SELECT paused FROM scheduler_jobs WHERE name = 'invoice'"
    ).scalar()
database.dispose()
print("ANSWERS " + json.dumps(answers))
"""


def _answers(output: str) -> dict[str, Any]:
    (line,) = [line for line in output.splitlines() if line.startswith("ANSWERS ")]
    found: dict[str, Any] = json.loads(line.removeprefix("ANSWERS "))
    return found


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_the_admin_shows_the_scheduler_read_only_and_acts_with_the_permission(
    tmp_path: Path, backend: str, request: pytest.FixtureRequest
) -> None:
    url = (
        f"sqlite:///{tmp_path / 'db.sqlite3'}"
        if backend == "sqlite"
        else request.getfixturevalue("empty_postgres_url")
    )
    migrated = manage(url, "migrate", "--no-input")
    assert migrated.returncode == 0, migrated.stdout + migrated.stderr
    shell = manage(url, "shell", "-c", SCRIPT)
    assert shell.returncode == 0, shell.stdout + shell.stderr
    answers = _answers(shell.stdout)
    status = {key: value[0] for key, value in answers["pages"].items()}
    body = {key: value[1] for key, value in answers["pages"].items()}
    assert status == {
        "viewer GET /admin/cronclaim/job/": 200,
        "viewer GET /admin/cronclaim/run/": 200,
        "viewer GET /admin/cronclaim/run/?status=failed": 200,
        "viewer GET /admin/cronclaim/run/?status=succeeded": 200,
        next(key for key in status if "/run/" in key and key.endswith("/change/")): 200,
        "viewer GET /admin/cronclaim/item/": 200,
        "viewer GET /admin/cronclaim/schedule/": 200,
        "viewer GET /admin/cronclaim/schedule/add/": 403,
        "viewer pause_jobs": 200,
        "operator pause_jobs": 200,
        "operator pause_schedules": 200,
        "operator adds": 200,
        "operator adds a bad cron": 200,
        "viewer adds": 403,
        "clerk starts": 200,
        "clerk pauses": 200,
        "clerk starts again": 200,
        "viewer starts": 403,
    }
    assert "*/2 * * * * *" in body["viewer GET /admin/cronclaim/job/"]
    # The status filter lists the scheduler's statuses, and filters by them.
    assert "?status=timed_out" in body["viewer GET /admin/cronclaim/run/"]
    link = f"/admin/cronclaim/run/{answers['run_id']}/change/"
    assert link in body["viewer GET /admin/cronclaim/run/?status=failed"]
    assert link not in body["viewer GET /admin/cronclaim/run/?status=succeeded"]
    run_page = next(value for key, value in body.items() if key.endswith("/change/"))
    # The traceback, escaped, on the run's page; no form to change it.
    assert "ValueError: card declined &lt;b&gt;" in run_page
    assert 'type="submit" value="Save"' not in run_page
    assert "invoice:42" in body["viewer GET /admin/cronclaim/item/"]
    assert "tenant-7:report" in body["viewer GET /admin/cronclaim/schedule/"]
    # The viewer is offered no action, and one posted anyway does nothing; the
    # operator's actions went through the scheduler.
    assert 'name="action"' not in body["viewer pause_jobs"]
    assert "Paused: invoice" not in body["viewer pause_jobs"]
    assert 'name="action"' in body["operator pause_jobs"]
    assert "Paused: invoice" in body["operator pause_jobs"]
    assert "Paused: tenant-7:report" in body["operator pause_schedules"]
    assert answers["job paused"] in (True, 1)
    assert answers["schedule paused"] is True
    # A schedule for a tenant from the add page, created by the scheduler; its mistake
    # shown on the form, naming the schedule and the field; nothing from the viewer.
    assert answers["created"] == ["tenant-report", {"tenant": "8"}, False]
    assert "tenant-8:report" in body["operator adds"]
    assert "schedule &#x27;tenant-9:report&#x27;: cron:" in body["operator adds a bad cron"]
    assert answers["others"] == [True, True]
    # The tenants' actions: each tenant's schedule and its row in one transaction.
    acme, globex = answers["tenants"]
    assert answers["tenant schedules"] == {
        str(acme): ["tenant-report", {"tenant": str(acme)}, "0 7 * * 1", "Europe/Berlin", True],
        str(globex): [
            "tenant-report",
            {"tenant": str(globex)},
            "0 7 * * 1",
            "Europe/Berlin",
            False,
        ],
    }
    assert (
        f"Weekly report scheduled: tenant-{acme}:report, tenant-{globex}:report"
        in body["clerk starts"]
    )
    assert f"Weekly report paused: tenant-{acme}:report" in body["clerk pauses"]
    assert (
        f"Schedule &#x27;tenant-{acme}:report&#x27;: key: a schedule with this key exists"
        in body["clerk starts again"]
    )
    assert "Weekly report scheduled" not in body["clerk starts again"]
    assert answers["weekly report"] == {
        "clerk starts": [True, True],
        "clerk pauses": [False, True],
        "clerk starts again": [False, True],  # rolled back with the refused schedule
        "viewer starts": [False, True],
    }
