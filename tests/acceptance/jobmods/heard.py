"""A job whose first run fails for good, and a hook that writes down each event it hears
(kind, key, the time it heard it) to the file named by HEARD_LOG. The lease comes from
HEARD_LEASE: a node beats every third of it."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from scheduler import Event, job


def heard(event: Event) -> None:
    with Path(os.environ["HEARD_LOG"]).open("a") as log:
        log.write(json.dumps({"kind": event.kind.value, "key": event.key, "at": time.time()}))
        log.write("\n")


@job(
    cron="* * * * * *",
    name="fails-once",
    lease=os.environ.get("HEARD_LEASE", "30s"),
    on={"failed": heard, "stuck_item": heard},
)
def fails_once() -> None:
    marker = Path(os.environ["HEARD_LOG"] + ".failed")
    if not marker.exists():
        marker.touch()
        raise RuntimeError("the first run fails")
