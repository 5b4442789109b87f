"""A hook's call in a thread of its own, and the tries whose calls outlived their timeout.

A call is waited for up to its timeout. One that has not returned by then is not
abandoned: its thread goes on and may still take the event. Calling the hook again
beside it would deliver the event twice (and, for a hook slower than its timeout, on
every try), so its try stays open (`Lingering`): the node keeps holding the event, no
node calls the hook again, and the try is settled once the call ends, a late success
like any other.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from scheduler.hooks import Hook
from scheduler.model import Event
from scheduler.store.deliveries import EventRow


class HookCall:
    """One call of a hook, in a daemon thread, waited for up to `timeout`; `on_end` is
    called when it ends."""

    def __init__(
        self, name: str, hook: Hook, event: Event, timeout: float, on_end: Callable[[], None]
    ) -> None:
        self.name, self.timeout = name, timeout
        self.error: str | None = None
        self._ended = threading.Event()
        self._hook, self._event, self._on_end = hook, event, on_end
        thread = threading.Thread(target=self._call, name=f"hook:{name}"[:60], daemon=True)
        thread.start()

    def _call(self) -> None:
        try:
            self._hook(self._event)
        except Exception as error:  # noqa: BLE001 - a hook's failure is data
            self.error = f"{type(error).__name__}: {error}"
        finally:
            self._ended.set()
            self._on_end()

    def wait(self) -> bool:
        """Wait up to the call's timeout for it to end; whether it did."""
        return self._ended.wait(self.timeout)

    @property
    def ended(self) -> bool:
        return self._ended.is_set()


@dataclass
class Lingering:
    """A delivery try some of whose hook calls passed their timeout and still run."""

    row: EventRow  # the event as read before the try
    hooks: list[str]  # the hooks this try called
    delivered: list[str]
    errors: list[str]
    running: list[HookCall] = field(default_factory=list)

    @property
    def ended(self) -> bool:
        return all(call.ended for call in self.running)

    def settle_calls(self) -> None:
        """Count the ended calls in: taken (a late success) or failed."""
        for call in self.running:
            if call.error is None:
                self.delivered.append(call.name)
            else:
                self.errors.append(f"{call.name}: {call.error}")
        self.running = []
