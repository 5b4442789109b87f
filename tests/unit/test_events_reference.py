"""Every event the code logs is in the docs' table of events (docs/reference/logs.md), so
that an operator grepping the log for a name can look it up, with every field the call
passes by name."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LOGGED = re.compile(r"""\.(?:debug|info|warning|error|exception)\(\s*["']([a-z][a-z_]+)["']""")
DOCUMENTED = re.compile(r"`([a-z][a-z_]+)`")


def _logged() -> dict[str, str]:
    found: dict[str, str] = {}
    for path in sorted((ROOT / "scheduler").rglob("*.py")):
        for name in LOGGED.findall(path.read_text()):
            found.setdefault(name, str(path.relative_to(ROOT)))
    return found


def _side_thread_crashes() -> dict[str, str]:
    """`SideThread` logs `<its name>_crashed`; the name is the first argument its
    subclass hands to `super().__init__`."""
    found: dict[str, str] = {}
    for path in sorted((ROOT / "scheduler").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ClassDef):
                continue
            bases = [base.id for base in node.bases if isinstance(base, ast.Name)]
            if "SideThread" not in bases:
                continue
            for call in ast.walk(node):
                if (
                    isinstance(call, ast.Call)
                    and isinstance(call.func, ast.Attribute)
                    and call.func.attr == "__init__"
                    and call.args
                    and isinstance(call.args[0], ast.Constant)
                    and isinstance(call.args[0].value, str)
                ):
                    found[f"{call.args[0].value}_crashed"] = str(path.relative_to(ROOT))
    return found


def _documented() -> set[str]:
    page = (ROOT / "docs" / "reference" / "logs.md").read_text()
    table = page[page.index("| event | level |") :]
    rows = [line for line in table.splitlines() if line.startswith("| `")]
    return {name for row in rows for name in DOCUMENTED.findall(row.split("|")[1])}


def test_every_logged_event_is_documented() -> None:
    missing = {name: where for name, where in _logged().items() if name not in _documented()}
    assert missing == {}, f"add these to the table of events in docs/reference/logs.md: {missing}"


def test_every_side_thread_crash_is_documented() -> None:
    crashes = _side_thread_crashes()
    assert {"heartbeat_crashed", "recovery_crashed", "pruner_crashed"} <= set(crashes)
    missing = {name: where for name, where in crashes.items() if name not in _documented()}
    assert missing == {}, f"add these to the table of events in docs/reference/logs.md: {missing}"


# Every run event carries these, said once above the table.
RUN_FIELDS = {"job", "period", "run_id", "attempt", "node"}


def _fields_passed() -> dict[tuple[str, str], str]:
    """(event, field) for each field a logging call with a literal event names."""
    found: dict[tuple[str, str], str] = {}
    levels = {"debug", "info", "warning", "error", "exception"}
    for path in sorted((ROOT / "scheduler").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in levels
                and node.args
                and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, str)
            ):
                continue
            for keyword in node.keywords:
                if keyword.arg is not None and keyword.arg not in RUN_FIELDS:
                    found[(node.args[0].value, keyword.arg)] = str(path.relative_to(ROOT))
    return found


def _rows() -> dict[str, str]:
    page = (ROOT / "docs" / "reference" / "logs.md").read_text()
    table = page[page.index("| event | level |") :]
    rows: dict[str, str] = {}
    for line in table.splitlines():
        if line.startswith("| `"):
            cells = line.split("|")
            for name in DOCUMENTED.findall(cells[1]):
                rows.setdefault(name, "|".join(cells[2:]))
    return rows


def test_every_field_a_logged_event_passes_is_in_its_row() -> None:
    rows = _rows()
    missing = {
        pair: where
        for pair, where in _fields_passed().items()
        if pair[0] in rows and f"`{pair[1]}`" not in rows[pair[0]]
    }
    assert missing == {}, f"name these fields in their rows of docs/reference/logs.md: {missing}"
    assert "`given_name`" in rows["node_started"]
