"""Real `scheduler` processes for acceptance tests: start, read their JSON logs, signal."""

from __future__ import annotations

import ctypes
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

REPOSITORY = Path(__file__).resolve().parents[2]
JOBMODS_PACKAGE = "tests.acceptance.jobmods"
SCHEDULER = str(Path(sys.executable).parent / "scheduler")


def environment(**extra: str) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("SCHEDULER_")}
    env["PYTHONPATH"] = os.pathsep.join([str(REPOSITORY), env.get("PYTHONPATH", "")]).rstrip(
        os.pathsep
    )
    env.update(extra)
    return env


def jobmods(names: str) -> str:
    """`--jobs` for test job modules: "ticker,long" -> their full module names."""
    return ",".join(f"{JOBMODS_PACKAGE}.{name}" for name in names.split(","))


def run_command(
    args: Sequence[str], cwd: Path, timeout: float = 60, **env: str
) -> subprocess.CompletedProcess[str]:
    """Run one `scheduler` command to completion."""
    return subprocess.run(
        [SCHEDULER, *args],
        cwd=cwd,
        env=environment(**env),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


@dataclass
class Node:
    """One `scheduler run` process, its stdout captured to a file."""

    name: str
    process: subprocess.Popen[bytes]
    log_path: Path
    started: float = field(default_factory=time.monotonic)

    def events(self) -> list[dict[str, Any]]:
        lines = self.log_path.read_text().splitlines() if self.log_path.exists() else []
        parsed = []
        for line in lines:
            try:
                parsed.append(json.loads(line))
            except json.JSONDecodeError:
                parsed.append({"event": "unparsed", "line": line})
        return parsed

    def wait_for(
        self, predicate: Callable[[dict[str, Any]], bool], timeout: float = 30, count: int = 1
    ) -> dict[str, Any]:
        """The `count`-th event that matches, once the node has logged it."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            matching = [event for event in self.events() if predicate(event)]
            if len(matching) >= count:
                return matching[count - 1]
            if self.process.poll() is not None:
                break
            time.sleep(0.05)
        raise AssertionError(
            f"event not seen within {timeout}s; log:\n{self.log_path.read_text()[-4000:]}"
        )

    def signal(self, signum: signal.Signals) -> None:
        self.process.send_signal(signum)

    def stop(self, timeout: float = 60) -> int:
        """SIGTERM, then its exit status; a node that does not leave in time is killed,
        and the failure shows how far its shutdown got."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(
                f"{self.name} still running {timeout}s after SIGTERM; log:\n"
                f"{self.log_path.read_text()[-4000:]}"
            ) from None

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=30)


def start_node(
    cwd: Path, name: str, database_url: str, jobs: str, extra_args: Sequence[str] = (), **env: str
) -> Node:
    log_path = cwd / f"{name}.log"
    with log_path.open("wb") as out:
        process = subprocess.Popen(
            [
                SCHEDULER,
                "run",
                "--database-url",
                database_url,
                "--jobs",
                jobmods(jobs),
                "--log-format",
                "json",
                "--node-name",
                name,
                *extra_args,
            ],
            cwd=cwd,
            env=environment(**env),
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    node = Node(name, process, log_path)
    STARTED.append(node)
    return node


# Every node a test started: one still running when its test ends (the test failed
# before it stopped it) is killed then, so that it loads no later test nor a soak.
STARTED: list[Node] = []


def kill_leftovers() -> list[str]:
    """Kill the nodes started since the last call that still run; their names."""
    left = [node for node in STARTED if node.process.poll() is None]
    for node in left:
        node.kill()
    STARTED.clear()
    return [node.name for node in left]


def when(event: dict[str, Any]) -> float:
    """An event's timestamp, as seconds since the epoch."""
    return datetime.fromisoformat(str(event["timestamp"]).replace("Z", "+00:00")).timestamp()


def first_event(
    nodes: Sequence[Node], predicate: Callable[[dict[str, Any]], bool], timeout: float = 20
) -> tuple[Node, dict[str, Any]]:
    """The first node to log an event that matches, and that event."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for node in nodes:
            for event in node.events():
                if predicate(event):
                    return node, event
        time.sleep(0.01)
    raise AssertionError("no node logged the event")


def watch_takeover(
    other: Node, run_id: str, pid: int, timeout: float
) -> tuple[dict[str, Any], float | None]:
    """Wait for `other` to retake the run; its `run_retaken` event, and when the process
    `pid` (the holder's body, or its child) was first seen gone meanwhile (None: never)."""
    deadline = time.monotonic() + timeout
    gone_at: float | None = None
    while time.monotonic() < deadline:
        if gone_at is None and not _alive(pid):
            gone_at = time.time()
        for event in other.events():
            if event.get("event") == "run_retaken" and event.get("run_id") == run_id:
                return event, gone_at
        time.sleep(0.01)
    raise AssertionError(f"{other.name} never took the run over")


def _alive(pid: int) -> bool:
    """True while the process exists and is not a zombie waiting to be reaped."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")


def other_threads(pid: int) -> list[int]:
    """The ids of a process's threads but its main one."""
    return sorted(
        int(task.name) for task in Path(f"/proc/{pid}/task").iterdir() if task.name != str(pid)
    )


def signal_thread(pid: int, thread: int, signum: signal.Signals) -> None:
    """A real signal, sent to one thread of the process (tgkill): which of its threads
    takes a process's signal is the kernel's choice, made certain here."""
    libc = ctypes.CDLL(None, use_errno=True)
    assert libc.tgkill(pid, thread, signum) == 0, os.strerror(ctypes.get_errno())
