"""Where the image's health check asks: the daemon's own --http, else SCHEDULER_HTTP,
a wildcard host on loopback (the running daemon is asked in tests/acceptance)."""

from __future__ import annotations

from scheduler.healthcheck import check, daemon_flag, endpoint, url_of
from scheduler.http_address import HttpAddress


def test_the_daemons_http_flag_in_either_spelling_the_last_one_winning() -> None:
    assert daemon_flag(["scheduler", "run", "--http", "0.0.0.0:8000"]) == "0.0.0.0:8000"
    assert daemon_flag(["/sbin/docker-init", "--", "scheduler", "run", "--http=:81"]) == ":81"
    assert daemon_flag(["scheduler", "run", "--http", ":1", "--http", ":2"]) == ":2"
    assert daemon_flag(["scheduler", "run", "--http"]) is None
    assert daemon_flag(["scheduler", "run", "--workers", "4"]) is None


def test_the_flag_wins_over_the_variable_which_is_read_otherwise() -> None:
    environ = {"SCHEDULER_HTTP": "0.0.0.0:9464"}
    assert endpoint(["scheduler", "run", "--http", ":8000"], environ) == (
        "the daemon's --http",
        ":8000",
    )
    assert endpoint(["scheduler", "run"], environ) == ("SCHEDULER_HTTP", "0.0.0.0:9464")
    assert endpoint([], {}) == ("SCHEDULER_HTTP", None)


def test_a_wildcard_is_asked_on_loopback_and_a_host_as_written() -> None:
    assert url_of(HttpAddress("0.0.0.0", 9464)) == "http://127.0.0.1:9464/healthz"
    assert url_of(HttpAddress("::", 9464)) == "http://[::1]:9464/healthz"
    assert url_of(HttpAddress("10.0.0.5", 9464)) == "http://10.0.0.5:9464/healthz"
    assert url_of(HttpAddress("::1", 80)) == "http://[::1]:80/healthz"


def test_a_bad_value_names_where_it_was_read() -> None:
    code, line = check("the daemon's --http", "localhost")
    assert code == 1
    assert line == (
        "error: the daemon's --http: expected HOST:PORT such as 127.0.0.1:9464, got 'localhost'"
    )
    assert check("SCHEDULER_HTTP", "  ")[0] == 1, "the daemon refuses blanks too"
