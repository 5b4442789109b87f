"""How the console words where a request stands."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from scheduler.console.reading import Fleet, request_state
from scheduler.store.requests import RequestRow

NOW = datetime(2026, 12, 1, 3, 0, tzinfo=UTC)


def row(
    *,
    age_s: float,
    taken_by: str | None = None,
    outcome: str | None = None,
    held_s: float = 10,
    tries: int | None = None,
) -> RequestRow:
    asked = NOW - timedelta(seconds=age_s)
    return RequestRow(
        "r1", "billing", "trigger", None, None, None, False, False, asked, "alice",
        taken_by, asked if taken_by else None, None, outcome, None, None,
        asked + timedelta(seconds=held_s) if taken_by else None,
        (1 if taken_by else 0) if tries is None else tries,
    )  # fmt: skip


def test_each_state_says_what_to_do() -> None:
    fleet = Fleet(NOW, 1, 1, frozenset({"node-a"}))
    nobody = Fleet(NOW, 0, 1)
    assert request_state(row(age_s=1, outcome="done"), fleet) == "done"
    assert request_state(row(age_s=1, taken_by="node-a"), fleet) == "taken by node-a"
    lost = request_state(row(age_s=1, taken_by="node-b"), fleet)
    assert lost.startswith("taken by node-b, which stopped answering")
    assert lost.endswith("another node takes it again once its hold ends")
    lapsed = request_state(row(age_s=60, taken_by="node-a"), fleet)
    assert lapsed == (
        "taken by node-a, whose hold ended before it finished: waiting for a node to take it again"
    )
    assert request_state(row(age_s=60, tries=1), fleet).startswith(
        "waiting for a node again (given back after a fault"
    )
    assert request_state(row(age_s=1), nobody).startswith("waiting for a node: no node is alive")
    assert request_state(row(age_s=2), fleet) == (
        "waiting for a node that knows the job (nodes look every second)"
    )
    assert "does any of them run this job?" in request_state(row(age_s=30), fleet)
