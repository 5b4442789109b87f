"""An every-second job in a child process that dies without a word (as a crash in
native code would: `os._exit`), beside an every-second job that is fine."""

from __future__ import annotations

import os

from scheduler import job


@job(cron="* * * * * *", name="native-crash", isolation="process")
def native_crash() -> None:
    os._exit(3)
