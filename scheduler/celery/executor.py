"""`celery(...)`: a job's declaration that its periods run on Celery, and the sending.

Checked when the job is declared (errors name the job and the field `executor.<name>`).
The Celery app may be given as the object or as `"module:attribute"`, imported on the
first send (a jobs module may then be imported by the app's own module without a cycle).
Nothing here imports Celery: the node needs it only to send, through the app it is given.
"""

from __future__ import annotations

import importlib
import re
import threading
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from scheduler.durations import Duration
from scheduler.errors import JobDefinitionError
from scheduler.policy import MIN_LEASE, duration
from scheduler.remote import RemoteError, TaskMessage

# The one task every message names; `install` registers it on the worker's app.
TASK_NAME = "scheduler.run"
# How long a message may wait in the queue, by default, before its period is sent again.
DEFAULT_DEADLINE = "60s"
# A message's broker TTL, this much past its deadline. Relative, and counted by the broker
# from the enqueue (RabbitMQ's per-message `expiration`; Redis keeps none): it only drops
# a copy whose run was retaken by then. Celery's `expires` is not used: it travels as an
# absolute time on the sender's clock, which a worker compares with its own, and a node
# whose host clock is behind sent messages that arrived expired. The fence already
# refuses a stale copy, whatever the clocks say.
TTL_SLACK_S = 30.0
# Kombu's retries of one publish while the broker reconnects (about 1.5 s in all); past
# them the send has failed and the period is sent again a moment later (see run.remote).
RETRY_POLICY = {"max_retries": 3, "interval_start": 0.1, "interval_step": 0.4, "interval_max": 1}
_APP_PATH = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")


@dataclass(frozen=True)
class CeleryDeclaration:
    """What `celery(...)` returns; `@job` checks it once it knows the job's name."""

    app: object
    queue: object
    routing_key: object
    priority: object
    deadline: object

    def checked(self, job: str) -> CeleryExecution:
        return CeleryExecution(
            app_ref=_check_app(job, self.app),
            queue=_check_name(job, "queue", self.queue),
            routing_key=(
                None
                if self.routing_key is None
                else _check_name(job, "routing_key", self.routing_key)
            ),
            priority=_check_priority(job, self.priority),
            deadline_s=_check_deadline(job, self.deadline),
        )


def celery(
    app: object,
    *,
    queue: str = "celery",
    routing_key: str | None = None,
    priority: int | None = None,
    deadline: Duration = DEFAULT_DEADLINE,
) -> CeleryDeclaration:
    """Run the job's periods on Celery workers of `app` that consume `queue`.

    `deadline`: how long a message may wait for a worker to start it; past it the
    period is sent again as the next attempt and a late copy is refused as stale.
    """
    return CeleryDeclaration(app, queue, routing_key, priority, deadline)


@dataclass(frozen=True)
class CeleryExecution:
    """A job's checked Celery binding: the `Remote` the node sends through."""

    app_ref: object
    queue: str
    routing_key: str | None
    priority: int | None
    deadline_s: float
    _resolved: list[Any] = field(default_factory=list, compare=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, compare=False, repr=False)

    @property
    def kind(self) -> str:
        return "celery"

    @property
    def app(self) -> Any:
        """The Celery app, imported from its path on first use."""
        with self._lock:
            if not self._resolved:
                self._resolved.append(_resolve(self.app_ref))
            return self._resolved[0]

    def send(self, message: TaskMessage) -> None:
        options: dict[str, Any] = {"queue": self.queue}
        if self.routing_key is not None:
            options["routing_key"] = self.routing_key
        if self.priority is not None:
            options["priority"] = self.priority
        if message.trace:  # the sender's trace context, where Celery tracing looks for it
            options["headers"] = dict(message.trace)
        try:
            self.app.send_task(
                TASK_NAME,
                kwargs=message.as_kwargs(),
                task_id=message.task_id,
                expiration=message.deadline_s + TTL_SLACK_S,
                retry=True,
                retry_policy=RETRY_POLICY,
                **options,
            )
        except Exception as error:
            raise RemoteError(f"{type(error).__name__}: {error}") from error


def _resolve(reference: object) -> Any:
    if not isinstance(reference, str):
        return reference
    module_name, _, attribute = reference.partition(":")
    target: Any = importlib.import_module(module_name)
    for part in attribute.split("."):
        target = getattr(target, part)
    return target


def _check_app(job: str, app: object) -> object:
    if isinstance(app, str):
        if not _APP_PATH.match(app):
            raise JobDefinitionError(
                job, "executor.app", f"must be a Celery app or 'module:attribute', got {app!r}"
            )
        return app
    if not callable(getattr(app, "send_task", None)):
        raise JobDefinitionError(
            job, "executor.app", f"must be a Celery app or 'module:attribute', got {app!r}"
        )
    return app


def _check_name(job: str, field_name: str, value: object) -> str:
    if not isinstance(value, str) or not value.strip() or len(value) > 200:
        raise JobDefinitionError(
            job,
            f"executor.{field_name}",
            f"must be a non-empty name of ≤ 200 characters, got {value!r}",
        )
    return value


def _check_priority(job: str, value: object) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 255:
        raise JobDefinitionError(
            job, "executor.priority", f"must be a whole number from 0 to 255, got {value!r}"
        )
    return value


def _check_deadline(job: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, str | int | float | timedelta):
        raise JobDefinitionError(job, "executor.deadline", f"must be a duration, got {value!r}")
    return duration(job, "executor.deadline", value, minimum=MIN_LEASE).total_seconds()
