"""A job named on the command line: its full name (`module.function` by default, or the
`name=` given to `@job`), or the end of one after a dot (`send_reminders` for
`myapp.jobs.send_reminders`) when exactly one job's name ends so."""

from __future__ import annotations

from collections.abc import Iterable

from scheduler.errors import UserError


def resolve(name: str, known: Iterable[str]) -> str | None:
    """The full name `name` stands for among `known`: itself if known, else the one name
    ending in `.name`; None when none does. More than one is refused in one line that
    lists them."""
    names = set(known)
    if name in names:
        return name
    endings = sorted(full for full in names if full.endswith(f".{name}"))
    if len(endings) > 1:
        raise UserError(
            f"job {name!r}: name: {len(endings)} jobs end so; give one's full name: "
            + ", ".join(endings)
        )
    return endings[0] if endings else None
