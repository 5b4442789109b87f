"""One log shape for everything: our events and the libraries' stdlib records alike."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tests.acceptance.processes import run_command


def _lines(tmp_path: Path, level: str) -> list[dict[str, Any]]:
    url = f"sqlite:///{tmp_path / f'{level}.db'}"
    result = run_command(
        ["migrate", "--database-url", url, "--log-format", "json", "--log-level", level], tmp_path
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    return [json.loads(line) for line in result.stdout.splitlines()]


def test_every_line_is_one_json_object_with_utc_time_level_and_event(tmp_path: Path) -> None:
    lines = _lines(tmp_path, "debug")
    for line in lines:
        assert {"timestamp", "level", "event"} <= line.keys(), line
        assert line["timestamp"].endswith("Z")
        assert datetime.fromisoformat(line["timestamp"]).tzinfo == UTC
    libraries = {line.get("logger", "").split(".")[0] for line in lines}
    assert {"alembic", "sqlalchemy"} <= libraries
    upgrades = [line for line in lines if line["event"].startswith("Running upgrade")]
    assert upgrades
    assert upgrades[0]["logger"] == "alembic.runtime.migration"
    assert "schema_migrated" in [line["event"] for line in lines]


def test_the_level_filters_library_chatter_and_our_events(tmp_path: Path) -> None:
    info = _lines(tmp_path, "info")
    assert [line["event"] for line in info] == ["schema_migrated"]
    assert _lines(tmp_path, "warning") == []
