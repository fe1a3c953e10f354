"""The layout of the sheets: no line of a shipped PDF runs into the margin,
and a derivation's notes stand in one column in both formats.

The overfull boxes are pdflatex's own report (its log); the widths the
layout estimates are checked against the widths pdflatex measures.
"""

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

import symflops
from symflops.commands.pdf import compile_pdf_log
from symflops.count.cost import costs
from symflops.count.explain import explain
from symflops.derive.patterns import with_patterns
from symflops.sheets.layout import break_points, lay_out, parse, split_right, width
from symflops.sheets.notation import step_note
from symflops.sheets.render import render

from committed import committed_pdf, committed_sheet

ROOT = Path(__file__).resolve().parent.parent
DERIVATIONS = sorted((ROOT / "derivations").glob("*.yaml"))
NEEDS_PDF = os.environ.get("CI") == "true"  # CI installs TeX Live; there the PDF check must run
HAS_PDFLATEX = shutil.which("pdflatex") is not None
needs_pdflatex = pytest.mark.skipif(not HAS_PDFLATEX and not NEEDS_PDF,
                                    reason="pdflatex not installed")

#: An overfull box up to this wide is invisible; beyond it a line runs into the margin.
TOLERANCE_PT = 1.0
OVERFULL = re.compile(r"^Overfull \\hbox \((?P<pt>[\d.]+)pt too wide\) "
                      r"(?:in paragraph at lines (?P<a>\d+)--\d+|in alignment at lines (?P<b>\d+)--\d+"
                      r"|detected at line (?P<c>\d+))", re.M)


def sheets(path):
    d = with_patterns(symflops.derive(symflops.load(path)))
    c = explain(d, costs(d), ())
    return render(d, c, "md"), render(d, c, "tex")


def committed(path):
    """A shipped declaration's committed sheets, ``build/NAME.md`` and ``.tex``
    (tests/committed.py), so the layout is checked on them without rendering
    every sheet again."""
    return committed_sheet(path.stem, "md"), committed_sheet(path.stem, "tex")


def overfull(log):
    """(width in pt, line of the .tex) of each overfull hbox in a pdflatex log."""
    return [(float(m["pt"]), int(m["a"] or m["b"] or m["c"])) for m in OVERFULL.finditer(log)]


def test_the_log_parser_reads_pdflatex_warnings():
    # the three forms pdfTeX writes (paragraph, alignment, display), from its logs
    log = ("Overfull \\hbox (35.53064pt too wide) in paragraph at lines 23--67\n [] \n"
           "Overfull \\hbox (0.4pt too wide) detected at line 2\n"
           "Overfull \\hbox (12.0pt too wide) in alignment at lines 5--9\n"
           "Overfull \\vbox (3.0pt too high) has occurred while \\output is active\n")
    assert overfull(log) == [(35.53064, 23), (0.4, 2), (12.0, 5)]


@needs_pdflatex
def test_the_check_sees_a_line_in_the_margin():
    # a display that cannot fit must show up, or the sheet test below proves nothing
    tex = ("\\documentclass{article}\\usepackage{amsmath}\\begin{document}\n"
           "\\begin{align*}a &= " + " + ".join(["x"] * 80) + "\\end{align*}\n\\end{document}\n")
    _, log = compile_pdf_log(tex, "wide")
    assert [line for pt, line in overfull(log) if pt > TOLERANCE_PT] == [2]


# A known defect, kept visible: mamba2_ssd's backward table (five-letter index
# sums) runs 1 to 6 pt into the margin since the sheets' student order;
# deltanet_chunk's loop rows 32 to 51 pt.  Their test asserts the defect is
# still there, so an entry must go when its table is folded.
_MARGIN_KNOWN: set[str] = set()


