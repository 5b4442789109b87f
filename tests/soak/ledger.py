"""The ledger: what the soak's job bodies did, one JSON line per event, appended by every
process (nodes, their job children) to one file opened O_APPEND, so that lines from
different processes never interleave.

Events: `start` (the body was entered), `end` (it completed its work), `cancelled` (it
saw `ctx.cancelled` and stopped early: not a completion), `fail` (it raised on purpose),
`error` (it raised because something under it failed, e.g. the database went away),
`seen` (soak-items: it ran, but `ctx.once` said an earlier attempt had done its item).
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from scheduler import RunContext

LEDGER_ENV = "SOAK_LEDGER"

START = "start"
END = "end"
CANCELLED = "cancelled"
FAIL = "fail"
ERROR = "error"
# soak-items only: the body ran, but an earlier attempt had done the item (ctx.once).
SEEN = "seen"
# The events that close a body.
CLOSING = (END, CANCELLED, FAIL, ERROR, SEEN)


@dataclass(frozen=True)
class Line:
    event: str
    job: str
    period: datetime
    attempt: int
    run_id: str
    node: str  # the node's id (its name, a dash and six hex digits)
    pid: int
    monotonic: float
    wall: float  # time.time(): the same host, the same clock as the database server's

    @property
    def key(self) -> tuple[str, datetime]:
        return (self.job, self.period)

    @property
    def attempt_key(self) -> tuple[str, int]:
        return (self.run_id, self.attempt)


def note(ctx: RunContext, event: str) -> None:
    """Append one line for this run; O_APPEND makes a single write atomic between
    processes (a line is far below PIPE_BUF)."""
    record = {
        "event": event,
        "job": ctx.job,
        "period": ctx.period.isoformat(),
        "attempt": ctx.attempt,
        "run_id": ctx.run_id,
        "node": ctx.node,
        "pid": os.getpid(),
        "monotonic": time.monotonic(),
        "wall": time.time(),
    }
    data = (json.dumps(record) + "\n").encode()
    fd = os.open(os.environ[LEDGER_ENV], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def read(path: Path) -> list[Line]:
    """Every line of the ledger, in the order written."""
    if not path.exists():
        return []
    lines = []
    for text in path.read_text().splitlines():
        if not text.strip():
            continue
        raw = json.loads(text)
        lines.append(
            Line(
                event=raw["event"],
                job=raw["job"],
                period=datetime.fromisoformat(raw["period"]),
                attempt=int(raw["attempt"]),
                run_id=raw["run_id"],
                node=raw["node"],
                pid=int(raw["pid"]),
                monotonic=float(raw["monotonic"]),
                wall=float(raw["wall"]),
            )
        )
    return lines


def node_name(node_id: str) -> str:
    """`soak-2-a1b2c3` -> `soak-2`: the name the fault log uses."""
    return node_id.rsplit("-", 1)[0]
