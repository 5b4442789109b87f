"""A process's identity on its host: evidence that an earlier node is gone which a pid
alone is not. Two containers that share a hostname are both pid 1, and a pid is reused;
what names one process is its pid together with the boot, the pid namespace it is
counted in and its start time (Linux's /proc). Elsewhere nothing is known, and nothing
is ever concluded from it."""

from __future__ import annotations

import os
from pathlib import Path

BOOT_ID = Path("/proc/sys/kernel/random/boot_id")
PID_NAMESPACE = Path("/proc/self/ns/pid")


def current() -> str | None:
    """This process's identity, as a node registers it; None where /proc cannot say."""
    here = _here()
    if here is None:
        return None
    try:
        started = _start_time(os.getpid())
    except (OSError, ValueError, IndexError):
        return None
    return f"{here}/{os.getpid()}/{started}"


def ended(recorded: str | None) -> bool:
    """Whether the process `recorded` names has surely ended: it ran in this boot and
    pid namespace, and no process with its pid and start time runs there now. False
    whenever that cannot be known (another boot, which may be another machine with the
    same hostname; another pid namespace, such as another container's; no /proc)."""
    if not recorded:
        return False
    boot_and_namespace, _, rest = recorded.rpartition("/")
    boot_and_namespace, _, pid = boot_and_namespace.rpartition("/")
    started = rest
    if boot_and_namespace != _here() or not pid.isdigit():
        return False
    try:
        return _start_time(int(pid)) != started
    except (OSError, ValueError, IndexError):
        return True  # no such process


def _here() -> str | None:
    """This boot and this process's pid namespace."""
    try:
        boot = BOOT_ID.read_text().strip()
        namespace = PID_NAMESPACE.stat().st_ino
    except OSError:
        return None
    return f"{boot}/{namespace}"


def _start_time(pid: int) -> str:
    """A process's start time in clock ticks since boot (field 22 of /proc/PID/stat; the
    fields after the command's closing parenthesis, which may itself hold spaces)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat.rpartition(")")[2].split()[19]