@needs_pdflatex
@pytest.mark.parametrize("path", DERIVATIONS, ids=[p.stem for p in DERIVATIONS])
def test_every_shipped_pdf_compiles_with_no_line_in_the_margin(path):
    """Each committed sheet compiles (one pdflatex run per sheet in the suite:
    the PDF and the log this reads), no line runs into the margin, and
    pdflatex asks for no rerun."""
    tex, pdf, log = committed_pdf(path.stem)
    assert pdf.startswith(b"%PDF")
    lines = tex.splitlines()
    bad = [f"{path.stem}.tex:{line}: {pt}pt too wide: {lines[line - 1][:120]}"
           for pt, line in overfull(log) if pt > TOLERANCE_PT]
    if path.stem in _MARGIN_KNOWN:
        assert bad, f"{path.stem} no longer runs into the margin: take it out of _MARGIN_KNOWN"
    else:
        assert not bad, "\n".join(bad)
    # a repeated table header is set at the widths of its columns only once pdflatex has rerun
    assert "Rerun LaTeX" not in log, f"{path.stem}: pdflatex still asks for a rerun"


# -- the notes' column ------------------------------------------------------

NOTE = re.compile(r"\\text\{\((?:[^{}]|\{[^{}]*\})*")


def aligned_blocks(text, env):
    return [[row.strip() for row in re.split(r"\\\\\s*\n", body) if row.strip()]
            for body in re.findall(rf"\\begin\{{{env}\}}(.*?)\\end\{{{env}\}}", text, re.S)]


def notes(block):
    """Each note of a block with where it stands: ``side`` (the block's fourth
    column) or ``below`` (a row of its own in the second column)."""
    out = []
    for row in block:
        x = parse(row)
        if x.note:
            out.append(("side", x.note))
        elif not x.left and x.right.startswith(r"\qquad \text{("):
            out.append(("below", x.right[len(r"\qquad "):]))
        else:
            assert not NOTE.search(row), f"a note outside the notes' column: {row}"
    return out


@pytest.mark.parametrize("path", DERIVATIONS, ids=[p.stem for p in DERIVATIONS])
def test_every_note_stands_in_its_blocks_column_in_both_formats(path):
    md, tex = committed(path)
    md_blocks = [notes(b) for b in aligned_blocks(md, "aligned")]
    tex_blocks = [notes(b) for b in aligned_blocks(tex, "align\\*")]
    md_blocks, tex_blocks = [b for b in md_blocks if b], [b for b in tex_blocks if b]
    assert [[n for _, n in b] for b in md_blocks] == [[n for _, n in b] for b in tex_blocks]
    for b in md_blocks:
        assert {mode for mode, _ in b} == {"side"}  # a web page has no width to keep to
    for b in tex_blocks:
        assert len({mode for mode, _ in b}) == 1, b  # one column per block, whichever


def test_ffn_derivation_has_its_notes_beside_the_lines():
    md, tex = sheets(ROOT / "derivations" / "ffn.yaml")
    for text in (md, tex):
        # the derivation is in the first op's own names: H = X W_in
        assert (r"&= \sum_{f} dH_{b'f}\, (W_{\text{in}})_{d'f}&&\text{(contract the deltas)}") in text
        assert (r"&&\text{(differentiate: }\partial X_{bd}/\partial X_{b'd'} = "
                r"\delta_{bb'}\,\delta_{dd'}\text{)}") in text


# -- splitting long lines ---------------------------------------------------

def test_a_line_parses_into_left_right_and_note():
    x = parse(r"\frac{a}{b} &= x + y&&\text{(chain rule)}")
    assert (x.left, x.right, x.note) == (r"\frac{a}{b} ", "= x + y", r"\text{(chain rule)}")
    assert parse(r"&\quad + z") == type(x)("", r"\quad + z", "")
    # an & inside braces is not a column
    assert parse(r"a &= \begin{cases}1 & x\end{cases}").right == r"= \begin{cases}1 & x\end{cases}"


