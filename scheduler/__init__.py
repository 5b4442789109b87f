"""Cron jobs that run once per period across any number of replicas, and lose none."""

from scheduler.errors import RunLostError
from scheduler.hooks import on_event
from scheduler.model import Event
from scheduler.registry import Job, job
from scheduler.run.context import RunContext

__all__ = ["Event", "Job", "RunContext", "RunLostError", "job", "on_event"]
