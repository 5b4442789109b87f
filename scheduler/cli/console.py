"""`scheduler console`: the web console against the database alone, with no node, so it
works while every node is down. It registers itself on the `main` group of
`scheduler.cli`."""

from __future__ import annotations

import threading

import click

from scheduler import console, logs
from scheduler import http as operations_http
from scheduler.cli.options import database_option, logging_options
from scheduler.cli.signals import install_signal_handlers
from scheduler.errors import UserError
from scheduler.store import migrate as migrations
from scheduler.store.database import open_database

DEFAULT_CONSOLE_HTTP = "127.0.0.1:8080"


@click.command(name="console")
@database_option
@logging_options
@click.option(
    "--http",
    envvar="SCHEDULER_CONSOLE_HTTP",
    default=DEFAULT_CONSOLE_HTTP,
    show_default=True,
    show_envvar=True,
    help="HOST:PORT to serve the console on; 0.0.0.0:8080 for every interface.",
)
def serve_console(database_url: str, log_format: str, log_level: str, http: str) -> None:
    """Serve the web console (and /healthz, /readyz, /metrics) until SIGTERM or SIGINT.

    Read-only unless SCHEDULER_CONSOLE_AUTH names credentials; trigger, rerun and
    backfill are requests that a running node carries out.
    """
    logs.configure(logs.LogFormat(log_format), log_level)
    server = operations_http.bind(http)
    assert server is not None, "--http has a default"
    database = open_database(database_url, connections=4)
    try:
        migrations.require_current_schema(database)
        if console.load(database) is None:
            raise UserError(f"console: the web console needs its extra: {console.INSTALL_HINT}")
        stop = threading.Event()
        install_signal_handlers(stop.set)
        server.start(database, None)
        stop.wait()
        server.stop()
    finally:
        database.dispose()
