"""Cron jobs that run once per period across any number of replicas, and lose none."""

from scheduler.context import RunContext
from scheduler.registry import Job, job

__all__ = ["Job", "RunContext", "job"]
