"""Sheets that teach (issue 27): the regressions a lecturer found on the
shipped sheets, each checked at the mechanism that produced it.

Expected values are written by hand here (the arithmetic in comments) or
come from the declaration's own dims; none is read back from the code under
test.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import sympy

import symflops
from symflops.count.cost import costs
from symflops.count.explain import explain
from symflops.derive.patterns import with_patterns
from symflops.sheets.render import render

ROOT = Path(__file__).resolve().parents[1]
SHEETS = sorted(p.stem for p in (ROOT / "derivations").glob("*.yaml"))


def derived(name: str):
    return with_patterns(symflops.derive(symflops.load(str(ROOT / "derivations" / f"{name}.yaml"))))


def sheet(name: str, fmt: str = "md") -> str:
    d = derived(name)
    return render(d, explain(d, costs(d)), fmt)


# -- item 4: a matrix form's note never lands inside a sum ---------------------------------

def test_a_sum_of_flattened_products_carries_its_note_once_after_the_sum() -> None:
    text = sheet("llama")
    # dYn = dH W_up^T + dU W_gate^T, both with (b, s) flattened: the note once, at the end
    assert (r"dH\, W_{\text{up}}^\top + dU\, W_{\text{gate}}^\top \quad (b, s) "
            r"\text{ flattened}$") in text
    assert r"\text{ flattened} +" not in text


@pytest.mark.parametrize("fmt", ["md", "tex"])
@pytest.mark.parametrize("name", SHEETS)
def test_no_shipped_sheet_has_a_note_inside_a_sum(name: str, fmt: str) -> None:
    text = (ROOT / "build" / f"{name}.{fmt}").read_text(encoding="utf-8")
    assert not re.search(r"\\text\{ flattened\}\s*[+-]", text)
    assert not re.search(r"\\text\{per \} \S+\s*[+-] ", text)
