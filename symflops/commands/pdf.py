"""pdflatex: a LaTeX sheet compiled to PDF in a scratch directory of its own.

``symflops build`` (and the layout tests, which read pdflatex's log) compile
each ``.tex`` here: pdflatex runs without shell escape, stops at the first
error, runs again while its log asks for it, and is stopped after
:data:`PDF_TIMEOUT_S`.  The scratch directory goes whatever happens.  While a
build runs (:func:`_library_scratch`), the scratch directories go under the
temporary directory it started with, and the temporary files of the
libraries it calls into a directory of the build's own, removed with it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
from typing import Iterator, Mapping

from ..core.errors import SymflopsError, shorten

#: pdflatex gets this long per sheet before it is stopped.
PDF_TIMEOUT_S = 120


def pdflatex_available() -> bool:
    return shutil.which("pdflatex") is not None


#: pdflatex runs again while its log asks for it (a longtable sets its
#: repeated header at the column widths of the run before), at most this often.
PDF_RUNS = 3
RERUN = "Rerun LaTeX"


def _pdflatex(tmp: str, name: str) -> str:
    """Run pdflatex once on ``tmp/name.tex``; return its log."""
    try:
        subprocess.run(["pdflatex", "-interaction=nonstopmode", "-halt-on-error",
                        "-no-shell-escape", f"{name}.tex"], stdin=subprocess.DEVNULL,
                       cwd=tmp, capture_output=True, timeout=PDF_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        raise SymflopsError(f"pdflatex took longer than {PDF_TIMEOUT_S} s on {name}.tex",
                            hint="build without --pdf, or check the template") from None
    log_path = os.path.join(tmp, f"{name}.log")
    if not os.path.exists(log_path):
        return ""
    with open(log_path, "rb") as fh:  # pdfTeX writes the document's UTF-8 bytes as they are
        return fh.read().decode("utf-8", errors="replace")


def compile_pdf(tex: str, name: str, files: Mapping[str, bytes] | None = None) -> bytes:
    """Compile a LaTeX sheet in a scratch directory; return the PDF's bytes
    (see :func:`compile_pdf_log`)."""
    return compile_pdf_log(tex, name, files)[0]


def compile_pdf_log(tex: str, name: str, files: Mapping[str, bytes] | None = None
                    ) -> tuple[bytes, str]:
    """Compile a LaTeX sheet in a scratch directory; return the PDF's bytes
    and pdflatex's log (read for overfull boxes by the layout tests).
    ``files`` (the figures it includes, by file name) are put beside it.

    Raises SymflopsError with the first LaTeX error and the line of the
    ``.tex`` where pdflatex stopped.  The scratch directory is removed
    whatever happens (a SIGTERM too: the CLI turns it into an exception)."""
    with tempfile.TemporaryDirectory(prefix="symflops-tex-", dir=_tmp_root) as tmp:
        src = os.path.join(tmp, f"{name}.tex")
        with open(src, "w", encoding="utf-8") as fh:
            fh.write(tex)
        for filename, data in (files or {}).items():
            with open(os.path.join(tmp, os.path.basename(filename)), "wb") as fh:
                fh.write(data)
        for _ in range(PDF_RUNS):
            log = _pdflatex(tmp, name)
            if RERUN not in log or any(line.startswith("!") for line in log.splitlines()):
                break
        pdf = os.path.join(tmp, f"{name}.pdf")
        lines = log.splitlines()
        errors = [k for k, line in enumerate(lines) if line.startswith("!")]
        if errors or not os.path.exists(pdf):
            first = lines[errors[0]].lstrip("! ") if errors else "no PDF was produced"
            at = next((line.split()[0] for line in lines[errors[0]:errors[0] + 30]
                       if line.startswith("l.")), None) if errors else None
            where = f" at line {at[2:]} of the .tex" if at else ""
            raise SymflopsError(f"LaTeX failed on {name}.tex{where}: {shorten(first, 200)}",
                                hint=f"no .tex or .pdf was written for {name}; to see the whole "
                                     f"log, write the LaTeX with 'symflops render FILE --format "
                                     f"tex -o {name}.tex' and run pdflatex on it")
        with open(pdf, "rb") as fh:
            return fh.read(), log


#: The temporary directory a build started with, while it runs (None otherwise):
#: its pdflatex scratch directories go there, and the libraries' temporaries
#: into a directory of the build's own inside it (:func:`_library_scratch`).
_tmp_root: str | None = None


@contextlib.contextmanager
def _library_scratch() -> Iterator[None]:
    """Send the temporary files of the libraries a build calls (matplotlib
    writes one while it embeds a font) to a directory of the build's own,
    removed whatever happens.  A signal that lands between a library's
    creating a temporary file and removing it would otherwise leave the file
    in TMPDIR.  Forked workers inherit the setting; the build stops them before
    the directory goes."""
    global _tmp_root
    outer, root = tempfile.tempdir, tempfile.gettempdir()
    with tempfile.TemporaryDirectory(prefix="symflops-scratch-") as scratch:
        _tmp_root, tempfile.tempdir = root, scratch
        try:
            yield
        finally:
            _tmp_root, tempfile.tempdir = None, outer
