"""A JSON log line is the text the standard library's `json.dumps` gives, whatever it
holds: the encoder made once writes what a new one per line wrote."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
import structlog

from scheduler import logs


@pytest.fixture
def lines() -> Iterator[io.StringIO]:
    saved, handlers = structlog.get_config(), logging.getLogger().handlers[:]
    level = logging.getLogger().level
    out = io.StringIO()
    logs.configure(logs.LogFormat.JSON, "info", out)
    try:
        yield out
    finally:
        structlog.configure(**saved)
        logging.getLogger().handlers[:] = handlers
        logging.getLogger().setLevel(level)


def test_lines_are_json_dumps_text(lines: io.StringIO) -> None:
    class Opaque:
        def __repr__(self) -> str:
            return "<opaque>"

    log = logs.get_logger(node="n-ü")
    for _ in range(2):  # the second line comes from the encoder the first one made
        log.info(
            "run_succeeded",
            job="naïve job",
            when=datetime(2026, 12, 4, tzinfo=UTC),
            ratio=0.1,
            nothing=None,
            nested={"a": [1, 2.5, True]},
            opaque=Opaque(),
        )
    first, second = lines.getvalue().splitlines()
    assert first == second.replace(json.loads(second)["timestamp"], json.loads(first)["timestamp"])
    event = json.loads(first)
    # What json.dumps with structlog's fallback (repr for what JSON cannot hold) writes.
    assert first == json.dumps(
        {**event, "when": repr(datetime(2026, 12, 4, tzinfo=UTC))}, default=repr
    )
    assert '"node": "n-\\u00fc"' in first
    assert '"job": "na\\u00efve job"' in first
    assert event["opaque"] == "<opaque>"
    assert event["nested"] == {"a": [1, 2.5, True]}
