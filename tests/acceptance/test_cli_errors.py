"""One error style: `error: …` on one line of stderr and exit 2, for our own refusals and
for click's usage errors alike."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.acceptance.processes import run_command


@pytest.mark.parametrize(
    ("args", "fragments"),
    [
        (["trigger"], ["scheduler trigger", "Missing argument 'JOB'"]),
        (["runs", "--bogus"], ["scheduler runs", "No such option", "--bogus"]),
        (["nosuch"], ["No such command 'nosuch'"]),
        (["runs", "--status", "weird"], ["--status", "weird"]),
        (["plan", "heartbeat", "--count", "0"], ["--count"]),
        (["items", "release", "only-a-job"], ["Missing argument 'KEY'"]),
    ],
)
def test_usage_errors_are_one_line_with_exit_2(
    tmp_path: Path, args: list[str], fragments: list[str]
) -> None:
    result = run_command(args, tmp_path)
    assert result.returncode == 2, result.stderr
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: "), lines[0]
    for fragment in fragments:
        assert fragment in lines[0]
    assert "Usage:" not in lines[0]
