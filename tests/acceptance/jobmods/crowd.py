"""150 jobs due together every five seconds: instants large enough for a node to prepare
them ahead (`scheduler.node.daemon.PREPARE_MIN`). Each run notes when its body began.
The jobs are made in a loop and bound to module-level names, which the loader collects."""

from __future__ import annotations

import time

from scheduler import RunContext, job
from tests.acceptance.jobmods.evidence import note

CROWD = 150


def _body(ctx: RunContext) -> None:
    note(ctx, f"began={time.time():.6f}")


for _number in range(CROWD):
    globals()[f"crowd_{_number:03}"] = job("*/5 * * * * *", name=f"crowd-{_number:03}")(_body)
