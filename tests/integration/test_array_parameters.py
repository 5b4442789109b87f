"""Lists travel to PostgreSQL as array text that the statement casts: whatever a text
holds (quotes, backslashes, braces, commas, blanks, the word NULL), and whatever the
element type, the server reads back exactly the list that was sent."""

from __future__ import annotations

import math
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import psycopg
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.states import Reason, RunStatus
from scheduler.store.connection import Connection, array_text
from tests.databases import admin_connection

pytestmark = pytest.mark.postgres

# PostgreSQL's text holds any character but NUL.
texts = st.text(st.characters(exclude_characters="\x00", exclude_categories=["Cs"]))
instants = st.datetimes(
    min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30), timezones=st.just(UTC)
)


@pytest.fixture(scope="module")
def connection() -> Iterator[Connection]:
    raw: psycopg.Connection[Any] = admin_connection()
    try:
        yield Connection(raw, "postgresql")
    finally:
        raw.close()


def _read_back(connection: Connection, values: list[Any], kind: str) -> list[Any]:
    (back,) = connection.execute(f"SELECT CAST(:values AS {kind}[]) AS back", {"values": values})
    result: list[Any] = back.back
    return result


@settings(max_examples=200, deadline=None)
@given(st.lists(st.none() | texts, max_size=12))
def test_any_text_comes_back_as_it_was_sent(connection: Connection, values: list[Any]) -> None:
    assert _read_back(connection, values, "TEXT") == values


@settings(max_examples=200, deadline=None)
@given(st.lists(texts, min_size=1, max_size=12))
def test_a_list_of_texts_alone_comes_back_as_it_was_sent(
    connection: Connection, values: list[str]
) -> None:
    # With no NULL a list of text is joined whole unless a quote or backslash needs
    # escaping: both ways are read back here.
    assert _read_back(connection, values, "TEXT") == values


def test_enums_that_are_text_come_back_as_their_text(connection: Connection) -> None:
    values: list[Any] = [RunStatus.SUCCEEDED, Reason.OVERLAP, "plain", RunStatus.RUNNING]
    assert _read_back(connection, values, "TEXT") == [str(value) for value in values]


@settings(max_examples=50, deadline=None)
@given(
    st.lists(st.integers(-(2**63), 2**63 - 1), min_size=1, max_size=12),
    st.lists(st.booleans(), min_size=1, max_size=12),
    st.lists(instants, min_size=1, max_size=12),
    st.integers(1, 12),
)
def test_lists_of_one_kind_come_back_as_they_were_sent(
    connection: Connection, numbers: list[int], flags: list[bool], moments: list[datetime], n: int
) -> None:
    # Each is joined whole, with no call per element.
    assert _read_back(connection, numbers, "BIGINT") == numbers
    assert _read_back(connection, flags, "BOOLEAN") == flags
    assert _read_back(connection, moments, "TIMESTAMPTZ") == moments
    assert _read_back(connection, [None] * n, "TIMESTAMPTZ") == [None] * n


def test_one_instant_many_times_and_instants_at_other_offsets(connection: Connection) -> None:
    # A burst's periods are one instant, written once; an instant at another offset is
    # written with its own and read back as the same instant.
    due = datetime(2026, 12, 5, 15, 0, tzinfo=UTC)
    assert _read_back(connection, [due] * 1000, "TIMESTAMPTZ") == [due] * 1000
    east = timezone(timedelta(hours=2))
    moments = [due, due.astimezone(east), due.astimezone(east) + timedelta(seconds=1)]
    assert _read_back(connection, moments, "TIMESTAMPTZ") == moments


@settings(max_examples=50, deadline=None)
@given(
    st.lists(st.none() | st.integers(-(2**63), 2**63 - 1), max_size=12),
    st.lists(st.none() | st.booleans(), max_size=12),
)
def test_numbers_and_flags_come_back_as_they_were_sent(
    connection: Connection, numbers: list[int | None], flags: list[bool | None]
) -> None:
    assert _read_back(connection, numbers, "BIGINT") == numbers
    assert _read_back(connection, flags, "BOOLEAN") == flags


@settings(max_examples=50, deadline=None)
@given(st.lists(st.none() | st.floats(allow_nan=True), max_size=12))
def test_floats_come_back_as_the_same_float8(connection: Connection, values: list[Any]) -> None:
    back = _read_back(connection, values, "FLOAT8")
    assert len(back) == len(values)
    for sent, got in zip(values, back, strict=True):
        if sent is not None and math.isnan(sent):
            assert math.isnan(got)
        else:
            assert got == sent


@settings(max_examples=50, deadline=None)
@given(st.lists(st.none() | instants, max_size=12))
def test_instants_come_back_as_the_same_instants(
    connection: Connection, values: list[datetime | None]
) -> None:
    assert _read_back(connection, values, "TIMESTAMPTZ") == values


def test_a_naive_instant_in_a_list_is_refused_before_it_is_sent() -> None:
    with pytest.raises(ValueError, match="naive datetime"):
        array_text([datetime(2026, 12, 2, 12, 0)])  # naive: the bug it refuses


def test_an_empty_list_is_an_empty_array(connection: Connection) -> None:
    assert _read_back(connection, [], "TEXT") == []
