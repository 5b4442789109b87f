"""The docs' examples (docs/tutorial/two-replicas.md, docs/how-to/django.md) show what this
version does."""

from __future__ import annotations

import re
from pathlib import Path

from scheduler.store.migrate import head_revision

# The Compose example's log, in the tutorial that runs two replicas.
TUTORIAL = (Path(__file__).parents[2] / "docs" / "tutorial" / "two-replicas.md").read_text()


def test_the_compose_log_shows_the_head_revision() -> None:
    migrated = re.findall(r'"after": "(\w+)", "event": "schema_migrated"', TUTORIAL)
    assert migrated == [head_revision()], "update the Compose example's schema_migrated line"


def test_the_django_guides_migrate_output_shows_the_head_revision() -> None:
    guide = (Path(__file__).parents[2] / "docs" / "how-to" / "django.md").read_text()
    shown = re.findall(r"Scheduler tables: upgraded from None to (\w+)", guide)
    assert shown == [head_revision()], "update the Django guide's manage.py migrate output"
