"""structlog set-up: JSON lines for machines, coloured lines on a terminal.

Standard-library loggers (SQLAlchemy, Alembic, APScheduler) go through the same
renderer, so every line of output has one shape.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from enum import StrEnum
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from structlog.typing import FilteringBoundLogger


class LogFormat(StrEnum):
    AUTO = "auto"
    JSON = "json"
    CONSOLE = "console"


LOG_LEVELS = ("debug", "info", "warning", "error")


_current: tuple[LogFormat, str] = (LogFormat.AUTO, "info")
_lines: _Lines | None = None


def current() -> tuple[LogFormat, str]:
    """The format and level in force, for a child process to configure itself alike."""
    return _current


def configure(log_format: LogFormat, level: str, stream: TextIO | None = None) -> None:
    """Route structlog and the stdlib through one renderer on stdout (or `stream`: a
    Celery worker passes the real stdout, which Celery replaces with a logger)."""
    # Not with the module: commands' options name LogFormat and LOG_LEVELS, and `--help`
    # or `plan` should not pay for structlog (and asyncio) to list them.
    import structlog  # noqa: PLC0415

    global _current, _lines  # noqa: PLW0603 - logging is process-wide by nature
    _current = (log_format, level)
    out = stream or sys.stdout
    use_json = log_format is LogFormat.JSON or (log_format is LogFormat.AUTO and not out.isatty())
    stamp, json_line = _UtcStamp(), _JsonLine()
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        stamp,
    ]
    renderer: Any = (
        structlog.processors.JSONRenderer(serializer=json_line.encode)
        if use_json
        else Terminal(colors=out.isatty())
    )
    exceptions: Any = _exception_as_data if use_json else structlog.processors.format_exc_info
    failures = _failure_as_data if use_json else _failure_as_text
    # Standard-library records (SQLAlchemy, Alembic, APScheduler) reach this handler.
    handler = logging.StreamHandler(out)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=[
                *shared,
                structlog.stdlib.add_logger_name,  # which library spoke: "sqlalchemy.engine…"
                structlog.stdlib.ExtraAdder(),
            ],
            processors=[
                structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                failures,
                exceptions,
                renderer,
            ],
        )
    )
    # Nothing we render needs the caller's frame, thread or process from a LogRecord;
    # finding the caller walks the stack on every line (`_srcfile` is the logging
    # module's documented switch for that).
    logging._srcfile = None
    logging.logThreads = logging.logProcesses = logging.logMultiprocessing = False
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # Library chatter stays out unless the user asks for debug.
    for noisy in ("sqlalchemy", "alembic", "apscheduler"):
        logging.getLogger(noisy).setLevel(logging.DEBUG if level == "debug" else logging.WARNING)
    lines = _lines = _Lines(handler)
    # Our own events skip the standard library: a busy node logs a few lines per run, and
    # a LogRecord plus a second formatting pass cost twice the line itself. They are
    # written under the handler's lock, so a line of ours and a library's never mix.
    chain = [*shared, structlog.processors.StackInfoRenderer(), failures, exceptions, renderer]
    processors: list[Any] = [_Plain(chain, [*shared, renderer])]
    wrapper = structlog.make_filtering_bound_logger(logging.getLevelName(level.upper()))
    if use_json:  # a run's lines with its bound fields encoded once, the same text
        from scheduler.json_lines import JsonLines, fast_wrapper  # noqa: PLC0415

        wrapper = fast_wrapper(wrapper, JsonLines(json_line.encoder, stamp.at), processors)
    structlog.configure(
        processors=processors,
        logger_factory=lambda *_args: lines,
        wrapper_class=wrapper,
        cache_logger_on_first_use=True,
    )


class _UtcStamp:
    """structlog's `TimeStamper(fmt="iso", utc=True)` in 0.6 µs instead of 1.6, the same
    text (`2026-12-04T23:17:29.123456Z`, no fraction at a whole second): the date and
    time to the second are made once a second, the microseconds on every line."""

    def __init__(self) -> None:
        self._second: tuple[int, str] = (-1, "")  # one tuple: threads swap it whole

    def __call__(self, _logger: Any, _name: str, event: Any) -> Any:
        event["timestamp"] = self.at(time.time_ns())
        return event

    def at(self, nanoseconds: int) -> str:
        second, rest = divmod(nanoseconds, 1_000_000_000)
        cached = self._second
        if cached[0] != second:
            text = datetime.fromtimestamp(second, UTC).isoformat()[:19]
            cached = self._second = (second, text)
        micro = rest // 1000
        return f"{cached[1]}.{micro:06d}Z" if micro else f"{cached[1]}Z"


# What a person scans a run's line for, after its time, level and event, in this order.
_LEADING = ("job", "period", "run_id")
RUN_ID_SHOWN = 8  # as git shows a commit: enough to tell a terminal's runs apart
_LEVEL_COLOURS = {
    "debug": "\x1b[2m",
    "info": "\x1b[32m",
    "warning": "\x1b[33m",
    "error": "\x1b[31m",
    "critical": "\x1b[1;31m",
}
_RESET = "\x1b[0m"


class Terminal:
    """A short line a person at a terminal scans: the time (UTC, to the millisecond), the
    level, the event, then the run's job, period (`Z` for UTC) and the first characters
    of its run id, then the other fields in the order they were given, the node's id
    last (the full run id and the date are in the JSON lines). A traceback goes under
    its line."""

    def __init__(self, *, colors: bool) -> None:
        self._colors = colors

    def __call__(self, _logger: Any, _name: str, event: Any) -> str:
        fields = dict(event)
        stamp = f"{str(fields.pop('timestamp', ''))[11:23].rstrip('Z'):<12}"
        level = str(fields.pop("level", "info"))
        shown_level = f"{level:<7}"
        if self._colors:
            shown_level = f"{_LEVEL_COLOURS.get(level, '')}{shown_level}{_RESET}"
        parts = [stamp, shown_level, f"{fields.pop('event', '')!s:<20}"]
        logger = fields.pop("logger", None)
        if logger:
            parts.append(f"[{logger}]")
        under = [str(text) for text in (fields.pop("exception", None), fields.pop("stack", None))]
        for key in _LEADING:
            value = fields.pop(key, None)
            if value is not None:
                parts.append(_leading(key, value))
        node = fields.pop("node", None)  # the same on every line of a node: last
        if node is not None:
            fields["node"] = node
        parts.extend(f"{key}={_shown(value)}" for key, value in fields.items())
        line = " ".join(parts).rstrip()
        return "\n".join([line, *(text.rstrip("\n") for text in under if text != "None")])


def _leading(key: str, value: Any) -> str:
    text = str(value)
    if key == "run_id":
        return text[:RUN_ID_SHOWN]
    if key == "period":
        return text.removesuffix("+00:00") + ("Z" if text.endswith("+00:00") else "")
    return text


def _shown(value: Any) -> str:
    text = str(value)
    return repr(text) if not text or any(char.isspace() for char in text) else text


class _Plain:
    """Our own events' processors as one: a line with no traceback, stack or failure to
    render (nearly every line) skips the three steps that would find nothing, and the
    loop over seven calls; one with any of them goes through the whole chain."""

    def __init__(self, chain: list[Any], plain: list[Any]) -> None:
        self._chain = chain
        self._plain = plain

    def __call__(self, logger: Any, name: str, event: Any) -> Any:
        steps = (
            self._chain
            if "exc_info" in event or "stack_info" in event or "failure" in event
            else self._plain
        )
        for step in steps:
            event = step(logger, name, event)
        return event


class _JsonLine:
    """The standard library's JSON with its encoder made once: `json.dumps`, given
    structlog's `default`, builds a new encoder for every line (a tenth of a line's
    cost). The same options, so the same text byte for byte."""

    def __init__(self) -> None:
        self._encoder: Any = None

    def encoder(self) -> Any:
        """The encoder, once the first line has made it (None until then)."""
        return self._encoder

    def encode(self, event: Any, **options: Any) -> str:
        encoder = self._encoder
        if encoder is None:  # JSONRenderer's options are the same on every call
            import json  # noqa: PLC0415 - see configure

            encoder = self._encoder = json.JSONEncoder(**options)
        return str(encoder.encode(event))


@contextmanager
def together() -> Iterator[None]:
    """Write the lines this thread logs inside the block in one write, at its end.

    For a loop that logs a line per run of a batch the database already settled (the
    claims of one statement, the outcomes of one commit): each write is a system call,
    and a wake-up of whatever reads the pipe, and while other threads wait for the GIL a
    hand-over of it (bench.run_path: 8.6 → 7.0 context switches a run). Lines stay in
    order and are out before the block's caller goes on; a SIGKILL inside the block
    loses its lines so far, as one between a commit and its lines always could.
    """
    lines = _lines
    if lines is None or lines.holding():
        yield
        return
    lines.hold()
    try:
        yield
    finally:
        lines.release_held()


class _Lines:
    """structlog's final logger: one rendered line, written and flushed under a lock (or
    held, inside `together`, to go out with the others of its block)."""

    def __init__(self, handler: logging.StreamHandler[TextIO]) -> None:
        self._handler = handler
        self._held = threading.local()

    def msg(self, message: str) -> None:
        held: list[str] | None = getattr(self._held, "lines", None)
        if held is not None:
            held.append(message)
            return
        self._write(message + "\n")

    log = debug = info = warn = warning = error = critical = exception = fatal = msg

    def holding(self) -> bool:
        return getattr(self._held, "lines", None) is not None

    def hold(self) -> None:
        self._held.lines = []

    def release_held(self) -> None:
        held: list[str] = self._held.lines
        self._held.lines = None
        if held:
            self._write("\n".join(held) + "\n")

    def _write(self, text: str) -> None:
        self._handler.acquire()
        try:
            stream = self._handler.stream
            stream.write(text)
            stream.flush()  # the handler's flush would take the lock held here again
        finally:
            self._handler.release()


def _identity(_logger: Any, _name: str, event: Any) -> Any:
    return event


def _failure_as_data(_logger: Any, _name: str, event: Any) -> Any:
    """A job's failure (`failure=`) as the JSON `exception` field: the traceback as data,
    each exception of the chain with its frames (structlog's dict traceback shape). One
    known only as text (from another process: a Celery worker's) is one exception of
    that shape with no frames, the text beside them."""
    failure = event.pop("failure", None)
    if failure is not None and failure.trace:
        event["exception"] = list(failure.trace)
    elif failure is not None and failure.traceback:
        event["exception"] = [
            {
                "exc_type": failure.type,
                "exc_value": failure.message,
                "is_cause": False,
                "frames": [],
                "traceback": failure.traceback.rstrip("\n"),
            }
        ]
    return event


def _exception_as_data(_logger: Any, _name: str, event: Any) -> Any:
    """`log.exception(...)` (our own crashes, a library's logged error) in JSON: the same
    `exception` shape as a job's failure, so that a log pipeline maps the field once."""
    exc_info = event.pop("exc_info", None)
    if exc_info is True:
        exc_info = sys.exc_info()
    elif isinstance(exc_info, BaseException):
        exc_info = (type(exc_info), exc_info, exc_info.__traceback__)
    if isinstance(exc_info, tuple) and exc_info[0] is not None:
        event["exception"] = traceback_data(exc_info[1])
    return event


def traceback_data(error: BaseException) -> list[dict[str, Any]]:
    """structlog's dict form of a traceback, each exception of the chain with its frames,
    without the frames' local variables (which may hold secrets); the shape of a job
    failure's `trace` (scheduler.run.failures)."""
    from structlog.tracebacks import extract  # noqa: PLC0415 - see configure

    extracted = extract(type(error), error, error.__traceback__, show_locals=False)
    return [
        {
            "exc_type": stack.exc_type,
            "exc_value": stack.exc_value,
            "is_cause": stack.is_cause,
            "frames": [
                {"filename": frame.filename, "lineno": frame.lineno, "name": frame.name}
                for frame in stack.frames
            ],
        }
        for stack in extracted.stacks
    ]


def _failure_as_text(_logger: Any, _name: str, event: Any) -> Any:
    """A job's failure on a terminal: its formatted traceback, under the line."""
    failure = event.pop("failure", None)
    if failure is not None and failure.traceback:
        event["exception"] = failure.traceback.rstrip("\n")
    return event


def get_logger(**context: Any) -> FilteringBoundLogger:
    import structlog  # noqa: PLC0415 - see configure

    logger: FilteringBoundLogger = structlog.get_logger("scheduler").bind(**context)
    return logger
