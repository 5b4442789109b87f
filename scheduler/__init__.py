"""Cron jobs that run once per period across any number of replicas, and lose none."""

from scheduler.errors import RunLostError
from scheduler.registry import Job, job
from scheduler.run.context import RunContext

__all__ = ["Job", "RunContext", "RunLostError", "job"]
