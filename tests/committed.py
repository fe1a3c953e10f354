"""The committed sheets of the shipped declarations, ``build/NAME.md`` and
``build/NAME.tex``.

``tests/test_render.py::test_committed_sheets_are_fresh`` proves each equal
to what the engine renders now (``with_patterns(derive(load(path)))``,
``explain(d, costs(d), ())``, ``render``), so a test that reads a shipped
sheet reads it here instead of rendering it again; a stale file fails that
test by name.
"""

from __future__ import annotations

import functools
from pathlib import Path

BUILD = Path(__file__).resolve().parent.parent / "build"


def committed_sheet(name: str, fmt: str = "md") -> str:
    """The committed sheet of ``derivations/NAME.yaml`` (``name`` with or without
    its ``.yaml``) in ``fmt``."""
    return (BUILD / f"{Path(name).stem}.{fmt}").read_text(encoding="utf-8")


@functools.lru_cache(maxsize=None)
def committed_pdf(name: str) -> tuple[str, bytes, str]:
    """The committed LaTeX sheet of ``derivations/NAME.yaml``, compiled: its
    text, the PDF and pdflatex's log, once per test process (the layout test
    and the page tests read the same compile)."""
    from symflops.commands.pdf import compile_pdf_log

    tex = committed_sheet(name, "tex")
    pdf, log = compile_pdf_log(tex, Path(name).stem)
    return tex, pdf, log
