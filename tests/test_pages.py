"""The sheets' length and page breaks, read from the compiled PDFs (issue 27,
item 16): a block's main body (before the appendix) fits in 3 pages, a whole
model's in 6 (llama) and 8 (moe, with its experts); no heading ends a page.

The appendix starts a page of its own; the sheet writes that page's number
to pdflatex's log when it is shipped out (``symflops: the appendix starts on
page N``), so the body's length needs no PDF reader; where poppler's
``pdftotext`` is installed, the page's text is checked too.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

import pdfpages
from committed import committed_pdf

ROOT = Path(__file__).resolve().parents[1]
NEEDS_PDF = os.environ.get("CI") == "true"
needs_pdflatex = pytest.mark.skipif(shutil.which("pdflatex") is None and not NEEDS_PDF,
                                    reason="pdflatex not installed")

#: The most pages of a sheet's main body (issue 27: ffn 3, llama 6, moe 8).
BODY_PAGES = {"ffn": 3, "llama": 6, "moe": 8}


def compiled(name: str) -> tuple[str, bytes, str]:
    """The committed sheet (tests/committed.py), compiled once per process."""
    return committed_pdf(name)


@needs_pdflatex
@pytest.mark.parametrize("name", sorted(BODY_PAGES))
def test_the_main_body_fits_its_pages(name: str) -> None:
    tex, pdf, log = compiled(name)
    start = pdfpages.appendix_page(log)
    assert start is not None, f"{name}: the sheet wrote no appendix page to the log"
    body = start - 1
    assert body <= BODY_PAGES[name], f"{name}: the main body runs to {body} pages"
    assert page_count_ok(log, start)
    if pdfpages.HAS_PDFTOTEXT:
        pages = pdfpages.texts(pdf)
        first = [x.strip() for x in pages[start - 1].splitlines() if x.strip()]
        assert first[0] == "Appendix", f"{name}: page {start} does not open the appendix"
        assert not any(x.strip() == "Appendix" for p in pages[:start - 1]
                       for x in p.splitlines())


def page_count_ok(log: str, start: int) -> bool:
    return start <= pdfpages.page_count(log)


@needs_pdflatex
@pytest.mark.skipif(not pdfpages.HAS_PDFTOTEXT, reason="pdftotext (poppler) not installed")
@pytest.mark.parametrize("name", ["ffn", "llama", "moe", "lora", "attention_causal",
                                  "conv2d_strided"])
def test_no_heading_ends_a_page(name: str) -> None:
    tex, pdf, _ = compiled(name)
    found = pdfpages.stranded(pdfpages.texts(pdf), pdfpages.headings(tex))
    assert not found, f"{name}: headings at the foot of a page: {found}"


def test_the_reader_finds_a_stranded_heading() -> None:
    pages = ["text\n\n4     Memory\n\n   3\n", "Item  Size\n"]
    assert pdfpages.stranded(pages, {"Memory"}) == [(1, "Memory")]
    assert pdfpages.stranded(["text\n4 Memory\nrow\n 3\n", "x"], {"Memory"}) == []
