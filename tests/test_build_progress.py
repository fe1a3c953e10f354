"""What ``symflops build`` says: ``[k/n] name`` per declaration (a bar on a
terminal, plain lines in a pipe), a summary that counts every file written by
kind (checked against the files in the output directory), a missing pdflatex
said once, and one worker per core by default."""

from __future__ import annotations

import argparse
import collections
import io
import os
import shutil
from pathlib import Path

import pytest

from symflops.commands import build as build_module
from symflops.commands import pool as pool_module
from symflops.commands.build import build
from symflops.commands.cli import build_parser

ROOT = Path(__file__).resolve().parent.parent
SMALL = ["ffn", "swiglu", "lora"]


@pytest.fixture
def src(tmp_path):
    d = tmp_path / "src"
    d.mkdir()
    for name in SMALL:
        shutil.copy(ROOT / "derivations" / f"{name}.yaml", d / f"{name}.yaml")
    return d


class Terminal(io.StringIO):
    def isatty(self):
        return True


def test_progress_lines_in_a_pipe_and_a_summary_of_every_file_by_kind(src, tmp_path):
    out, err = io.StringIO(), io.StringIO()
    result = build(str(src), str(tmp_path / "out"), pdf=False, jobs=1, stdout=out, stderr=err)
    lines = out.getvalue().splitlines()
    assert [l for l in lines if l.startswith("[")] == ["[1/3] ffn", "[2/3] lora", "[3/3] swiglu"]
    assert lines.index("[2/3] lora") < lines.index(f"wrote {tmp_path / 'out' / 'lora.md'}")
    on_disk = collections.Counter(os.path.splitext(f)[1] for f in os.listdir(tmp_path / "out"))
    sheets = collections.Counter(os.path.splitext(p)[1] for p in result.written)
    figures = collections.Counter(os.path.splitext(p)[1] for p in result.figures)
    assert sheets + figures == on_disk  # every file written is counted, once
    assert sheets == {".md": 3, ".tex": 3}
    assert result.summary() == (
        f"{sum(on_disk.values())} files written (3 .md, 3 .tex sheets; "
        + ", ".join(f"{figures[e]} {e}" for e in (".pdf", ".png") if figures[e])
        + " figures), 0 declarations failed")
    assert err.getvalue() == ""


def test_on_a_terminal_one_line_is_redrawn_with_a_bar(src, tmp_path):
    out = Terminal()
    build(str(src), str(tmp_path / "out"), pdf=False, jobs=1, stdout=out, stderr=io.StringIO())
    text = out.getvalue()
    assert "wrote" not in text and text.count("\n") == 1 and text.endswith("\n")
    frames = text.rstrip("\n").split("\r")[1:]
    assert [f.split()[0] for f in frames] == ["[1/3]", "[2/3]", "[3/3]"]
    assert frames[-1].split()[1] == "#" * build_module.Progress.WIDTH
    assert frames[-1].split()[2] == "swiglu"


def test_a_missing_pdflatex_is_said_once_with_the_install_hint(src, tmp_path, monkeypatch):
    monkeypatch.setattr(build_module, "pdflatex_available", lambda: False)
    out, err = io.StringIO(), io.StringIO()
    result = build(str(src), str(tmp_path / "out"), jobs=1, stdout=out, stderr=err)
    assert err.getvalue() == f"symflops: {build_module.NO_PDFLATEX}\n"
    assert "texlive-latex-base" in build_module.NO_PDFLATEX and "--no-pdf" in build_module.NO_PDFLATEX
    assert not result.failed and not any(p.endswith(".pdf") for p in result.written)


def test_no_pdf_asked_for_says_nothing_of_pdflatex(src, tmp_path, monkeypatch):
    monkeypatch.setattr(build_module, "pdflatex_available", lambda: False)
    err = io.StringIO()
    build(str(src), str(tmp_path / "out"), pdf=False, jobs=1, stdout=io.StringIO(), stderr=err)
    assert err.getvalue() == ""


def test_jobs_default_to_one_worker_per_core():
    args = build_parser().parse_args(["build"])
    assert args.jobs == 0 and pool_module.workers(args.jobs, 100) == pool_module.cores()


def test_summary_of_one_file_and_of_a_failure():
    from symflops.commands.progress import summary

    assert summary(["a.md"], [], []) == "1 file written (1 .md sheets), 0 declarations failed"
    assert summary([], [], ["x.yaml"]) == "0 files written, 1 declaration failed"


def test_the_gallery_is_counted_apart_from_the_sheets(src, tmp_path):
    """The gallery's index.html is no declaration's sheet (the summary counted
    it as one more .html sheet: 55 .html for 54 declarations)."""
    out, err = io.StringIO(), io.StringIO()
    result = build(str(src), str(tmp_path / "out"), pdf=False, formats=("html",), jobs=1,
                   stdout=out, stderr=err)
    # by hand: ffn, swiglu, lora are 3 declarations, so 3 .html sheets, and 1 gallery:
    # 4 files (an HTML sheet's figures are inside it; no reference pages without docs)
    assert sorted(os.listdir(tmp_path / "out")) == \
        ["ffn.html", "index.html", "lora.html", "swiglu.html"]
    assert result.summary() == \
        "4 files written (3 .html sheets; 1 gallery index.html), 0 declarations failed"
    assert err.getvalue() == ""
