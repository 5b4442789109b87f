"""`restart_probe` with a body that never looks at `ctx.cancelled`. It runs its
`body_seconds()`, or ends sooner once the file `BODY_RELEASE` names (when set) exists:
a test that has seen all it waits for lets it end then, not seconds later."""

from __future__ import annotations

import os
import time
from pathlib import Path

from scheduler import RunContext, job
from tests.acceptance.jobmods.evidence import note
from tests.acceptance.jobmods.partition_body import body_seconds, probe_cron


@job(cron=probe_cron(), name="restart-probe")
def restart_probe(ctx: RunContext) -> None:
    note(ctx, f"pid={os.getpid()}")
    note(ctx, f"start@{time.time():.3f}")
    _sleep(body_seconds())
    note(ctx, f"done@{time.time():.3f}")


def _sleep(seconds: float) -> None:
    release = os.environ.get("BODY_RELEASE")
    if not release:
        time.sleep(seconds)
        return
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0 and not Path(release).exists():
        time.sleep(min(left, 0.05))
