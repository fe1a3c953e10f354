"""Reading a compiled sheet's pages, for the layout tests: its text page by
page (poppler's ``pdftotext``, when installed), where its appendix starts
(the line the sheet writes to pdflatex's log when that page is shipped out),
and the headings its LaTeX sets."""

from __future__ import annotations

import re
import shutil
import subprocess

HAS_PDFTOTEXT = shutil.which("pdftotext") is not None

APPENDIX = re.compile(r"symflops: the appendix starts on page (\d+)")
PAGES = re.compile(r"Output written on .*? \((\d+) pages?,", re.S)
HEADING = re.compile(r"\\(?:sub){0,2}section\*?\{((?:[^{}]|\{[^{}]*\})*)\}")


def page_count(log: str) -> int:
    m = PAGES.search(log.replace("\n", ""))
    assert m, "pdflatex's log names no output"
    return int(m.group(1))


def appendix_page(log: str) -> int | None:
    """The page the appendix starts on, from the sheet's own line in the log."""
    m = APPENDIX.search(log)
    return int(m.group(1)) if m else None


def texts(pdf: bytes) -> list[str]:
    """The text of each page (``pdftotext -layout``)."""
    out = subprocess.run(["pdftotext", "-layout", "-", "-"], input=pdf, capture_output=True,
                         check=True).stdout.decode("utf-8", "replace")
    pages = out.split("\f")
    return pages[:-1] if pages and not pages[-1].strip() else pages


def headings(tex: str) -> set[str]:
    """The titles of the sheet's sections, as pdftotext shows them (math and
    commands dropped)."""
    out = set()
    for m in HEADING.finditer(tex):
        title = re.sub(r"\$[^$]*\$|\\[A-Za-z]+|[{}]", "", m.group(1))
        title = " ".join(title.split())
        if title:
            out.add(title)
    return out | {"Appendix"}


def stranded(pages: list[str], titles: set[str]) -> list[tuple[int, str]]:
    """(page, title) of each heading that is the last line of its page."""
    out = []
    for k, page in enumerate(pages[:-1], 1):
        lines = [x.strip() for x in page.splitlines() if x.strip()]
        if lines and re.fullmatch(r"\d+", lines[-1]):  # the page number
            lines = lines[:-1]
        if not lines:
            continue
        last = re.sub(r"^(?:\d+(?:\.\d+)*|[A-Z](?:\.\d+)*)\s+", "", lines[-1]).strip()
        if last in titles:
            out.append((k, last))
    return out
