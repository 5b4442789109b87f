"""Jobs that log the way application code does (the standard library's logging and
structlog), in each way a job runs: a thread, a thread under a timeout, the event loop,
a child process; and one that fails with a traceback, retried once."""

from __future__ import annotations

import asyncio
import logging

import structlog

from scheduler import RunContext, job

billing = logging.getLogger("myapp.billing")


def _speak(where: str) -> None:
    billing.info("charging customer 42 (%s)", where)
    structlog.get_logger("myapp").info("charged", where=where)


@job(cron="0 0 1 1 *", name="chatty-thread")
def in_thread() -> None:
    _speak("thread")


@job(cron="0 0 1 1 *", name="chatty-timed", timeout="30s")
def in_timed_thread() -> None:
    _speak("timed")


@job(cron="0 0 1 1 *", name="chatty-async")
async def on_loop() -> None:
    await asyncio.sleep(0)
    _speak("async")


@job(cron="0 0 1 1 *", name="chatty-process", isolation="process")
def in_process() -> None:
    _speak("process")


def _charge(customer: int) -> None:
    raise ValueError(f"card of customer {customer} declined")


@job(cron="0 0 1 1 *", name="declined", retries=1, retry_backoff="0s")
def declined(ctx: RunContext) -> None:
    _charge(42)


@job(cron="0 0 1 1 *", name="chatty-print")
def printing() -> None:
    print("printed by chatty-print")
