"""Every index equation a shipped sheet displays has the same free indices on
both sides.

The check reads the sheets as a reader does, from their text (build/*.tex and
build/*.md, which ``test_render.py::test_committed_sheets_are_fresh`` keeps
equal to what the code renders), with a parser of its own
(``tests/indexcheck.py``), so that it does not depend on the code path that
printed an equation.  A letter free on the right and not on the left names
nothing: an earlier sheet wrote ``dX_{td} = Σ_h dV_{th} (W_v)_{dh} + … +
Σ_h dQ_{sh} (W_q)_{dh}`` (the third contribution kept its own letters).
"""

from __future__ import annotations

from pathlib import Path

import pytest

import indexcheck

ROOT = Path(__file__).resolve().parents[1]
SHEETS = sorted(p.stem for p in (ROOT / "derivations").glob("*.yaml"))


@pytest.mark.parametrize("fmt", ["tex", "md"])
@pytest.mark.parametrize("name", SHEETS)
def test_free_indices_agree_on_both_sides(name: str, fmt: str) -> None:
    text = (ROOT / "build" / f"{name}.{fmt}").read_text(encoding="utf-8")
    checked, bad = indexcheck.check(text, fmt)
    assert checked > 0, f"{name}.{fmt}: no index equation found (the reader lost the sheet)"
    assert not bad, "\n".join(f"{name}.{fmt}: free {sorted(b.side_free)} on the right of "
                              f"{b.lhs} (free {sorted(b.lhs_free)}): {b.chain}" for b in bad)


def test_the_reader_finds_a_renamed_index() -> None:
    """The attention sheets' old appendix line, written by hand: caught."""
    wrong = (r"\begin{align*}" "\n"
             r"dX_{td} &= \sum_{h} dV_{th}\, (W_{\text{v}})_{dh} \\" "\n"
             r"&\quad + \sum_{h} dQ_{sh}\, (W_{\text{q}})_{dh}" "\n"
             r"\end{align*}")
    checked, bad = indexcheck.check(wrong, "tex")
    assert checked == 1 and len(bad) == 1 and bad[0].side_free == {"s", "t", "d"}
    right = wrong.replace("dQ_{sh}", "dQ_{th}")
    assert indexcheck.check(right, "tex") == (1, [])


def test_the_reader_allows_broadcasts_and_deltas() -> None:
    """A bias broadcast along b, a gradient constant along h and w, and a
    letter a Kronecker delta ties to a left one are index equations that
    hold; a sum's letter is bound."""
    ok = (r"$$H_{bf} = \sum_{d} X_{bd}\, W_{df} + c_{f}$$"
          r"$$dX_{bchw} = \frac{1}{HW}\, dY_{bc}$$"
          r"$$\frac{\partial \mathcal{L}}{\partial X_{b'd'}} = \sum_{b,d} dY_{bd}\, "
          r"\delta_{bb'}\, \delta_{dd'}$$"
          r"$$dE_{vd} = \sum_{b} [v = \mathit{tok}_{b}]\, dX_{bd}$$")
    assert indexcheck.check(ok, "md") == (4, [])
    checked, bad = indexcheck.check(r"$$dE_{vd} = \sum_{b} [u = \mathit{tok}_{b}]\, dX_{bd}$$",
                                    "md")
    assert checked == 1 and len(bad) == 1
