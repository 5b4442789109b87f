"""The table of alert event kinds in docs/how-to/alerts.md names every kind a hook can
be given (`scheduler.states.EventKind`), and no other."""

from __future__ import annotations

import re
from pathlib import Path

from scheduler.states import EventKind

PAGE = (Path(__file__).parents[2] / "docs" / "how-to" / "alerts.md").read_text()


def test_every_event_kind_is_in_the_table() -> None:
    table = PAGE[PAGE.index("| kind | when | subject |") :]
    table = table[: table.index("\n\n")]
    listed = re.findall(r"^\| `(\w+)` \|", table, re.M)
    assert sorted(listed) == sorted(kind.value for kind in EventKind)
