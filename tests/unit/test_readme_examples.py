"""The README's examples show what this version does."""

from __future__ import annotations

import re
from pathlib import Path

from scheduler.store.migrate import head_revision

README = (Path(__file__).parents[2] / "README.md").read_text()


def test_the_compose_log_shows_the_head_revision() -> None:
    migrated = re.findall(r'"after": "(\w+)", "event": "schema_migrated"', README)
    assert migrated == [head_revision()], "update the Compose example's schema_migrated line"
