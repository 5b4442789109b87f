"""`--http HOST:PORT`: what is accepted, and the one-line error for the rest."""

from __future__ import annotations

import pytest

from scheduler.errors import UserError
from scheduler.http import HttpAddress, parse_address


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("127.0.0.1:9464", HttpAddress("127.0.0.1", 9464)),
        ("localhost:0", HttpAddress("localhost", 0)),
        (":9464", HttpAddress("0.0.0.0", 9464)),
        ("[::1]:9464", HttpAddress("::1", 9464)),
        (" 0.0.0.0:80 ", HttpAddress("0.0.0.0", 80)),
    ],
)
def test_addresses_that_are_accepted(raw: str, expected: HttpAddress) -> None:
    assert parse_address(raw) == expected


@pytest.mark.parametrize("raw", ["9464", "localhost", "host:port", "host:70000", "::1:9464", ""])
def test_addresses_that_are_refused(raw: str) -> None:
    with pytest.raises(UserError, match=r"^--http: expected HOST:PORT"):
        parse_address(raw)


def test_an_address_prints_as_it_is_written() -> None:
    assert str(HttpAddress("::1", 9464)) == "[::1]:9464"
    assert str(HttpAddress("127.0.0.1", 80)) == "127.0.0.1:80"
