"""The files ``symflops build`` writes for each declaration, and the
declarations whose files would be one file.

A declaration ``NAME.yaml`` (or ``NAME.yml``) gives the sheets ``NAME.md``,
``NAME.tex``, ``NAME.pdf`` and ``NAME.html`` and the figures ``STEM.KIND.EXT``
(:func:`~symflops.sheets.figures.figure_names`: ``STEM`` has ``_`` for each
character outside ``[A-Za-z0-9_.-]``).  Two declarations of one source
directory may not share a file name, compared as a file system that ignores
case and Unicode normalisation compares it (macOS, Windows): the build
refuses both, on every file system alike, rather than let one sheet show
the other's figures or depend on the order of writing.
"""

from __future__ import annotations

import os
import unicodedata
from typing import Sequence

from ..core.errors import SymflopsError, quote, shorten
from ..sheets.figures import figure_names, figure_stem


def outputs(path: str) -> tuple[str, ...]:
    """The names of the files a build may write for the declaration at
    ``path``: its sheets ``NAME.md``, ``NAME.tex``, ``NAME.pdf`` and every
    figure file its sheet may have (:func:`~symflops.sheets.figures.figure_names`)."""
    name = os.path.splitext(os.path.basename(path))[0]
    return (*(f"{name}.{ext}" for ext in ("md", "tex", "pdf", "html")), *figure_names(name))


#: The gallery of the HTML sheets, which a build writes beside them.
INDEX = "index.html"


def _file_key(filename: str) -> str:
    """A file name as a file system that ignores case (macOS, Windows) or
    Unicode normalisation (macOS) compares it."""
    return unicodedata.normalize("NFC", unicodedata.normalize("NFD", filename).casefold())


def clashing(files: Sequence[str]) -> dict[str, SymflopsError]:
    """The declarations of ``files`` that would write a file of the same name
    as another's (``a b.yaml`` and ``a_b.yaml`` both have the figure
    ``a_b.graph.pdf``; ``x.yaml`` and ``x.yml`` the sheet ``x.md``;
    ``A.yaml`` and ``a.yaml`` the same files where case is ignored), each with
    the error that names the other: neither is built, whatever the file system."""
    owner: dict[str, tuple[str, str]] = {}
    out: dict[str, SymflopsError] = {}
    for path in files:
        if any(_file_key(f) == _file_key(INDEX) for f in outputs(path)):
            out[path] = SymflopsError(f"{shorten(path, 200)}: not built: its HTML sheet would be "
                                      f"{INDEX}, the gallery of the build",
                                      hint="rename the declaration file")
            continue
        for filename in outputs(path):
            first = owner.setdefault(_file_key(filename), (path, filename))
            if first[0] == path:
                continue
            names = (f"both write {quote(filename, 100)}" if filename == first[1] else
                     f"write {quote(first[1], 100)} and {quote(filename, 100)}, one file where "
                     "case or Unicode normalisation is ignored (macOS, Windows)")
            stems = {os.path.splitext(os.path.basename(p))[0] for p in (path, first[0])}
            why = (" (a figure's file name has '_' for each character outside [A-Za-z0-9_.-])"
                   if any(figure_stem(n) != n for n in stems) else "")
            for mine, other in ((first[0], path), (path, first[0])):
                out.setdefault(mine, SymflopsError(
                    f"{shorten(mine, 200)}: not built: it and {shorten(other, 200)} would "
                    f"{names}{why}", hint="rename one of the two declaration files"))
    return out
