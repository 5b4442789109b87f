"""Side threads of a node (heartbeat, recovery, catch-up) under one rule: if one dies,
it records why and stops the node, which must not run without it."""

from __future__ import annotations

import threading

from structlog.typing import FilteringBoundLogger


class SideThread(threading.Thread):
    """Repeats `step()` until `stop` is set; `step` returns how long to wait before the
    next. A crash sets `halt` (the node's stop; by default `stop` itself)."""

    first_wait: float = 0.0

    def __init__(
        self,
        name: str,
        stop: threading.Event,
        log: FilteringBoundLogger,
        halt: threading.Event | None = None,
    ) -> None:
        super().__init__(name=name, daemon=True)
        self._stop = stop
        self._halt = halt or stop
        self._log = log
        self.failure: BaseException | None = None

    def run(self) -> None:
        try:
            wait = self.first_wait
            while not self._stop.wait(wait):
                wait = self.step()
        except Exception as error:  # noqa: BLE001 - supervision: any crash stops the node
            self.failure = error
            self._log.exception(f"{self.name}_crashed")
            self._halt.set()

    def step(self) -> float:
        raise NotImplementedError
