"""What wraps every call of a plain job function, in the thread that makes the call.

A framework whose resources belong to a thread registers here what must happen around
each run on that thread (Django: `close_old_connections` before and after, as it does
around a request). The run path enters them in `run.calling`; a job module or an app's
start-up registers them. Pure bookkeeping, like `hooks`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager
from contextvars import ContextVar

AroundCall = Callable[[], AbstractContextManager[object]]
_AROUND: list[AroundCall] = []
# Set in the context of a call made on a thread that ends with it.
_LAST_ON_THREAD: ContextVar[bool] = ContextVar("last_call_on_thread", default=False)


def around_calls(factory: AroundCall) -> AroundCall:
    """Register a context manager factory entered around every call of a plain (thread)
    job function, in its thread; registering the same one twice keeps one."""
    if factory not in _AROUND:
        _AROUND.append(factory)
    return factory


def registered() -> tuple[AroundCall, ...]:
    return tuple(_AROUND)


def clear() -> None:
    """Forget every registration (tests)."""
    _AROUND.clear()


@contextmanager
def entered(factories: tuple[AroundCall, ...]) -> Iterator[None]:
    """Every factory's context, the first registered outermost."""
    with ExitStack() as stack:
        for factory in factories:
            stack.enter_context(factory())
        yield


def last_on_its_thread() -> bool:
    """Whether the call being made is the last its thread makes: a job with a timeout
    runs on a helper thread of its own, which ends with the call. A hook that keeps a
    resource per thread from one call to the next (a persistent Django connection)
    releases it then, instead of leaving it to the garbage collector."""
    return _LAST_ON_THREAD.get()


def ends_its_thread() -> None:
    """Said by an executor, in the context of a call it makes on a thread of its own,
    before the call: what `last_on_its_thread` answers there."""
    _LAST_ON_THREAD.set(True)
