"""A job that fails every period while the file STREAKY_BROKEN exists, alerting on its
third failure in a row and paused by the scheduler on its sixth; a hook that writes
down each event it hears (kind, key, streak, detail) to the file named by HEARD_LOG."""

from __future__ import annotations

import json
import os
from pathlib import Path

from scheduler import Event, job


def heard(event: Event) -> None:
    line = {"kind": event.kind.value, "key": event.key, "streak": event.streak}
    with Path(os.environ["HEARD_LOG"]).open("a") as log:
        log.write(json.dumps({**line, "detail": event.detail}) + "\n")


@job(
    cron="* * * * * *",
    name="streaky",
    alert_after_failures=3,
    pause_after_failures=6,
    on={"failed": heard, "recovered": heard, "paused": heard},
)
def streaky() -> None:
    if Path(os.environ["STREAKY_BROKEN"]).exists():
        raise RuntimeError("the upstream is down")
