"""Our log lines sent to a stream of the test's for a block, and the set-up put back after."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO

import structlog

from scheduler import logs


@contextmanager
def configured(out: TextIO) -> Iterator[None]:
    saved, handlers = structlog.get_config(), logging.getLogger().handlers[:]
    level, lines = logging.getLogger().level, logs._lines
    logs.configure(logs.LogFormat.JSON, "info", out)
    try:
        yield
    finally:
        structlog.configure(**saved)
        logging.getLogger().handlers[:] = handlers
        logging.getLogger().setLevel(level)
        logs._lines = lines
