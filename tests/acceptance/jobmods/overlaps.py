"""Three 3-second jobs scheduled every second, one per overlap policy."""

from __future__ import annotations

import time

from scheduler import job


@job(cron="* * * * * *", name="overlap-skip", overlap="skip")
def skip() -> None:
    time.sleep(3)


@job(cron="* * * * * *", name="overlap-queue", overlap="queue")
def queue() -> None:
    time.sleep(3)


@job(cron="* * * * * *", name="overlap-allow", overlap="allow")
def allow() -> None:
    time.sleep(3)
