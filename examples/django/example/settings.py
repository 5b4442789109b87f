"""Settings of the example project: one app (`billing`) whose `jobs.py` the scheduler
finds, on the database `EXAMPLE_DATABASE_URL` names (`postgresql://…` for replicas, or
`sqlite:///path`; the SQLite file `db.sqlite3` here when unset)."""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import unquote, urlsplit

BASE_DIR = Path(__file__).resolve().parent.parent
SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "example-only-not-secret")
DEBUG = False
ALLOWED_HOSTS = ["localhost", "127.0.0.1"]
USE_TZ = True
TIME_ZONE = "UTC"
ROOT_URLCONF = "example.urls"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "scheduler.django",
    "billing",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]


def _database(url: str) -> dict[str, object]:
    """A PostgreSQL URL as a DATABASES entry (a project would use dj-database-url)."""
    parts = urlsplit(url)
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": unquote(parts.path.lstrip("/")),
        "USER": unquote(parts.username or ""),
        "PASSWORD": unquote(parts.password or ""),
        "HOST": parts.hostname or "",
        "PORT": str(parts.port or ""),
    }


_URL = os.environ.get("EXAMPLE_DATABASE_URL", "")
if _URL.startswith(("postgresql://", "postgres://")):
    DATABASES = {"default": _database(_URL)}
else:
    _FILE = Path(_URL.removeprefix("sqlite:///")) if _URL else BASE_DIR / "db.sqlite3"
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": _FILE,
            # `manage.py test`: a file beside it, not memory (billing/tests.py moves
            # Django to the scheduler harness's file during a test, then back).
            "TEST": {"NAME": _FILE.with_name(f"test-{_FILE.name}")},
        }
    }

# The scheduler's own options, as its SCHEDULER_* variables would give them.
SCHEDULER = {
    "WORKERS": 4,
    "GRACE": "10s",
}
