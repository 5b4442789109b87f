"""The scheduler's tables as unmanaged models, for the admin to read.

`managed = False`: Django never creates, changes or drops them (the scheduler's Alembic
revisions do, through `manage.py migrate`; see `scheduler.django.schema`), and this app
has no Django migrations. The models are for reading: every change goes through the
scheduler's API (`scheduler.admin.Admin`, `scheduler.schedules.Schedules`), which keeps
the rules a row alone does not (a pause's record, a schedule's next period). Only the
columns the admin shows are declared.
"""

from __future__ import annotations

from datetime import datetime

from django.db import models


class Job(models.Model):
    name: models.CharField[str, str] = models.CharField(max_length=200, primary_key=True)
    cron: models.CharField[str, str] = models.CharField(max_length=200)
    timezone: models.CharField[str, str] = models.CharField(max_length=64)
    paused: models.BooleanField[bool, bool] = models.BooleanField()
    pause_reason: models.TextField[str | None, str | None] = models.TextField(null=True)
    first_seen: models.DateTimeField[datetime, datetime] = models.DateTimeField()
    last_seen: models.DateTimeField[datetime, datetime] = models.DateTimeField()
    retries: models.IntegerField[int | None, int | None] = models.IntegerField(null=True)

    class Meta:
        managed = False
        db_table = "scheduler_jobs"
        ordering = ("name",)

    def __str__(self) -> str:
        return self.name


class Run(models.Model):
    id: models.CharField[str, str] = models.CharField(max_length=32, primary_key=True)
    job: models.CharField[str, str] = models.CharField(max_length=200)
    period: models.DateTimeField[datetime, datetime] = models.DateTimeField()
    status: models.CharField[str, str] = models.CharField(max_length=16)
    reason: models.CharField[str | None, str | None] = models.CharField(max_length=16, null=True)
    origin: models.CharField[str, str] = models.CharField(max_length=16)
    attempt: models.IntegerField[int, int] = models.IntegerField()
    holder: models.CharField[str | None, str | None] = models.CharField(max_length=200, null=True)
    claimed_at: models.DateTimeField[datetime, datetime] = models.DateTimeField()
    started_at: models.DateTimeField[datetime | None, datetime | None] = models.DateTimeField(
        null=True
    )
    finished_at: models.DateTimeField[datetime | None, datetime | None] = models.DateTimeField(
        null=True
    )
    duration_ms: models.IntegerField[int | None, int | None] = models.IntegerField(null=True)
    error_type: models.CharField[str | None, str | None] = models.CharField(
        max_length=200, null=True
    )
    error_message: models.TextField[str | None, str | None] = models.TextField(null=True)
    error_traceback: models.TextField[str | None, str | None] = models.TextField(null=True)

    class Meta:
        managed = False
        db_table = "scheduler_runs"
        ordering = ("-period", "job")

    def __str__(self) -> str:
        return f"{self.job} {self.period.isoformat()}"


class Item(models.Model):
    """An item is named by (job, key); Django 4.2 has no composite key, so `key` stands
    for it: the admin lists items and links to none (`ItemAdmin`)."""

    key: models.CharField[str, str] = models.CharField(max_length=500, primary_key=True)
    job: models.CharField[str, str] = models.CharField(max_length=200)
    state: models.CharField[str, str] = models.CharField(max_length=16)
    period: models.DateTimeField[datetime, datetime] = models.DateTimeField()
    run_id: models.CharField[str, str] = models.CharField(max_length=32)
    attempt: models.IntegerField[int, int] = models.IntegerField()
    node: models.CharField[str | None, str | None] = models.CharField(max_length=200, null=True)
    claimed_at: models.DateTimeField[datetime, datetime] = models.DateTimeField()
    done_at: models.DateTimeField[datetime | None, datetime | None] = models.DateTimeField(
        null=True
    )

    class Meta:
        managed = False
        db_table = "scheduler_items"
        ordering = ("-claimed_at",)

    def __str__(self) -> str:
        return f"{self.job} {self.key}"


class Schedule(models.Model):
    key: models.CharField[str, str] = models.CharField(max_length=190, primary_key=True)
    job: models.CharField[str, str] = models.CharField(max_length=200)
    trigger: models.CharField[str, str] = models.CharField(max_length=8)
    cron: models.CharField[str | None, str | None] = models.CharField(
        max_length=200, null=True, blank=True
    )
    timezone: models.CharField[str, str] = models.CharField(max_length=64, default="UTC")
    every_seconds: models.IntegerField[int | None, int | None] = models.IntegerField(
        null=True, blank=True
    )
    args: models.TextField[str, str] = models.TextField(default="{}")
    paused: models.BooleanField[bool, bool] = models.BooleanField(default=False)
    next_due_at: models.DateTimeField[datetime | None, datetime | None] = models.DateTimeField(
        null=True
    )
    created_at: models.DateTimeField[datetime, datetime] = models.DateTimeField()
    deleted_at: models.DateTimeField[datetime | None, datetime | None] = models.DateTimeField(
        null=True
    )

    class Meta:
        managed = False
        db_table = "scheduler_schedules"
        ordering = ("key",)

    def __str__(self) -> str:
        return self.key
