"""CHANGELOG.md keeps the shape of Keep a Changelog, so that a reader (or a release
tool) finds each version's changes under one heading per kind."""

from __future__ import annotations

import re
from pathlib import Path

CHANGELOG = (Path(__file__).parents[2] / "CHANGELOG.md").read_text()
KINDS = ("Added", "Changed", "Deprecated", "Removed", "Fixed", "Security")
VERSION = re.compile(r"^## \[(Unreleased|\d+\.\d+\.\d+)\]( - \d{4}-\d{2}-\d{2})?$")


def _versions() -> list[tuple[str, str]]:
    parts = re.split(r"^(## .*)$", CHANGELOG, flags=re.MULTILINE)
    return list(zip(parts[1::2], parts[2::2], strict=True))


def test_each_version_is_named_as_keep_a_changelog_names_it() -> None:
    versions = _versions()
    assert versions, "no version heading"
    assert versions[0][0] == "## [Unreleased]"
    for heading, _ in versions:
        assert VERSION.match(heading), heading


def test_each_version_has_one_heading_per_kind_of_change() -> None:
    for heading, body in _versions():
        kinds = re.findall(r"^### (.*)$", body, flags=re.MULTILINE)
        assert kinds, heading
        assert all(kind in KINDS for kind in kinds), (heading, kinds)
        assert len(kinds) == len(set(kinds)), (heading, kinds)
