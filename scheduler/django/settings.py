"""The scheduler's configuration read from the Django project's settings.

`DATABASES[alias]` becomes the scheduler's database URL (PostgreSQL or SQLite), each
installed app's `jobs` module its job modules, and the `SCHEDULER` dict the options the
`scheduler` command otherwise reads from `SCHEDULER_*` variables:

    SCHEDULER = {
        "DATABASE": "default",   # the alias in DATABASES (or DATABASE_URL: a URL)
        "JOBS": ["billing.jobs"],  # instead of every installed app's jobs.py
        "WORKERS": 8,              # any daemon option, as its SCHEDULER_ variable
    }

Pure functions of the settings' values: the management command applies them.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

from scheduler.errors import UserError

POSTGRES_ENGINES = frozenset(
    {"django.db.backends.postgresql", "django.contrib.gis.db.backends.postgis"}
)
SQLITE_ENGINES = frozenset(
    {"django.db.backends.sqlite3", "django.contrib.gis.db.backends.spatialite"}
)
# Keys of a PostgreSQL alias's OPTIONS that are Django's, not libpq's.
DJANGO_OPTIONS = frozenset(
    {"isolation_level", "server_side_binding", "pool", "assume_role", "cursor_factory", "context"}
)
# SCHEDULER keys that are not a daemon option.
OWN_KEYS = frozenset({"DATABASE", "DATABASE_URL", "JOBS"})
# Every option the `scheduler` commands read from a SCHEDULER_ variable (a unit test
# keeps the list equal to the variables the code reads).
OPTIONS = frozenset(
    {
        "CATCHUP_BUDGET",
        "CATCHUP_INTERVAL",
        "CONSOLE_AUTH",
        "CONSOLE_HTTP",
        "CONSOLE_USER_HEADER",
        "GRACE",
        "HEALTHZ_GRACE",
        "HTTP",
        "LIVENESS",
        "LOG_FORMAT",
        "LOG_LEVEL",
        "METRICS_PER_JOB",
        "MIGRATE",
        "NODE_NAME",
        "RECOVERY_INTERVAL",
        "RETENTION",
        "SENTRY_CRONS",
        "SENTRY_DSN",
        "SENTRY_ENVIRONMENT",
        "SUMMARY_INTERVAL",
        "TRACING",
        "WEBHOOK_EVENTS",
        "WEBHOOK_FORMAT",
        "WEBHOOK_RETRIES",
        "WEBHOOK_SECRET",
        "WEBHOOK_TIMEOUT",
        "WEBHOOK_URL",
        "WORKERS",
    }
)


def scheduler_settings(value: object) -> Mapping[str, Any]:
    """The `SCHEDULER` setting, checked: a dict of known keys."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise UserError(f"settings.SCHEDULER: must be a dict, got {type(value).__name__}")
    for key in value:
        if key not in OPTIONS and key not in OWN_KEYS:
            known = ", ".join(sorted(OWN_KEYS | OPTIONS))
            raise UserError(f"settings.SCHEDULER[{key!r}]: unknown option (one of: {known})")
    return value


def database_url(databases: Mapping[str, Mapping[str, Any]], scheduler: Mapping[str, Any]) -> str:
    """The scheduler's database URL: `SCHEDULER["DATABASE_URL"]` if given, else the one
    `DATABASES[SCHEDULER.get("DATABASE", "default")]` describes."""
    explicit = scheduler.get("DATABASE_URL")
    if explicit is not None:
        if not isinstance(explicit, str) or not explicit:
            raise UserError("settings.SCHEDULER['DATABASE_URL']: must be a database URL")
        return explicit
    alias = scheduler.get("DATABASE", "default")
    if alias not in databases:
        raise UserError(
            f"settings.SCHEDULER['DATABASE']: no database {alias!r} in DATABASES "
            f"(one of: {', '.join(sorted(databases)) or 'none'})"
        )
    return url_of(alias, databases[alias])


