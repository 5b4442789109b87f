"""Four jobs in one pool of 3 with one run per key at once: two of tenant a's, one of
b's, one of c's, each every 2 s with a 1.5 s body that notes when it began and ended.
Tenant a asks for more than its key allows; b and c must not wait behind it. A 4 s lease:
a killed holder's slot frees within seconds on SQLite too (no liveness lock there)."""

from __future__ import annotations

import os
import time

from scheduler import Pool, RunContext, job
from tests.acceptance.jobmods.evidence import note

TENANTS = Pool("tenants", limit=3, per_key=1)
BODY_S = float(os.environ.get("POOLED_BODY_S", "1.5"))
EVERY_2S = "*/2 * * * * *"


def _body(ctx: RunContext) -> None:
    note(ctx, f"start@{time.time():.3f}")
    time.sleep(BODY_S)
    note(ctx, f"done@{time.time():.3f}")


@job(
    cron="*/2 * * * * *", name="a-1", pool=TENANTS, concurrency_key="a", overlap="allow", lease="4s"
)
def a_1(ctx: RunContext) -> None:
    _body(ctx)


@job(
    cron="*/2 * * * * *", name="a-2", pool=TENANTS, concurrency_key="a", overlap="allow", lease="4s"
)
def a_2(ctx: RunContext) -> None:
    _body(ctx)


@job(
    cron="*/2 * * * * *", name="b-1", pool=TENANTS, concurrency_key="b", overlap="allow", lease="4s"
)
def b_1(ctx: RunContext) -> None:
    _body(ctx)


@job(
    cron="*/2 * * * * *", name="c-1", pool=TENANTS, concurrency_key="c", overlap="allow", lease="4s"
)
def c_1(ctx: RunContext) -> None:
    _body(ctx)
