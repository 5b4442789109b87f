"""What the console ships: the vendored JavaScript is the pinned file, the templates never
turn escaping off, and the policy allows no inline script or style."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from scheduler.console.app import CONTENT_SECURITY_POLICY

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
