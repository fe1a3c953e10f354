"""symflops/sheets/mathlayouts.py: one layout of each math text across
matplotlib's renderers, within a block, and matplotlib as it was outside it.

The oracle is matplotlib itself: a figure saved inside the block is byte for
byte the figure saved outside it, in every format and under other math
settings; and the block does what it is for (a second save parses nothing)."""

import io
import os

import matplotlib
import pytest
from matplotlib.figure import Figure
from matplotlib.mathtext import MathTextParser

from symflops.sheets.mathlayouts import shared_math_layouts


def saved(fmt, title=r"$\sqrt{x}$ and $2^{7}$"):
    """A log-log figure (its ticks are math text, $10^{k}$) as ``fmt`` bytes."""
    fig = Figure(figsize=(4, 3), dpi=100, layout="constrained")
    ax = fig.subplots()
    ax.plot([1, 1e3], [1, 1e2])
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_title(title)
    buf = io.BytesIO()
    metadata = {"svg": {"Date": None}, "pdf": {"CreationDate": None},
                "png": {"Software": None}}[fmt]
    with matplotlib.rc_context({"svg.hashsalt": "t"}):
        fig.savefig(buf, format=fmt, metadata=metadata)
    return buf.getvalue()


@pytest.mark.parametrize("fmt", ["svg", "png"])  # outlines (SVG and PDF) and an image (PNG)
def test_a_figure_saved_within_the_block_is_the_figure_saved_without_it(fmt):
    before = saved(fmt)
    with shared_math_layouts():
        first, again = saved(fmt), saved(fmt)
    assert first == before and again == before


def test_other_math_settings_are_not_given_the_layouts_of_the_first():
    with matplotlib.rc_context({"mathtext.default": "bf"}):
        bold = saved("svg")
    assert bold != saved("svg")  # the setting changes the drawing, so the check below can fail
    with shared_math_layouts():
        saved("svg")  # the default settings' layouts, kept
        with matplotlib.rc_context({"mathtext.default": "bf"}):
            assert saved("svg") == bold


def test_the_second_save_parses_nothing_and_outside_the_block_matplotlib_is_as_it_was():
    original = MathTextParser.__dict__["_parse_cached"]
    calls = []
    real = original.__wrapped__

    def counting(*args):
        calls.append(args[1])
        return real(*args)

    original_wrapped = original.__wrapped__
    try:
        original.__wrapped__ = counting  # what the block reads as matplotlib's parse
        with shared_math_layouts():
            assert MathTextParser.__dict__["_parse_cached"] is not original
            saved("pdf", r"$\beta^{42}$")  # a math text no other test lays out
            first = len(calls)
            saved("pdf", r"$\beta^{42}$")
        assert first > 0 and len(calls) == first
    finally:
        original.__wrapped__ = original_wrapped
    assert MathTextParser.__dict__["_parse_cached"] is original


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork() on this system")
def test_a_forked_process_lays_out_again_what_its_parent_laid_out():
    """A layout holds matplotlib's font objects, which must not cross a fork
    (their open file is shared with the parent, offset and all).  Two build
    workers forked from a process that had drawn figures (a test worker; a
    notebook) read glyphs through the parent's fonts at once: PNG figures came
    out with other bytes, or the build stopped on "FT_Load_Glyph failed ...
    invalid outline" (exit 70).  So a child lays out afresh what its parent
    had laid out, while the parent still shares it between parsers."""
    text = r"$\gamma^{17}$"   # a math text no other test lays out
    with shared_math_layouts():
        before = MathTextParser("path").parse(text, 72)
        assert MathTextParser("path").parse(text, 72) is before  # kept: the check below can fail
        pid = os.fork()
        if pid == 0:  # the child: report by exit status, never return into pytest
            try:
                os._exit(0 if MathTextParser("path").parse(text, 72) is not before else 1)
            except BaseException:
                os._exit(2)
        _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