def url_of(alias: str, database: Mapping[str, Any]) -> str:
    """One `DATABASES` entry as a scheduler database URL."""
    engine = str(database.get("ENGINE", ""))
    if engine in POSTGRES_ENGINES:
        return _postgres_url(alias, database)
    if engine in SQLITE_ENGINES:
        return _sqlite_url(alias, database)
    raise UserError(
        f"DATABASES[{alias!r}]['ENGINE']: {engine or 'none'} is not supported; the "
        "scheduler runs on PostgreSQL or SQLite"
    )


def _postgres_url(alias: str, database: Mapping[str, Any]) -> str:
    options = database.get("OPTIONS") or {}
    query: dict[str, str] = {}
    for key, value in options.items():
        if (
            key not in DJANGO_OPTIONS
            and isinstance(value, str | int)
            and not isinstance(value, bool)
        ):
            query[key] = str(value)
    user, password = str(database.get("USER") or ""), str(database.get("PASSWORD") or "")
    host, port = str(database.get("HOST") or ""), str(database.get("PORT") or "")
    name = str(database.get("NAME") or "")
    if not name and "service" not in query:
        raise UserError(f"DATABASES[{alias!r}]['NAME']: the scheduler needs a database name")
    if host.startswith("/"):  # a Unix socket's folder: libpq takes it as a parameter
        query["host"], host = host, ""
    credentials = quote(user, safe="")
    if password:
        credentials += ":" + quote(password, safe="")
    netloc = f"{credentials}@" if credentials else ""
    netloc += f"[{host}]" if ":" in host else host
    if port:
        netloc += f":{port}"
    url = f"postgresql://{netloc}/{quote(name, safe='')}"
    return f"{url}?{urlencode(query)}" if query else url


def in_memory(database: Mapping[str, Any]) -> bool:
    """An in-memory SQLite database (Django's test database on SQLite, by default): no
    other connection, the scheduler's included, can hold its tables."""
    name = str(database.get("NAME") or "")
    return str(database.get("ENGINE", "")) in SQLITE_ENGINES and (
        name == ":memory:" or "mode=memory" in name
    )


def _sqlite_url(alias: str, database: Mapping[str, Any]) -> str:
    name = str(database.get("NAME") or "")
    if not name or name == ":memory:" or name.startswith("file:"):
        raise UserError(
            f"DATABASES[{alias!r}]['NAME']: the scheduler needs a SQLite file, got {name!r}"
        )
    return f"sqlite:///{Path(name).absolute()}"


def job_modules(scheduler: Mapping[str, Any], apps: Iterable[str]) -> list[str]:
    """`SCHEDULER["JOBS"]` if given, else the `jobs` module of each installed app (by
    its module name, in `INSTALLED_APPS` order) that has one."""
    explicit = scheduler.get("JOBS")
    if explicit is not None:
        if isinstance(explicit, str) or not all(isinstance(name, str) for name in explicit):
            raise UserError(
                "settings.SCHEDULER['JOBS']: must be a list of module names, e.g. ['billing.jobs']"
            )
        return list(explicit)
    return [f"{app}.jobs" for app in apps if _has_jobs(app)]


def _has_jobs(app: str) -> bool:
    if app == "scheduler.django":
        return False
    try:
        return importlib.util.find_spec(f"{app}.jobs") is not None
    except ImportError:
        return False


def environment(
    databases: Mapping[str, Mapping[str, Any]], scheduler_value: object, apps: Iterable[str]
) -> dict[str, str]:
    """The `SCHEDULER_*` variables the `scheduler` command reads, from the settings."""
    scheduler = scheduler_settings(scheduler_value)
    variables = {"SCHEDULER_DATABASE_URL": database_url(databases, scheduler)}
    modules = job_modules(scheduler, apps)
    if modules:
        variables["SCHEDULER_JOBS"] = ",".join(modules)
    for key, value in scheduler.items():
        if key in OPTIONS:
            variables[f"SCHEDULER_{key}"] = _text(value)
    return variables


def _text(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
