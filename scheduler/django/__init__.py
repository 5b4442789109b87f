"""The Django app (`cronclaim[django]`): add `"scheduler.django"` to `INSTALLED_APPS`.

`python manage.py scheduler …` is the `scheduler` command on the project's own
`DATABASES`, with the jobs of each installed app's `jobs.py`; `manage.py migrate` brings
the scheduler's tables to this version's head; `ctx.once(key, connection=connection)`
inside `transaction.atomic()` commits the record with the ORM's rows; and the admin
shows jobs, runs, items and schedules. The guide is docs/how-to/django.md.

Named `scheduler.django` beside `scheduler.celery`: one package per framework the
scheduler binds to, importable only with its extra installed.
"""


def database_url() -> str:
    """The scheduler's database URL on this project's settings (`SCHEDULER` and
    `DATABASES`, as `manage.py scheduler` reads them): what the project's own code gives
    `Schedules(...)` or `Admin(...)`, in a view or an admin action."""
    from django.conf import settings  # noqa: PLC0415 - the app module loads before the settings

    from scheduler.django import settings as read  # noqa: PLC0415

    scheduler = read.scheduler_settings(getattr(settings, "SCHEDULER", None))
    return read.database_url(settings.DATABASES, scheduler)
