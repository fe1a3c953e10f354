"""Every Markdown table of every committed sheet is whole: each row has the
header's number of cells, and nothing breaks a row over two lines (a sentence
inside a row split llama's forward table over 40 lines)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

BUILD = Path(__file__).resolve().parent.parent / "build"


def _cells(row: str) -> int:
    """The cells of a table row: its '|' not escaped and not inside $...$ math."""
    row = re.sub(r"\$[^$]*\$", "", row.replace(r"\|", ""))
    return row.count("|") - 1


@pytest.mark.parametrize("sheet", sorted(p.name for p in BUILD.glob("*.md")))
def test_tables_are_whole(sheet: str) -> None:
    lines = (BUILD / sheet).read_text().splitlines()
    width = None
    for n, line in enumerate(lines, 1):
        if line.startswith("|"):
            if width is None:
                width = _cells(line)
            assert _cells(line) == width, (sheet, n, line[:120])
        else:
            assert not line.lstrip().startswith("| $"), (sheet, n, line[:120])
            width = None


@pytest.mark.parametrize("sheet", sorted(p.name for p in BUILD.glob("*.tex")))
def test_no_two_sentences_run_together(sheet: str) -> None:
    """A template line ending in a block tag loses its newline, so a sentence
    after it ran into the one before: llama's setup read 'per key/value
    head.Defined dims'. A module path such as torch.nn.GroupNorm is not prose."""
    glued = [m for m in re.findall(r"\S*[a-z)]\.[A-Z][a-z]+", (BUILD / sheet).read_text())
             if ".nn." not in m]
    assert not glued, glued
