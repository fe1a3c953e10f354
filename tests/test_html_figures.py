"""The HTML sheet's figures: drawn once a sheet for every format a build
writes (symflops/sheets/plots.py, shared_figures), and slimmed for the
page without changing what they show (symflops/sheets/page.py, slim_svg)."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

from symflops.sheets import plots
from symflops.sheets.page import slim_svg
from symflops.sheets.plots import BarRow, bars_figure, shared_figures

ROWS = (BarRow("attention", 12, 24, 4096, 2048), BarRow("mlp <a&b>", 30, 60, 8192, 1024))


def test_a_figure_is_drawn_once_for_every_format(monkeypatch):
    calls = []
    real = plots._bars

    def counted(*args):
        calls.append(args)
        return real(*args)

    monkeypatch.setattr(plots, "_bars", counted)
    alone = bars_figure(ROWS, "t", "FLOPs", "png")
    assert len(calls) == 1
    with shared_figures():
        png = bars_figure(ROWS, "t", "FLOPs", "png")
        pdf = bars_figure(ROWS, "t", "FLOPs", "pdf")
        svg = bars_figure(ROWS, "t", "FLOPs", "svg")
        other = bars_figure(ROWS[:1], "t", "FLOPs", "png")  # other rows: another figure
    assert len(calls) == 3  # the one alone, the shared one, the other rows
    assert png == alone  # the first format saved is the figure as it always was
    assert pdf.startswith(b"%PDF") and svg.lstrip().startswith(b"<?xml") and other != png
    bars_figure(ROWS, "t", "FLOPs", "svg")  # outside: drawn anew
    assert len(calls) == 4


def _texts(svg: str) -> list[str]:
    root = ET.fromstring(svg)
    return ["".join(e.itertext()) for e in root.iter() if e.tag.endswith("}text")]


def test_slimming_keeps_what_the_image_shows():
    with shared_figures():
        raw = bars_figure(ROWS, "a <title> & more", "FLOPs", "svg").decode()
    svg = raw[raw.index("<svg"):]
    slim = slim_svg(svg)
    assert len(slim) < 0.7 * len(svg)
    assert _texts(slim) == _texts(svg)  # every label, escaped names too
    assert "mlp &lt;a&amp;b&gt;" in slim
    # every reference still has its target; no id is left that nothing cites
    ids = set(re.findall(r' id="([^"]+)"', slim))
    cited = set(re.findall(r"url\(#([^)]+)\)", slim)) | set(re.findall(r'href="#([^"]+)"', slim))
    assert cited <= ids and ids <= cited
    # coordinates to a tenth; classes only for styles the image repeats, defined in it
    assert not re.search(r'\sd="[^"]*\d\.\d\d', slim)
    for name in set(re.findall(r'class="([^"]+)"', slim)):
        assert f".{name}{{" in slim