def test_sums_break_only_at_their_top_level_operators():
    right = r"= -a\, b + \frac{c + d}{e} - \left(f + g\right) (h - k) + \sum_{i} x_{i-1}"
    cuts = break_points(right)
    pieces = [right[i:j] for i, j in zip([0] + cuts, cuts + [len(right)])]
    # by hand: the leading = and unary -, and every + or - inside a group, are not breaks
    assert pieces == [r"= -a\, b ", r"+ \frac{c + d}{e} ", r"- \left(f + g\right) (h - k) ",
                      r"+ \sum_{i} x_{i-1}"]


def test_a_split_keeps_every_term_whole_and_in_order():
    right = "= " + " + ".join(rf"x_{{{k}}} y_{{{k}}}" for k in range(30))
    pieces = split_right(right, 12.0)
    assert len(pieces) > 1
    assert " ".join(pieces).split() == right.split()
    assert all(p.startswith("+ ") for p in pieces[1:])
    assert all(width(p) <= 12.0 for p in pieces)
    assert split_right(r"= x_{1} y_{1}", 1.0) == [r"= x_{1} y_{1}"]  # one term stays whole


def test_notes_go_below_together_when_a_term_leaves_no_room_beside_it():
    wide = r"&= " + r"\,".join(rf"\delta_{{i{k} i{k}'}}" for k in range(40))
    lines = [r"a &= b" + step_note("chain rule"), wide + step_note("contract the deltas")]
    assert lay_out(lines) == [r"a &= b", r"&\qquad \text{(chain rule)}", wide,
                              r"&\qquad \text{(contract the deltas)}"]
    narrow = [r"a &= b" + step_note("chain rule"), r"&= c" + step_note("rename")]
    assert lay_out(narrow) == narrow


def test_a_long_sum_beside_a_note_is_continued_on_lines_of_its_own():
    long = "&= " + " + ".join(f"x_{{{k}}}" for k in range(40)) + step_note("rename")
    rows = lay_out([long])
    assert len(rows) > 1 and rows[0].endswith(r"&&\text{(rename)}")
    assert all(r.startswith(r"&\quad + ") for r in rows[1:])


@needs_pdflatex
def test_estimated_widths_are_close_to_the_widths_pdflatex_sets(tmp_path):
    samples = [r"\sum_{i,j,k} dY_{ik}\, W_{jk}\, \delta_{ii'}\, \delta_{jj'}",
               r"\frac{\partial L}{\partial X_{i'j'}}", r"\text{(contract the deltas)}",
               r"= (\mathrm{rstd}_{\hat{\mathit{Xn}}})_{s}\delta_{dd'}\delta_{ss'} - "
               r"\frac{(\mathrm{rstd}_{\hat{\mathit{Xn}}})_{s}\delta_{ss'}}{D}",
               r"= \frac{x}{2} \left(\tanh{\left(\frac{\sqrt{2}}{\sqrt{\pi}} x\right)} + 1\right)"]
    body = "\n".join(rf"\settowidth{{\w}}{{$\displaystyle {s}$}}\typeout{{W{k}=\the\w}}"
                     for k, s in enumerate(samples))
    tex = ("\\documentclass[11pt]{article}\\usepackage{lmodern}\\usepackage[T1]{fontenc}"
           "\\usepackage{amsmath}\\newlength\\w\\begin{document}\n" + body
           + "\n\\typeout{EM=\\the\\fontdimen6\\font}x\\end{document}\n")
    _, log = compile_pdf_log(tex, "widths")
    em = float(re.search(r"EM=([\d.]+)pt", log)[1])
    real = {int(k): float(v) / em for k, v in re.findall(r"W(\d+)=([\d.]+)pt", log)}
    for k, s in enumerate(samples):
        assert 0.8 <= width(s) / real[k] <= 1.25, (s, width(s), real[k])


# -- a long layer's tables --------------------------------------------------

