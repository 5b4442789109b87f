"""What the example writes: one invoice per period through the ORM, and the tenants whose
weekly report the admin schedules."""

from __future__ import annotations

from datetime import datetime

from django.db import models


class Invoice(models.Model):
    # No unique constraint on purpose: the example's test counts the rows of a period,
    # so a second body writing one would show as a duplicate, not as an error.
    period: models.DateTimeField[datetime, datetime] = models.DateTimeField()
    run_id: models.CharField[str, str] = models.CharField(max_length=32)
    attempt: models.IntegerField[int, int] = models.IntegerField()
    node: models.CharField[str, str] = models.CharField(max_length=200)

    def __str__(self) -> str:
        return f"invoice for {self.period.isoformat()}"


class Tenant(models.Model):
    """A customer of the project. Its weekly report is a schedule of the `tenant-report`
    template, created and paused from the tenant's admin (`billing/admin.py`) in the
    same transaction as `weekly_report`."""

    name: models.CharField[str, str] = models.CharField(max_length=200)
    weekly_report: models.BooleanField[bool, bool] = models.BooleanField(default=False)

    def __str__(self) -> str:
        return self.name

    @property
    def report_key(self) -> str:
        """The key of its report's schedule."""
        return f"tenant-{self.pk}:report"
