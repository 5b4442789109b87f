"""200 every-second jobs whose bodies take 10 ms, each noting when it began and ended:
a claim that stalls behind a frozen node leaves a backlog, and a skip is justified only
by a body that ran when its period fell due."""

from __future__ import annotations

import time

from scheduler import RunContext, job
from tests.acceptance.jobmods.evidence import note

STAMPEDE = 200


def _body(ctx: RunContext) -> None:
    began = time.time()
    time.sleep(0.01)
    note(ctx, f"ran={began:.6f},{time.time():.6f}")


for _number in range(STAMPEDE):
    globals()[f"stampede_{_number:03}"] = job("* * * * * *", name=f"stampede-{_number:03}")(_body)
