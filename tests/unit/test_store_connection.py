"""The store's own connection layer: parameters written once for both drivers, instants
kept as the tables have always held them, and the column names that type SQLite's rows
covering every column of the tables."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st
from sqlalchemy import Boolean

from scheduler.store.connection import (
    FLAG_COLUMNS,
    TIMESTAMP_COLUMNS,
    Connection,
    in_list,
    pairs_in,
    pyformat,
    sqlite_instant,
)
from scheduler.store.schema import UTCDateTime, metadata


def test_parameters_become_psycopg_placeholders_outside_literals_and_comments() -> None:
    sql = "SELECT :a, 'x:b''s 50%', x::text -- the job's :c\n, :d_1"
    assert pyformat(sql) == "SELECT %(a)s, 'x:b''s 50%%', x::text -- the job's :c\n, %(d_1)s"


def test_in_lists_name_one_parameter_a_value() -> None:
    assert in_list("id", ["a", "b"]) == (":id_0, :id_1", {"id_0": "a", "id_1": "b"})
    assert in_list("id", []) == ("NULL", {})
    listed, parameters = pairs_in("run", [("j", 1)])
    assert (listed, parameters) == ("(:run_0_a, :run_0_b)", {"run_0_a": "j", "run_0_b": 1})


def test_every_instant_column_of_the_tables_is_read_as_an_instant_on_sqlite() -> None:
    instants = {
        column.name
        for table in metadata.tables.values()
        for column in table.columns
        if isinstance(column.type, UTCDateTime)
    }
    flags = {
        column.name
        for table in metadata.tables.values()
        for column in table.columns
        if isinstance(column.type, Boolean)
    }
    assert instants <= TIMESTAMP_COLUMNS
    assert flags <= FLAG_COLUMNS
    # No column holds anything else under one of those names.
    others = {
        column.name
        for table in metadata.tables.values()
        for column in table.columns
        if not isinstance(column.type, UTCDateTime | Boolean)
    }
    assert not others & (TIMESTAMP_COLUMNS | FLAG_COLUMNS)


def test_sqlite_keeps_instants_as_sqlalchemy_wrote_them() -> None:
    """Databases written before the store left SQLAlchemy are read alike, and text order
    is time order."""
    moment = datetime(2026, 3, 29, 1, 59, 59, 999_999, tzinfo=UTC)
    assert sqlite_instant(moment) == "2026-03-29 01:59:59.999999"
    assert sqlite_instant(datetime(2026, 1, 1, tzinfo=UTC)) == "2026-01-01 00:00:00.000000"
    stockholm = timezone(timedelta(hours=2))
    assert sqlite_instant(moment.astimezone(stockholm)) == "2026-03-29 01:59:59.999999"
    with pytest.raises(ValueError, match="naive"):
        sqlite_instant(datetime(2026, 1, 1))


@given(st.datetimes(timezones=st.just(UTC)), st.datetimes(timezones=st.just(UTC)))
def test_sqlite_instants_compare_as_text_as_they_do_as_times(a: datetime, b: datetime) -> None:
    assert (sqlite_instant(a) < sqlite_instant(b)) == (a < b)


def test_a_sqlite_row_comes_back_typed_by_its_column_names() -> None:
    # Closed here: Python 3.13 warns of a connection left to the collector (an error here).
    with closing(sqlite3.connect(":memory:", isolation_level=None)) as raw:
        connection = Connection(raw, "sqlite")
        moment = datetime(2026, 12, 2, 10, 0, tzinfo=UTC)
        row = connection.execute(
            "SELECT :moment AS period, 1 AS paused, :now AS now, 'x' AS job", {"moment": moment}
        ).one()
    assert row.period == moment
    assert row.paused is True
    assert isinstance(row.now, datetime)
    assert row.now.tzinfo is UTC
    assert abs(row.now - datetime.now(UTC)) < timedelta(seconds=5)
    assert row._asdict()["job"] == "x"
