"""The scheduler's configuration from a Django project's settings: the database URL from
DATABASES, the job modules from the installed apps, the SCHEDULER dict's options."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from scheduler.django import settings
from scheduler.errors import UserError
from scheduler.store.urls import parse_database_url

POSTGRES = "django.db.backends.postgresql"
SCHEDULER_PACKAGE = Path(settings.__file__).resolve().parents[1]


@pytest.mark.parametrize(
    ("entry", "url"),
    [
        (
            {"ENGINE": POSTGRES, "NAME": "shop", "USER": "app", "HOST": "db", "PORT": 5433},
            "postgresql://app@db:5433/shop",
        ),
        (  # a password with the URL's own characters, and libpq options
            {
                "ENGINE": POSTGRES,
                "NAME": "shop",
                "USER": "app",
                "PASSWORD": "p@ss:w/rd",
                "HOST": "db",
                "OPTIONS": {"sslmode": "require", "connect_timeout": 5, "pool": True},
            },
            "postgresql://app:p%40ss%3Aw%2Frd@db/shop?sslmode=require&connect_timeout=5",
        ),
        (  # a Unix socket's folder, and Django's own options left out
            {
                "ENGINE": POSTGRES,
                "NAME": "shop",
                "HOST": "/run/postgresql",
                "OPTIONS": {"server_side_binding": True, "isolation_level": 2},
            },
            "postgresql:///shop?host=%2Frun%2Fpostgresql",
        ),
        (
            {"ENGINE": "django.contrib.gis.db.backends.postgis", "NAME": "geo", "HOST": "::1"},
            "postgresql://[::1]/geo",
        ),
        (
            {"ENGINE": POSTGRES, "NAME": "", "OPTIONS": {"service": "shop"}},
            "postgresql:///?service=shop",
        ),
    ],
)
def test_a_postgresql_entry_becomes_a_url_libpq_reads(entry: dict[str, object], url: str) -> None:
    assert settings.url_of("default", entry) == url
    assert parse_database_url(url).is_postgres


def test_a_sqlite_entry_becomes_its_files_absolute_url(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    url = settings.url_of("default", {"ENGINE": "django.db.backends.sqlite3", "NAME": "db.sqlite3"})
    assert url == f"sqlite:///{tmp_path / 'db.sqlite3'}"
    assert parse_database_url(url).path == str(tmp_path / "db.sqlite3")


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        (
            {"ENGINE": "django.db.backends.mysql", "NAME": "shop"},
            "DATABASES['default']['ENGINE']: django.db.backends.mysql is not supported; "
            "the scheduler runs on PostgreSQL or SQLite",
        ),
        (
            {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"},
            "DATABASES['default']['NAME']: the scheduler needs a SQLite file, got ':memory:'",
        ),
        (
            {"ENGINE": POSTGRES, "NAME": ""},
            "DATABASES['default']['NAME']: the scheduler needs a database name",
        ),
    ],
)
def test_an_entry_the_scheduler_cannot_use_is_one_line(
    entry: dict[str, object], message: str
) -> None:
    with pytest.raises(UserError) as raised:
        settings.url_of("default", entry)
    assert str(raised.value) == message


def test_the_alias_and_an_explicit_url_choose_the_database() -> None:
    databases = {
        "default": {"ENGINE": POSTGRES, "NAME": "shop"},
        "jobs": {"ENGINE": POSTGRES, "NAME": "jobs"},
    }
    assert settings.database_url(databases, {}) == "postgresql:///shop"
    assert settings.database_url(databases, {"DATABASE": "jobs"}) == "postgresql:///jobs"
    explicit = {"DATABASE_URL": "postgresql://x@y/z"}
    assert settings.database_url(databases, explicit) == "postgresql://x@y/z"


def test_each_installed_apps_jobs_module_is_found_unless_the_setting_names_them() -> None:
    apps = ["json", "tests.soak", "scheduler.django", "no.such.app"]
    assert settings.job_modules({}, apps) == ["tests.soak.jobs"]
    assert settings.job_modules({"JOBS": ["a.jobs", "b"]}, apps) == ["a.jobs", "b"]


def test_the_options_become_the_variables_the_commands_read() -> None:
    databases = {"default": {"ENGINE": POSTGRES, "NAME": "shop"}}
    variables = settings.environment(
        databases, {"WORKERS": 8, "MIGRATE": True, "GRACE": "10s"}, ["tests.soak"]
    )
    assert variables == {
        "SCHEDULER_DATABASE_URL": "postgresql:///shop",
        "SCHEDULER_JOBS": "tests.soak.jobs",
        "SCHEDULER_WORKERS": "8",
        "SCHEDULER_MIGRATE": "true",
        "SCHEDULER_GRACE": "10s",
    }
    # No app with jobs: the command's own default and error stand.
    assert "SCHEDULER_JOBS" not in settings.environment(databases, None, ["json"])


def test_a_setting_that_is_not_a_dict_is_refused() -> None:
    with pytest.raises(UserError, match=r"^settings.SCHEDULER: must be a dict, got list$"):
        settings.scheduler_settings(["WORKERS"])


def test_every_variable_the_code_reads_is_an_option_of_the_setting() -> None:
    read = set()
    for path in SCHEDULER_PACKAGE.rglob("*.py"):
        if "django" not in path.parts:
            read |= set(re.findall(r'"SCHEDULER_([A-Z_]+)"', path.read_text()))
    assert read - {"DATABASE_URL", "JOBS"} == settings.OPTIONS
