"""Alert events as records and as a table, for `scheduler events` and `runs show`."""

from __future__ import annotations

from typing import Any

from scheduler import views
from scheduler.states import Delivery
from scheduler.store.deliveries import EventRow
from scheduler.tables import table


def event_record(row: EventRow) -> dict[str, Any]:
    return {
        **row.event.as_dict(),
        "state": row.state.value,
        "tries": row.tries,
        "next_try_at": views.iso(row.next_try_at) if row.state is Delivery.PENDING else None,
        "taken_by": row.taken_by,
        "delivered_at": views.iso(row.delivered_at),
        "delivered_to": list(row.delivered_to),
        "last_error": row.last_error,
    }


def events_table(records: list[dict[str, Any]]) -> str:
    if not records:
        return "no events"
    rows = [
        [
            views.short_time(record["created_at"]),
            record["kind"],
            record["job"],
            views.period_text(record["period"]),
            record["state"],
            str(record["tries"]),
            (record["last_error"] or record["detail"] or "")[:80],
        ]
        for record in records
    ]
    headers = ["CREATED", "KIND", "JOB", "PERIOD", "DELIVERY", "TRIES", "DETAIL / LAST ERROR"]
    return table(headers, rows)
