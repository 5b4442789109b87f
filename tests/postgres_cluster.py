"""A throwaway PostgreSQL server of a test's own, for faults the shared server must never
see: a restart, a fast or immediate shutdown, a freeze (SIGSTOP of the postmaster and
its backends).

`initdb` on a free loopback port, in a temporary folder, as the `postgres` user when the
tests run as root (the server refuses to run as root). The scheduler's schema is
migrated into a database of the cluster; `url` names it.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import psycopg
import pytest

from scheduler.store import migrate
from scheduler.store.database import open_database

DATABASE = "scheduler"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _binaries() -> Path:
    """The folder of the newest installed server's programs (initdb, pg_ctl)."""
    found = shutil.which("pg_ctl")
    if found is not None:
        return Path(found).resolve().parent
    versions = sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=lambda p: int(p.parent.name))
    if not versions:
        pytest.fail("no PostgreSQL server programs (initdb, pg_ctl) are installed", pytrace=False)
    return versions[-1]


class Cluster:
    """One server: `start`, `stop(mode)`, `restart`, `freeze`/`thaw`, `terminate_all`.
    `binaries`: the folder of another server's programs (another major version)."""

    def __init__(self, folder: Path, binaries: Path | None = None) -> None:
        self.folder = folder
        self.data = folder / "data"
        self.port = _free_port()
        self.log = folder / "server.log"
        self._bin = binaries or _binaries()
        self._as_postgres = os.geteuid() == 0
        self.url = f"postgresql://postgres@127.0.0.1:{self.port}/{DATABASE}"
        self.admin_url = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _command(self, *args: str) -> list[str]:
        return ["runuser", "-u", "postgres", "--", *args] if self._as_postgres else list(args)

    def _run(self, *args: str) -> None:
        done = subprocess.run(self._command(*args), capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(args)} failed: {done.stdout}{done.stderr}")

    def create(self) -> None:
        if self._as_postgres:
            shutil.chown(self.folder, "postgres")
        self._run(
            str(self._bin / "initdb"),
            "-D",
            str(self.data),
            "-A",
            "trust",
            "-U",
            "postgres",
            "--no-sync",
            "--encoding=UTF8",
            "--locale=C",
        )
        settings = [
            "listen_addresses = '127.0.0.1'",
            f"port = {self.port}",
            f"unix_socket_directories = '{self.folder}'",
            "fsync = off",
            "synchronous_commit = off",
            "full_page_writes = off",
            "max_connections = 200",
            "shared_buffers = 32MB",
            "log_min_messages = warning",
            # When each transaction committed (pg_xact_commit_timestamp): what a test
            # compares with what another statement's snapshot could see.
            "track_commit_timestamp = on",
        ]
        with (self.data / "postgresql.conf").open("a") as conf:
            conf.write("\n".join(settings) + "\n")
        self.start()
        with psycopg.connect(self.admin_url, autocommit=True) as admin:
            admin.execute(f"CREATE DATABASE {DATABASE}")
        database = open_database(self.url, must_exist=False)
        try:
            migrate.upgrade(database)
        finally:
            database.dispose()

    def start(self) -> None:
        self._run(
            str(self._bin / "pg_ctl"), "-D", str(self.data), "-l", str(self.log), "-w", "start"
        )

    def stop(self, mode: str = "fast") -> None:
        """Stop the server: `fast` (sessions told and ended), `immediate` (no checkpoint)."""
        self._run(str(self._bin / "pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "stop")

    def restart(self, down_for: float = 0.0, mode: str = "fast") -> None:
        self.stop(mode)
        time.sleep(down_for)
        self.start()

    def running(self) -> bool:
        return (self.data / "postmaster.pid").exists()

    def _pids(self) -> list[int]:
        """The postmaster and its children."""
        postmaster = int((self.data / "postmaster.pid").read_text().split()[0])
        children = subprocess.run(
            ["pgrep", "-P", str(postmaster)], capture_output=True, text=True, check=False
        ).stdout.split()
        return [postmaster, *(int(pid) for pid in children)]

    def freeze(self) -> None:
        """SIGSTOP the server and every backend: it holds its sockets and answers nothing."""
        for pid in self._pids():
            os.kill(pid, signal.SIGSTOP)

    def thaw(self) -> None:
        for pid in self._pids():
            os.kill(pid, signal.SIGCONT)

    def terminate_all(self, database: str = DATABASE, application_name: str = "%") -> int:
        """`pg_terminate_backend` every other session of `database` (whose application
        name is LIKE `application_name`); how many."""
        with psycopg.connect(self.admin_url, autocommit=True) as admin:
            row = admin.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
                " WHERE datname = %s AND pid <> pg_backend_pid()"
                " AND application_name LIKE %s",
                (database, application_name),
            ).fetchone()
        return int(row[0]) if row else 0

    def destroy(self) -> None:
        if self.running():
            with suppress(OSError, ValueError):
                self.thaw()
            with suppress(RuntimeError):
                self.stop("immediate")
        shutil.rmtree(self.folder, ignore_errors=True)


@contextmanager
def throwaway_cluster(binaries: Path | None = None) -> Iterator[Cluster]:
    """A new server with the scheduler's schema in database `scheduler`; removed after."""
    folder = Path(tempfile.mkdtemp(prefix="scheduler-pg-"))
    folder.chmod(0o755)
    cluster = Cluster(folder, binaries)
    try:
        cluster.create()
        yield cluster
    finally:
        cluster.destroy()
