"""What the console ships: the vendored JavaScript is the pinned file, the templates never
turn escaping off, and the policy allows no inline script or style."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from scheduler.console.app import CONTENT_SECURITY_POLICY
from scheduler.console.grid import LEGEND, UPCOMING

CONSOLE = Path(__file__).parents[2] / "scheduler" / "console"


def test_the_vendored_files_are_the_pinned_ones() -> None:
    listed = [
        line.split()
        for line in (CONSOLE / "static" / "VENDORED").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert listed, "VENDORED lists the shipped JavaScript"
    for name, package, version, _inner, sha256 in listed:
        data = (CONSOLE / "static" / name).read_bytes()
        assert hashlib.sha256(data).hexdigest() == sha256, f"{name} is not {package}@{version}"
        assert f"{version}" in data.decode(errors="replace"), f"{name} names its version"


def test_no_template_turns_escaping_off() -> None:
    for template in (CONSOLE / "templates").glob("*.html"):
        text = template.read_text()
        assert not re.search(r"\|\s*safe\b|autoescape\s+false|Markup", text), template.name
        assert not re.search(r"<script>|\son[a-z]+=|style=", text), f"inline code: {template.name}"


def test_the_policy_allows_nothing_inline_or_foreign() -> None:
    assert "unsafe-inline" not in CONTENT_SECURITY_POLICY
    assert "unsafe-eval" not in CONTENT_SECURITY_POLICY
    assert "default-src 'none'" in CONTENT_SECURITY_POLICY
    assert "frame-ancestors 'none'" in CONTENT_SECURITY_POLICY


def test_every_status_has_a_mark_besides_its_colour() -> None:
    """A reader who cannot tell the colours apart tells the cells apart by their marks:
    succeeded plain, upcoming striped, every other status its own glyph."""
    css = (CONSOLE / "static" / "console.css").read_text()
    marks = dict(re.findall(r'\.c\.s-(\w+)::after \{ content: "([^"]+)";', css))
    marked = {str(status) for status in LEGEND} - {"succeeded", str(UPCOMING)}
    assert set(marks) == marked
    assert len(set(marks.values())) == len(marks), "each mark is its own"
    assert "repeating-linear-gradient" in css.split(".s-upcoming {", 1)[1].split("}", 1)[0]
