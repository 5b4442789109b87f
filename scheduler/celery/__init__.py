"""Running a job's periods on Celery workers, each period once (the `celery` extra).

On the node: `@job(cron=..., executor=celery(app=..., queue=...))` makes the node that
wins a period's claim send one task message (`scheduler.run`) instead of calling the
function. On the worker: `install(app, jobs=[...])` in the module `celery -A` loads
registers that task; each delivery starts the run under the message's fence, renews
its lease while the function runs, and writes the outcome fenced, like a node.
"""

from __future__ import annotations

from scheduler.celery.executor import TASK_NAME, CeleryExecution, celery
from scheduler.celery.worker import install

__all__ = ["TASK_NAME", "CeleryExecution", "celery", "install"]
