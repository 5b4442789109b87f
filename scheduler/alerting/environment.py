"""The alerting a daemon takes from its environment, read once at start-up: a webhook
for every job, Sentry Crons, OpenTelemetry. A bad value is one error naming the
variable, before anything runs."""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from typing import TypeVar

from scheduler import hooks
from scheduler.alerting.observer import RunObserver
from scheduler.alerting.webhook import Webhook
from scheduler.errors import UserError
from scheduler.states import EventKind

# Every kind but `retrying` (an attempt that will be tried again is seldom news).
DEFAULT_WEBHOOK_EVENTS = tuple(kind for kind in EventKind if kind is not EventKind.RETRYING)
SWITCH = ("auto", "on", "off")
N = TypeVar("N", int, float)


def webhook(environ: Mapping[str, str]) -> tuple[Webhook, list[EventKind]] | None:
    """`SCHEDULER_WEBHOOK_URL` and friends as a webhook and the kinds it hears; None when
    the URL is not set."""
    url = environ.get("SCHEDULER_WEBHOOK_URL", "").strip()
    if not url:
        return None
    timeout = _number(environ, "SCHEDULER_WEBHOOK_TIMEOUT", "10", float)
    retries = _number(environ, "SCHEDULER_WEBHOOK_RETRIES", "5", int)
    hook = Webhook(
        url,
        secret=environ.get("SCHEDULER_WEBHOOK_SECRET") or None,
        format=environ.get("SCHEDULER_WEBHOOK_FORMAT", "json").strip().lower(),
        timeout=timeout,
        retries=retries,
    )
    problem = hook.problem()
    if problem:
        raise UserError(f"SCHEDULER_WEBHOOK_*: {problem}")
    raw = environ.get("SCHEDULER_WEBHOOK_EVENTS", "").strip()
    try:
        kinds = [hooks.kind_of(part.strip()) for part in raw.split(",") if part.strip()]
    except UserError as error:
        raise UserError(f"SCHEDULER_WEBHOOK_EVENTS: {error}") from None
    return hook, kinds or list(DEFAULT_WEBHOOK_EVENTS)


def _number(environ: Mapping[str, str], name: str, default: str, kind: type[N]) -> N:
    raw = environ.get(name, default).strip()
    try:
        return kind(raw)
    except ValueError:
        raise UserError(f"{name}: {raw!r} is not a number") from None


def _switch(environ: Mapping[str, str], name: str) -> str:
    value = environ.get(name, "auto").strip().lower() or "auto"
    if value not in SWITCH:
        raise UserError(f"{name}: {value!r} is not one of: {', '.join(SWITCH)}")
    return value


def _wants_sentry(environ: Mapping[str, str]) -> bool:
    crons = _switch(environ, "SCHEDULER_SENTRY_CRONS")
    return crons == "on" or bool(environ.get("SCHEDULER_SENTRY_DSN", "").strip() and crons != "off")


def check(environ: Mapping[str, str]) -> None:
    """The UserError `observers` would raise, without setting anything up (a Celery
    worker checks at its start, before its pool forks)."""
    if _wants_sentry(environ) and importlib.util.find_spec("sentry_sdk") is None:
        raise UserError(
            "SCHEDULER_SENTRY_DSN: sentry-sdk is not installed (pip install 'cronclaim[sentry]')"
        )
    tracing = _switch(environ, "SCHEDULER_TRACING")
    if tracing == "on" and importlib.util.find_spec("opentelemetry") is None:
        raise UserError(
            "SCHEDULER_TRACING: opentelemetry-api is not installed (pip install 'cronclaim[otel]')"
        )


def observers(environ: Mapping[str, str]) -> list[RunObserver]:
    """Sentry Crons when `SCHEDULER_SENTRY_DSN` is set (or `SCHEDULER_SENTRY_CRONS=on`, with
    the SDK the job modules set up); tracing when OpenTelemetry is installed, unless
    `SCHEDULER_TRACING=off`."""
    check(environ)
    found: list[RunObserver] = []
    if _wants_sentry(environ):
        from scheduler.alerting import sentry  # noqa: PLC0415 - an optional extra

        dsn = environ.get("SCHEDULER_SENTRY_DSN", "").strip()
        if dsn:
            sentry.init_from_dsn(dsn, environ.get("SCHEDULER_SENTRY_ENVIRONMENT") or None)
        found.append(sentry.SentryCrons())
    tracing = _switch(environ, "SCHEDULER_TRACING")
    if tracing != "off" and importlib.util.find_spec("opentelemetry") is not None:
        from scheduler.alerting.tracing import Tracing  # noqa: PLC0415 - an optional extra

        found.append(Tracing())
    return found


def configure(environ: Mapping[str, str]) -> list[RunObserver]:
    """Install the environment's webhook as a global hook; the run observers to use."""
    found = webhook(environ)
    if found is not None:
        hook, kinds = found
        for kind in kinds:
            hooks.add_global(kind, hook)
    return observers(environ)
