"""Django's database connections on the scheduler's worker threads.

Django keeps one connection per thread and closes old or broken ones around each
request (`close_old_connections`). A job runs on a worker thread (or a helper thread
when it has a timeout) that no request cycle serves, so each call begins and ends the
same way: a connection broken by a database restart, or older than `CONN_MAX_AGE`, is
never handed to the next run, and with `CONN_MAX_AGE = 0` (Django's default) none
outlives its run.

A helper thread serves one call and ends: its connections are closed when the call
ends, whatever `CONN_MAX_AGE` says. Left open (a persistent `CONN_MAX_AGE`), each would
hold a database session until the garbage collector found it, one per run of a job
with a timeout. A worker thread serves run after run and keeps at most one.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from django.db import close_old_connections, connections

from scheduler import call_hooks


@contextmanager
def fresh_connections() -> Iterator[None]:
    close_old_connections()
    try:
        yield
    finally:
        if call_hooks.last_on_its_thread():
            connections.close_all()
        else:
            close_old_connections()
