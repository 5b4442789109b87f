"""The console's pages: overview, job, run, nodes, requests, the backfill preview, and
the schedules created at run time.

Every page is a GET with a stable URL (filters in the query string), so a link pasted
in an incident channel opens the same view; its live part refreshes itself.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from flask import Blueprint, Response, abort, redirect, render_template, request, url_for
from werkzeug.wrappers import Response as BaseResponse

from scheduler.console import reading
from scheduler.console.app import actor, console
from scheduler.console.grid import FILTERS, SORTS
from scheduler.errors import UserError

blueprint = Blueprint("pages", __name__)
# A page is re-read every few seconds while open; a thousand jobs on one page made each
# refresh slow and heavy (bench/console.py), so a page holds at most 200.
PER_PAGE, MAX_PER_PAGE = 100, 200
PERIODS, MAX_PERIODS = 50, 200
NOTICES = {
    "paused": "Paused: its periods are recorded skipped (reason paused) on every node.",
    "resumed": "Resumed: periods that passed while it was paused are not caught up.",
    "released": "Released: the next run that reaches this item handles it again.",
    "done": "Marked done: the item is no longer listed as stuck.",
    "deferred-run": "Approved: a node claims the deferred periods next, oldest first, as "
    "manual runs outside the catch-up budget.",
    "deferred-skipped": "Skipped: the deferred periods are recorded skipped (reason budget) "
    "and never run.",
}
SCHEDULE_NOTICES = {
    "deferred-run": NOTICES["deferred-run"],
    "deferred-skipped": NOTICES["deferred-skipped"],
    "paused": "Paused: its periods while paused are never run; those owed before still are, "
    "once resumed.",
    "resumed": "Resumed: it fires from now on; periods that passed while it was paused are "
    "not run.",
    "deleted": "Deleted: it fires nothing more; a period already claimed runs to its end.",
}
# What the schedules page's state filter may say, as `Schedules.list(paused=)` takes it.
SCHEDULE_STATES: dict[str, bool | None] = {"": None, "active": False, "paused": True}


@blueprint.get("/")
def overview() -> str:
    statuses = [status for status in request.args.getlist("status") if status in FILTERS]
    sort = request.args.get("sort", "name")
    sort = sort if sort in SORTS else "name"
    page = reading.read_overview(
        console().admin,
        name=request.args.get("q", "").strip(),
        statuses=statuses,
        page=_number("page", 1, 1, 1_000_000),
        per=_number("per", PER_PAGE, 1, MAX_PER_PAGE),
        periods=_number("periods", PERIODS, 1, MAX_PERIODS),
        sort=sort,
    )
    return render_template(
        "overview.html",
        view=page,
        fleet=page.fleet,
        statuses=statuses,
        sort=sort,
        sorts=SORTS,
        filters=FILTERS,
        query=_query(),
    )


@blueprint.get("/jobs/<path:name>")
def job(name: str) -> str:
    page = reading.read_job(console().admin, name)
    if page is None:
        abort(404, f"no job {name!r} in this database (a node registers a job when it starts)")
    runs = reading.request_runs(console().admin.database, page.requests)
    return render_template(
        "job.html",
        view=page,
        fleet=page.fleet,
        states={
            row.id: reading.request_state(row, page.fleet, runs.get(row.run_id or ""))
            for row in page.requests
        },
        notice=NOTICES.get(request.args.get("notice", "")),
    )


@blueprint.get("/runs/<run_id>")
def run(run_id: str) -> str:
    admin = console().admin
    try:
        detail = admin.run(run_id)
    except UserError as error:
        abort(404, str(error))
    view = reading.read_run(admin, detail)
    return render_template("run.html", view=view, fleet=view.fleet)


@blueprint.get("/run")
def run_at() -> BaseResponse:
    """A run by job and period (`runs show JOB PERIOD`), sent on to its stable URL."""
    try:
        detail = console().admin.run(request.args.get("job", ""), request.args.get("period", ""))
    except UserError as error:
        abort(404, str(error))
    return redirect(url_for("pages.run", run_id=detail.run.id), 303)


@blueprint.get("/nodes")
def nodes() -> str:
    everything = request.args.get("all") == "1"
    header, views = reading.read_nodes(console().admin, everything=everything)
    return render_template("nodes.html", fleet=header, nodes=views, everything=everything)


@blueprint.get("/requests")
def requests() -> str:
    admin = console().admin
    header = reading.fleet(admin)
    rows = admin.requests(limit=100)
    runs = reading.request_runs(admin.database, rows)
    states = {
        row.id: reading.request_state(row, header, runs.get(row.run_id or "")) for row in rows
    }
    return render_template("requests.html", fleet=header, rows=rows, states=states)


@blueprint.get("/requests/<request_id>")
def one_request(request_id: str) -> str:
    admin = console().admin
    try:
        row = admin.request(request_id)
    except UserError as error:
        abort(404, str(error))
    header = reading.fleet(admin)
    run = reading.request_runs(admin.database, [row]).get(row.run_id or "")
    return render_template(
        "request.html", fleet=header, row=row, state=reading.request_state(row, header, run)
    )


@blueprint.get("/backfill")
def backfill_preview() -> tuple[str, int] | str:
    """What a backfill of the range would do (`backfill --dry-run`); writes nothing."""
    admin = console().admin
    name = request.args.get("job", "")
    include_failed = request.args.get("include_failed") == "1"
    start, end = request.args.get("from", "").strip(), request.args.get("to", "").strip()
    header = reading.fleet(admin)
    try:
        steps = admin.preview_backfill(name, start, end, include_failed=include_failed)
    except UserError as error:
        return render_template("message.html", title="Backfill refused", message=str(error)), 400
    return render_template(
        "backfill.html",
        fleet=header,
        job=name,
        start=start,
        end=end,
        include_failed=include_failed,
        steps=steps,
    )


@blueprint.get("/schedules")
def schedules() -> str:
    """A page of schedules in key order; the next page starts after its last key, so a
    page costs the same however many schedules there are."""
    state = request.args.get("state", "")
    filters = reading.ScheduleFilters(
        prefix=request.args.get("prefix", ""),
        job=request.args.get("job", "").strip(),
        paused=SCHEDULE_STATES.get(state),
        per=_number("per", PER_PAGE, 1, MAX_PER_PAGE),
    )
    after = request.args.get("after") or None
    listing = reading.read_schedules(console().admin, console().schedules, filters, after=after)
    # The filters as given, to carry into the pager's link.
    query = {name: request.args.get(name, "") for name in ("prefix", "job", "state", "per")}
    return render_template(
        "schedules.html",
        view=listing,
        fleet=listing.fleet,
        filters=filters,
        state=state if state in SCHEDULE_STATES else "",
        after=after,
        query={name: value for name, value in query.items() if value},
        notice=SCHEDULE_NOTICES.get(request.args.get("notice", "")),
    )


@blueprint.get("/schedule")
def schedule() -> str:
    """A schedule by its key, in the query string: a key is the application's, and may
    hold any character a path would mangle (`/`, `//`, `?`, `%`)."""
    key = request.args.get("key", "")
    try:
        page = reading.read_schedule(console().admin, console().schedules, key)
    except UserError as error:
        abort(404, str(error))
    if page is None:
        abort(404, f"no schedule {key!r} in this database")
    return render_template(
        "schedule.html",
        view=page,
        fleet=page.fleet,
        notice=SCHEDULE_NOTICES.get(request.args.get("notice", "")),
    )


@blueprint.get("/login")
def login() -> BaseResponse:
    """Ask the browser for basic-auth credentials, then go back where it was."""
    if not console().credentials.configured:
        abort(403, "this console is read-only: no credentials are configured")
    if actor() is None:
        return Response(
            "Sign in with a name and secret from SCHEDULER_CONSOLE_AUTH.\n",
            401,
            {"WWW-Authenticate": 'Basic realm="scheduler console", charset="UTF-8"'},
            mimetype="text/plain",
        )
    return redirect(_local_path(request.args.get("next", "/")), 303)


@blueprint.app_errorhandler(404)
def not_found(error: Exception) -> tuple[str, int]:
    message = getattr(error, "description", "") or "no such page"
    return render_template("message.html", title="Not found", message=message), 404


@blueprint.app_errorhandler(403)
def forbidden(error: Exception) -> tuple[str, int]:
    message = getattr(error, "description", "") or "forbidden"
    return render_template("message.html", title="Refused", message=message), 403


def _number(name: str, default: int, low: int, high: int) -> int:
    try:
        value = int(request.args.get(name, default))
    except ValueError:
        return default
    return min(max(value, low), high)


def _query() -> dict[str, object]:
    """The overview's filters, to carry into its pager links."""
    return {key: request.args.getlist(key) for key in ("q", "status", "per", "periods", "sort")}


def _local_path(target: str) -> str:
    """Only a path of this console: `next=https://elsewhere` must not redirect away."""
    parts = urlsplit(target)
    if parts.scheme or parts.netloc or not target.startswith("/") or target.startswith("//"):
        return "/"
    return target
