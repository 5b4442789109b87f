"""The `scheduler` command line (see `scheduler.cli.main`)."""

from __future__ import annotations

from scheduler.cli.main import main

__all__ = ["main"]
