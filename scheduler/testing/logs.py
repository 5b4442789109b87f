"""The log lines of a harness's node, kept as dicts instead of written."""

from __future__ import annotations

import logging
from collections.abc import MutableMapping
from typing import Any

import structlog
from structlog.typing import FilteringBoundLogger


class LogCapture:
    """Every line the harness's node logs (and its jobs, through `ctx.log`): the event
    dict with its `event` name and its `level`."""

    def __init__(self) -> None:
        self.lines: list[dict[str, Any]] = []
        self.logger: FilteringBoundLogger = structlog.wrap_logger(
            structlog.ReturnLogger(),
            processors=[self._keep],
            wrapper_class=structlog.make_filtering_bound_logger(logging.DEBUG),
            context_class=dict,
        )

    def _keep(self, _: Any, method: str, event: MutableMapping[str, Any]) -> Any:
        self.lines.append({**event, "level": method})
        raise structlog.DropEvent

    def named(self, event: str, **fields: Any) -> list[dict[str, Any]]:
        """The lines of one event, with these field values (`job="billing"`)."""
        return [
            line
            for line in self.lines
            if line["event"] == event and all(line.get(k) == v for k, v in fields.items())
        ]

    def events(self) -> list[str]:
        """Every event name, in order."""
        return [line["event"] for line in self.lines]
