"""Our own events as JSON lines, with a logger's bound fields encoded once.

A run's logger carries its node, job, period, id and attempt, and each of a run's lines
(claimed, started, succeeded) went through structlog's whole chain to encode them again:
copying the fields into a new dict, three processors, and the JSON encoder over all of
it. Here a logger whose bound fields are plain values (text, numbers, true, false, null)
keeps their JSON text, and a line adds only what is new to it. The text is byte for
byte what the chain writes, a property test holds the two together; whatever this path
cannot vouch for goes through the chain: a traceback, a stack, a job's failure, a field
bound through contextvars, a key given twice, a bound field of any other kind.
"""

from __future__ import annotations

import contextvars
import time
from collections.abc import Callable, Mapping
from typing import Any

from structlog.contextvars import STRUCTLOG_KEY_PREFIX
from structlog.processors import add_log_level

# Keys the chain writes itself, or that send a line through its other steps.
_CHAIN_KEYS = frozenset({"event", "level", "timestamp", "exc_info", "stack_info", "failure"})
_NO_HEAD = ""  # a logger whose bound fields this path does not render
_HEAD = "_scheduler_json_head"  # where a bound logger keeps its fields' text


class JsonLines:
    """Renders a plain line of ours, or says None for the chain to render it.

    `encoder` is the chain's JSON encoder once it has made one (the options are
    structlog's, known at its first line), `stamp` the chain's timestamp."""

    def __init__(self, encoder: Callable[[], Any], stamp: Callable[[int], str]) -> None:
        self._encoder = encoder
        self._stamp = stamp
        self._levels: dict[str, str] = {}

    def line(
        self, holder: Any, bound: Mapping[str, Any], method: str, event: Any, fields: dict[str, Any]
    ) -> str | None:
        encoder = self._encoder()
        if encoder is None or type(event) is not str or _bound_in_context():
            return None
        head: str | None = holder.__dict__.get(_HEAD)
        if head is None:
            head = holder.__dict__[_HEAD] = _head(encoder, bound)
        if head is _NO_HEAD:
            return None
        parts = [head]
        separator = ", " if len(head) > 1 else ""
        encode = encoder.encode
        for key, value in fields.items():
            if key in _CHAIN_KEYS or key in bound:
                return None
            parts.append(f"{separator}{encode(key)}: {_value(encode, value)}")
            separator = ", "
        level = self._levels.get(method)
        if level is None:
            level = self._levels[method] = encode(add_log_level(None, method, {})["level"])
        stamp = self._stamp(time.time_ns())
        parts.append(
            f'{separator}"event": {encode(event)}, "level": {level}, "timestamp": "{stamp}"}}'
        )
        return "".join(parts)


def fast_wrapper(base: type[Any], lines: JsonLines, processors: list[Any]) -> type[Any]:
    """`base` (structlog's filtering bound logger) with its plain lines rendered by
    `lines`, as long as the logger's processors are still the `processors` configured."""

    class Bound(base):  # type: ignore[misc]
        def _process_event(
            self, method_name: str, event: str | None, event_kw: dict[str, Any]
        ) -> tuple[tuple[Any, ...], dict[str, Any]]:
            if self._processors is processors:
                line = lines.line(self, self._context, method_name, event, event_kw)
                if line is not None:
                    return (line,), {}
            result: tuple[tuple[Any, ...], dict[str, Any]] = super()._process_event(
                method_name, event, event_kw
            )
            return result

    Bound.__name__ = Bound.__qualname__ = f"Json{base.__name__}"
    return Bound


def _bound_in_context() -> bool:
    """Whether this thread has fields bound through structlog's contextvars (a job's
    own lines, inside its call): they go through the chain's merge."""
    for variable, value in contextvars.copy_context().items():
        if value is not Ellipsis and variable.name.startswith(STRUCTLOG_KEY_PREFIX):
            return True
    return False


def _head(encoder: Any, bound: Mapping[str, Any]) -> str:
    """The bound fields' JSON without its closing brace, or _NO_HEAD when one of them
    could change after this (a list, a dict, an object) or is a key the chain writes."""
    for key, value in bound.items():
        if key in _CHAIN_KEYS or type(key) is not str:
            return _NO_HEAD
        if not (value is None or isinstance(value, str | int | float)):
            return _NO_HEAD
    return str(encoder.encode(dict(bound)))[:-1]


def _value(encode: Callable[[Any], str], value: Any) -> str:
    """A value's JSON, as the encoder writes it inside an object."""
    kind = type(value)
    if kind is int:
        return int.__repr__(value)
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    return encode(value)
