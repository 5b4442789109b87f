"""The console's actions: pause, resume, trigger, rerun, backfill, release and mark done
an item, run or skip the periods a catch-up budget deferred. Each goes through
`scheduler.admin`, as the CLI does; trigger, rerun and backfill become requests that
a running node carries out (`scheduler.node.requests`).
A schedule created at run time is paused, resumed or deleted through
`scheduler.schedules`, as the application does.

An action needs a credential (401 without one, 403 when none is configured); a form
posted by a browser also needs the console's own form token and a same-origin request,
since a browser sends basic-auth credentials by itself (CSRF). Every action, done,
refused or denied, is logged as `console_action` or `console_action_denied` with who.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable
from urllib.parse import urlsplit

from flask import Blueprint, abort, make_response, redirect, render_template, request
from flask import url_for as url
from werkzeug.wrappers import Response as BaseResponse

from scheduler.admin import Admin
from scheduler.console.app import actor, console
from scheduler.console.auth import Actor, Via
from scheduler.errors import UserError
from scheduler.schedules import ScheduleNotFoundError
from scheduler.store.schedules import schedule_key

blueprint = Blueprint("actions", __name__, url_prefix="/actions")
Act = Callable[[Admin, str, str], BaseResponse]


@blueprint.post("/pause")
def pause() -> BaseResponse:
    def act(admin: Admin, job: str, _who: str) -> BaseResponse:
        admin.pause(job)
        return _job_page(job, "paused")

    return _act("pause", act)


@blueprint.post("/resume")
def resume() -> BaseResponse:
    def act(admin: Admin, job: str, _who: str) -> BaseResponse:
        admin.resume(job)
        return _job_page(job, "resumed")

    return _act("resume", act)


@blueprint.post("/deferred/run")
def run_deferred() -> BaseResponse:
    def act(admin: Admin, job: str, _who: str) -> BaseResponse:
        admin.run_deferred(job)
        return _deferred_page(job, "deferred-run")

    return _act("run_deferred", act)


@blueprint.post("/deferred/skip")
def skip_deferred() -> BaseResponse:
    def act(admin: Admin, job: str, _who: str) -> BaseResponse:
        admin.skip_deferred(job)
        return _deferred_page(job, "deferred-skipped")

    return _act("skip_deferred", act)


@blueprint.post("/trigger")
def trigger() -> BaseResponse:
    return _act("trigger", lambda admin, job, who: _request(admin.request_trigger(job, by=who)))


@blueprint.post("/rerun")
def rerun() -> BaseResponse:
    def act(admin: Admin, job: str, who: str) -> BaseResponse:
        period = _field("period")
        return _request(admin.request_rerun(job, period, force=_flag("force"), by=who))

    return _act("rerun", act, period=request.form.get("period"), force=_flag("force"))


@blueprint.post("/backfill")
def backfill() -> BaseResponse:
    def act(admin: Admin, job: str, who: str) -> BaseResponse:
        start, end = _field("from"), _field("to")
        include = _flag("include_failed")
        return _request(admin.request_backfill(job, start, end, include_failed=include, by=who))

    form = request.form
    return _act("backfill", act, start=form.get("from"), end=form.get("to"))


@blueprint.post("/release")
def release() -> BaseResponse:
    def act(admin: Admin, job: str, _who: str) -> BaseResponse:
        admin.release_item(job, _field("key"))
        return _job_page(job, "released")

    return _act("release", act, key=request.form.get("key"))


@blueprint.post("/done")
def done() -> BaseResponse:
    def act(admin: Admin, job: str, _who: str) -> BaseResponse:
        admin.mark_item_done(job, _field("key"))
        return _job_page(job, "done")

    return _act("done", act, key=request.form.get("key"))


@blueprint.post("/schedule/pause")
def pause_schedule() -> BaseResponse:
    def act(_admin: Admin, key: str, _who: str) -> BaseResponse:
        console().schedules.pause(key)
        return _schedule_page(key, "paused")

    return _act("pause", act, target="schedule")


@blueprint.post("/schedule/resume")
def resume_schedule() -> BaseResponse:
    def act(_admin: Admin, key: str, _who: str) -> BaseResponse:
        console().schedules.resume(key)
        return _schedule_page(key, "resumed")

    return _act("resume", act, target="schedule")


@blueprint.post("/schedule/delete")
def delete_schedule() -> BaseResponse:
    def act(_admin: Admin, key: str, _who: str) -> BaseResponse:
        if not console().schedules.delete(key):
            # Deleted meanwhile by someone else, or never there: say so, change nothing.
            raise ScheduleNotFoundError(f"schedule {key!r}: key: no such schedule")
        return redirect(url("pages.schedules", notice="deleted"), 303)

    return _act("delete", act, target="schedule")


def _act(action: str, act: Act, *, target: str = "job", **details: object) -> BaseResponse:
    """Check who asks, do it, log it; a refusal is a page with one line and no change.
    `target` is the form field naming what it acts on: a job, or a schedule's key."""
    subject = {target: request.form.get(target, "")}
    who = _authorized(action, subject)
    log = console().log.bind(actor=who.name, action=action, **subject, **details)
    try:
        response = act(console().admin, subject[target], who.name)
    except UserError as error:
        log.info("console_action", outcome="refused", error=str(error))
        page = render_template(
            "message.html", title=f"{action.capitalize()} refused", message=str(error)
        )
        return make_response(page, 400)
    log.info("console_action", outcome="done", location=response.headers.get("Location"))
    return response


