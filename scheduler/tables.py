"""Plain-text tables for the commands: pure, so that a command that prints one imports
nothing else for it."""

from __future__ import annotations

from collections.abc import Sequence


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Columns padded to their widest cell, two spaces apart."""
    widths = [
        max([len(header)] + [len(row[i]) for row in rows]) for i, header in enumerate(headers)
    ]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
        for line in [headers, *rows]
    )
