"""A node's identity (`config.node_identity`): the name `--node-name` gives is kept, the
id is that name and a suffix new with each process (docs/reference/configuration.md,
"The node name"), so that a restarted node is never taken for the one that died."""

from __future__ import annotations

import os
import re
import socket
from pathlib import Path

from click.testing import CliRunner

from scheduler.cli import main
from scheduler.config import node_identity

ROOT = Path(__file__).resolve().parents[2]


def test_a_given_name_is_kept_and_the_id_adds_a_suffix_new_with_each_process() -> None:
    first, second = node_identity("r1"), node_identity("r1")
    assert (first.name, first.given_name) == ("r1", "r1")
    assert re.fullmatch(r"r1-[0-9a-f]{6}", first.id), first.id
    assert second.name == "r1"
    assert second.id != first.id, "a restart under the same name is another node"
    assert (first.host, first.pid) == (socket.gethostname(), os.getpid())


def test_without_a_name_the_name_is_the_id() -> None:
    node = node_identity(None)
    assert re.fullmatch(rf"{re.escape(socket.gethostname())}-{os.getpid()}-[0-9a-f]{{6}}", node.id)
    assert (node.name, node.given_name) == (node.id, None)


def test_the_help_and_the_reference_say_why_the_id_has_a_suffix() -> None:
    shown = CliRunner().invoke(main, ["run", "--help"], terminal_width=200)
    assert "Its id, in the logs and as a run's holder, is NAME-RANDOM" in shown.output
    page = (ROOT / "docs" / "reference" / "configuration.md").read_text()
    section = page[page.index("## The node name") :]
    assert "`r1-313e13`" in section
    assert "`given_name`" in section