from symflops.sheets.tables import Column, PT_PER_EM, lay_table  # noqa: E402


def _columns():
    # a 100 pt formula column and a 40 pt count column that may grow to 60 pt
    return [Column("100pt", 100.0, 1.0, "formula"), Column("40pt", 40.0, 1.0, "count", "r", 60.0)]


def test_a_table_whose_cells_fit_keeps_its_default_widths():
    t = lay_table(_columns(), [[r"x_{i}", "2N"]], "footnotesize", ["FLOPs"], 3.0)
    assert t["widths"] == ["100pt", "40pt"] and t["rows"] == [{"cells": [r"x_{i}", "2N"], "below": None}]


def test_a_count_wider_than_its_column_widens_it_or_goes_below_its_row():
    em = PT_PER_EM["footnotesize"]
    mid = "BKHPN(K - 1)"          # one term: 6.09 em of the estimate, 66 pt at 8 pt
    assert width(mid) * em > 60.0  # 66 pt > 60 pt: below its row, whole, never split in its parentheses
    t = lay_table(_columns(), [[r"x_{i}", mid]], "footnotesize", ["FLOPs"], 3.0)
    assert t["rows"][0]["cells"][1] == "" and t["rows"][0]["below"] == mid + r"\ \text{FLOPs}"
    small = "KQ(Q - 1)"           # 4.35 em: 47.3 pt, over 40 pt and under the cap: the column widens
    t = lay_table(_columns(), [[r"x_{i}", small]], "footnotesize", ["FLOPs"], 3.0)
    assert t["rows"][0] == {"cells": [r"x_{i}", small], "below": None}
    grown = float(t["widths"][1][:-2])
    assert width(small) * em <= grown <= 60.0  # and the formula column gave what it took
    assert abs(float(t["widths"][0][:-2]) + grown - 140.0) <= 0.2


def test_a_block_of_statements_is_continued_as_a_derivation_is():
    body = r"N_{i} &= " + " + ".join(f"x_{{{k}}}" for k in range(30))
    cell = r"\begin{aligned} " + body + r" \end{aligned}"
    t = lay_table(_columns(), [[cell, "0"]], "footnotesize", ["FLOPs"], 3.0)
    out = t["rows"][0]["cells"][0]
    assert out.startswith(r"\begin{aligned}[t] N_{i} &= x_{0}") and r"\\ &\quad + " in out


@needs_pdflatex
def test_a_counts_width_in_the_tables_fonts_is_never_estimated_short():
    # the counts of the long layers' tables, set by pdflatex in the sheet's fonts
    # (10 pt document: \small is 9 pt, \footnotesize 8 pt)
    counts = ["BKHPN(K - 1)", "2QHP(KQ + 3KE - 3E)", r"2 E H P \max\left(0, K - 2\right)",
              r"\tfrac{1}{2}BKQH(Q + 1)", "BSNE(S + 1)", "SN(S + 1)(C + 2R)", "3BS(2D + 1)"]
    body = "\n".join(rf"{{\{size}\settowidth{{\w}}{{${s}$}}\typeout{{W{size}{k}=\the\w}}}}"
                     for size in PT_PER_EM for k, s in enumerate(counts))
    tex = ("\\documentclass[10pt]{article}\\usepackage{lmodern}\\usepackage[T1]{fontenc}"
           "\\usepackage{amsmath}\\newlength\\w\\begin{document}\n" + body + "\nx\\end{document}\n")
    _, log = compile_pdf_log(tex, "counts")
    real = {(size, int(k)): float(v) for size, k, v in re.findall(r"W([a-z]+)(\d+)=([\d.]+)pt", log)}
    assert len(real) == len(counts) * len(PT_PER_EM)
    for (size, k), pt in real.items():
        estimate = width(counts[k]) * PT_PER_EM[size]
        assert pt <= estimate <= 1.4 * pt, (size, counts[k], estimate, pt)
