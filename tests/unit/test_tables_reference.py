"""The docs' table reference (docs/reference/tables.md) names every table the schema
defines, with every column, and every status, reason and origin the runs table speaks:
an operator reading the database finds each word there."""

from __future__ import annotations

import re
from pathlib import Path

from scheduler.states import Origin, Reason, RunStatus
from scheduler.store.schema import VERSION_TABLE, metadata

PAGE = (Path(__file__).parents[2] / "docs" / "reference" / "tables.md").read_text()
SECTION = re.compile(r"^## `(scheduler_\w+)`\n(.*?)(?=^## |\Z)", re.M | re.S)
COLUMN = re.compile(r"^\| `(\w+)` \|", re.M)


def _documented() -> dict[str, set[str]]:
    return {name: set(COLUMN.findall(body)) for name, body in SECTION.findall(PAGE)}


def test_every_table_and_column_is_documented() -> None:
    actual = {
        table.name: {column.name for column in table.columns} for table in metadata.tables.values()
    }
    actual[VERSION_TABLE] = {"version_num"}
    assert _documented() == actual, (
        "docs/reference/tables.md disagrees with scheduler/store/schema.py"
    )


def test_every_status_reason_and_origin_is_listed() -> None:
    rows = dict(re.findall(r"^\| `(status|reason|origin)` \| (.*) \|$", PAGE, re.M))
    for column, words in (("status", RunStatus), ("reason", Reason), ("origin", Origin)):
        listed = re.findall(r"`(\w+)`", rows.get(column, ""))
        assert sorted(listed) == sorted(word.value for word in words), column
