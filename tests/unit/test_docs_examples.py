"""The docs' examples (docs/tutorial/two-replicas.md) show what this version does."""

from __future__ import annotations

import re
from pathlib import Path

from scheduler.store.migrate import head_revision

# The Compose example's log, in the tutorial that runs two replicas.
TUTORIAL = (Path(__file__).parents[2] / "docs" / "tutorial" / "two-replicas.md").read_text()


def test_the_compose_log_shows_the_head_revision() -> None:
    migrated = re.findall(r'"after": "(\w+)", "event": "schema_migrated"', TUTORIAL)
    assert migrated == [head_revision()], "update the Compose example's schema_migrated line"