def _authorized(action: str, subject: dict[str, str]) -> Actor:
    credentials = console().credentials
    if not credentials.configured:
        _deny(action, subject, "read-only", 403)
    who = actor()
    if who is None:
        # A script is challenged (401); a browser's form is answered with a page that
        # says to sign in, not a login dialog that would re-send a form without a token.
        _deny(action, subject, "no credentials", 403 if "form_token" in request.form else 401)
    assert who is not None
    if who.via is Via.BASIC and not _same_site(credentials.form_token(who)):
        _deny(action, subject, "form token or origin", 403)
    return who


def _same_site(token: str) -> bool:
    """A form this console served, posted from this console's own page."""
    given = request.form.get("form_token", "")
    if not hmac.compare_digest(given.encode(), token.encode()):
        return False
    if request.headers.get("Sec-Fetch-Site", "same-origin") not in ("same-origin", "none"):
        return False
    origin = request.headers.get("Origin")
    return origin is None or urlsplit(origin).netloc == request.host


REASONS = {
    "read-only": "This console is read-only: no credentials are configured "
    "(set SCHEDULER_CONSOLE_AUTH; see the docs' web console guide, how-to/console.md). "
    "Nothing was changed.",
    "no credentials": "Sign in to act (the link at the top right): this needs a name and "
    "secret from SCHEDULER_CONSOLE_AUTH. Nothing was changed.",
    "form token or origin": "This form is stale or came from another site: reload the page "
    "and try again. Nothing was changed.",
}


def _deny(action: str, subject: dict[str, str], reason: str, status: int) -> None:
    console().log.warning(
        "console_action_denied",
        action=action,
        **subject,
        reason=reason,
        remote=request.remote_addr,
    )
    page = render_template("message.html", title="Refused", message=REASONS[reason])
    response = make_response(page, status)
    if status == 401:
        response.headers["WWW-Authenticate"] = 'Basic realm="scheduler console", charset="UTF-8"'
    abort(response)


def _field(name: str) -> str:
    value = request.form.get(name, "").strip()
    if not value:
        raise UserError(f"{name}: required")
    return value


def _flag(name: str) -> bool:
    return request.form.get(name) in ("1", "on", "true")


def _job_page(job: str, notice: str) -> BaseResponse:
    return redirect(url("pages.job", name=job, notice=notice), 303)


def _deferred_page(job: str, notice: str) -> BaseResponse:
    """Back to the page the deferred periods were answered from: a job's, or a schedule
    created at run time's (its runs' job is `@KEY`)."""
    key = schedule_key(job)
    return _job_page(job, notice) if key is None else _schedule_page(key, notice)


def _schedule_page(key: str, notice: str) -> BaseResponse:
    return redirect(url("pages.schedule", key=key, notice=notice), 303)


def _request(request_id: str) -> BaseResponse:
    return redirect(url("pages.one_request", request_id=request_id), 303)
