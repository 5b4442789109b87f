"""Running a job's periods on a task queue: what the node sends, and to whom.

The node that wins a claim does not call the function: it marks the run `queued`
and sends one `TaskMessage` carrying the run's identity and fence. A worker that
receives it starts the run under that fence (`store.handoff.take`), and from then on
holds it like a node would. Pure data and a protocol here, so that the registry, the
run path and the node know a remote job without importing a task queue; the Celery
binding is `scheduler.celery`, and Dramatiq or RQ would plug in alike.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from scheduler.states import Origin

# The message's layout: a worker refuses (and acknowledges) a version it does not know.
MESSAGE_VERSION = 1


class RemoteError(Exception):
    """A message could not be sent (the broker refused it or could not be reached)."""


class Remote(Protocol):
    """A checked task-queue binding of one job: where its messages go, and how long one
    may wait there before the period is sent again as the next attempt."""

    @property
    def queue(self) -> str: ...

    @property
    def deadline_s(self) -> float: ...

    @property
    def kind(self) -> str:
        """The queue system's name (`celery`), for logs and the console."""

    def send(self, message: TaskMessage) -> None:
        """Publish one message; raise `RemoteError` when it was not sent."""


class Declared(Protocol):
    """What `@job(executor=...)` takes: checked once the job's name is known, so that a
    mistake names the job and the field."""

    def checked(self, job: str) -> Remote: ...


@dataclass(frozen=True)
class TaskMessage:
    """One attempt of one run, as sent to a worker: its identity and its fence."""

    job: str
    period: datetime
    run_id: str
    attempt: int
    holder: str
    origin: Origin
    deadline_s: float
    # The sender's trace context (W3C `traceparent`, `tracestate`), sent as the message's
    # headers rather than in its body; empty when nothing traces the run.
    trace: Mapping[str, str] = field(default_factory=dict, compare=False)

    @property
    def task_id(self) -> str:
        """The same for every copy of this attempt's message, new for the next attempt."""
        return f"{self.run_id}.{self.attempt}"

    def as_kwargs(self) -> dict[str, Any]:
        """The message body: JSON-safe values only."""
        return {
            "v": MESSAGE_VERSION,
            "job": self.job,
            "period": self.period.isoformat(),
            "run_id": self.run_id,
            "attempt": self.attempt,
            "holder": self.holder,
            "origin": self.origin.value,
            "deadline_s": self.deadline_s,
        }

    @classmethod
    def from_kwargs(
        cls, body: dict[str, Any], trace: Mapping[str, str] | None = None
    ) -> TaskMessage:
        """Read a body (and the headers' trace context) back; ValueError (saying what is
        wrong) for one we cannot use."""
        if body.get("v") != MESSAGE_VERSION:
            raise ValueError(f"message version {body.get('v')!r}, this worker reads 1")
        try:
            period = datetime.fromisoformat(str(body["period"]))
            message = cls(
                job=str(body["job"]),
                period=period,
                run_id=str(body["run_id"]),
                attempt=int(body["attempt"]),
                holder=str(body["holder"]),
                origin=Origin(body["origin"]),
                deadline_s=float(body["deadline_s"]),
                trace=dict(trace or {}),
            )
        except (KeyError, TypeError) as error:
            raise ValueError(f"malformed message: {error!r}") from None
        if period.tzinfo is None:
            raise ValueError("malformed message: the period has no time zone")
        return message
