"""Writing sheets to disk: ``symflops build`` and ``symflops render -o``.

Every file is written atomically by :mod:`symflops.commands.output` (a temporary file
in the target directory, then ``os.replace``), so an interrupted or failing
build leaves the previous file intact.

Each declaration is built on its own: whatever goes wrong with one (bad
input, a configuration its sheet cannot take, even a bug) is reported and
the others are still built; the caller exits 2 (70 when one of the failures
was an internal error).  A declaration whose Markdown renders but whose
LaTeX does not (a character pdflatex cannot set) gets its Markdown sheet;
its ``.tex`` and ``.pdf`` are left as they were.

With ``-j N`` the declarations are derived in worker processes (the command's
default: one per core).  Progress says ``[12/47] llama`` as each
declaration's files are written (a bar on a terminal; in a pipe a plain line,
then its ``wrote`` lines), and the summary counts every file written, by kind.  A SIGTERM
or Ctrl-C stops them: a worker busy with a sheet unwinds (its pdflatex is
killed, its ``symflops-tex-*`` scratch directory removed), an idle one
exits, and the parent waits for them before it exits.  The temporary files
of the libraries it calls go to a ``symflops-scratch-*`` directory of the
build's own, removed with it, so that a signal between a library's making
one and removing it leaves nothing in TMPDIR.
"""

from __future__ import annotations

import concurrent.futures
import functools
import glob
import multiprocessing
import os
import sys
import traceback
from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping, Sequence, TextIO

import sympy

from ..count.cost import costs
from ..count.explain import SheetCounts, explain
from ..derive.backward import derive
from ..derive.patterns import with_patterns
from ..count.evaluate import check_definitions
from ..core.errors import SymflopsError, printable, shorten
from .names import clashing
from .progress import Progress, summary
from .output import directory, target as output_target, write_file
from .pdf import _library_scratch, compile_pdf, pdflatex_available
from .pool import _each, _groups, _stop, _worker_start, workers
from ..sheets.escape import check_tex
from ..sheets.figures import draw, figures_of
from ..sheets.plots import shared_figures
from ..sheets.page import headline, index_page, sheet_page, svg_figures
from ..sheets.render import render
from ..sheets.site import SITE_DIR, DocPage, reference_pages
from ..core.ir import Layer
from ..declaration.reader import load

#: The sheet formats a build writes (``--format``; the PDF goes with the LaTeX).
SHEET_FORMATS = ("md", "tex", "html")


def render_file(path: str, fmt: str, configs: Sequence[Mapping[str, sympy.Expr]] = (),
                templates: str | None = None, unit: str = "FLOPs",
                precision: str | None = None, examples: Sequence[str] | None = None) -> str:
    """Load, derive and render one declaration in ``fmt``; template errors
    are SymflopsErrors naming the template and line (see :func:`render`).
    ``examples`` names the declared examples the numbers table shows, in
    that order (None: all of them)."""
    return render_layer(load(path), fmt, configs, templates, unit, precision, examples)


def render_layer(layer: Layer, fmt: str, configs: Sequence[Mapping[str, sympy.Expr]] = (),
                 templates: str | None = None, unit: str = "FLOPs",
                 precision: str | None = None, examples: Sequence[str] | None = None) -> str:
    """Derive and render a loaded declaration (see :func:`render_file`); the
    HTML sheet is the Markdown sheet read into HTML (:mod:`symflops.sheets.page`)."""
    derivation = with_patterns(derive(layer))
    c = costs(derivation, unit, precision)
    if fmt == "tex":  # text LaTeX cannot set is refused before the sheet's counts are made
        check_tex(derivation.layer)
    counts = explain(derivation, c, configs, examples)
    if fmt == "html":
        return sheet_page(derivation, counts, render(derivation, counts, "md", templates),
                          svg_figures(derivation, counts), templates)
    return render(derivation, counts, fmt, templates)


@dataclass
class BuildResult:
    written: list[str] = field(default_factory=list)
    #: the figure files written beside the sheets (``written`` lists the sheets)
    figures: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    #: the failures that were internal errors (bugs), a subset of ``failed``
    internal: list[str] = field(default_factory=list)
    #: the reference's pages of the HTML site (``out/docs/NAME.html``)
    pages: list[str] = field(default_factory=list)
    #: the gallery of the HTML sheets (``out/index.html``), which is no sheet
    gallery: list[str] = field(default_factory=list)

    def summary(self) -> str:
        """Every file written, by kind, and the declarations that failed."""
        return summary(self.written, self.figures, self.failed, self.pages, self.gallery)


#: What a build without pdflatex says, once.
NO_PDFLATEX = ("pdflatex not found: no PDFs written; install TeX Live (Debian: texlive-latex-base "
               "texlive-latex-recommended lmodern) for them, or give --no-pdf")


@dataclass(frozen=True)
class Outcome:
    """What one declaration gave: the sheets to write (a format is absent
    when it failed), the PDF, the error lines, whether one was a bug, and
    the figures of each sheet format written (file name and bytes)."""

    sheets: dict[str, str]
    pdf: bytes | None
    errors: tuple[str, ...]
    internal: bool = False
    figures: dict[str, dict[str, bytes]] = field(default_factory=dict)
    #: the gallery's entry of the HTML sheet (title, headline formulas), None without one
    entry: dict[str, Any] | None = None


def fits(config: Mapping[str, sympy.Expr], path: str) -> bool:
    """Whether ``config`` gives exactly the dims of ``path`` that take values
    (a dim defined by a formula takes its formula's value)."""
    layer = load(path)
    return set(config) == {d.name for d in layer.free_dims}


def build(src: str = "derivations", out: str = "build", *, pdf: bool | None = None,
          configs: Sequence[Mapping[str, sympy.Expr]] = (), templates: str | None = None,
          unit: str = "FLOPs", precision: str | None = None, jobs: int = 1,
          stdout: TextIO | None = None, stderr: TextIO | None = None,
          examples: Sequence[str] = (), formats: Sequence[str] = ("md", "tex"),
          docs: str | None = None) -> BuildResult:
    """Render every ``*.yaml`` in ``src`` to ``out/NAME.md`` and ``out/NAME.tex``,
    and ``out/NAME.pdf`` when pdflatex is available (or ``pdf`` is True).
    ``formats``: the sheets to write (``symflops build`` asks for
    :data:`SHEET_FORMATS`, adding ``NAME.html`` and the gallery ``index.html``).
    ``docs``: with the HTML sheets, the reference's Markdown pages
    (``docs/``), written as ``out/docs/NAME.html`` in the gallery's site
    (:mod:`symflops.sheets.site`); None or a missing directory: none.
    ``examples`` (``--example``): a sheet that declares one of these shows
    only those of its examples; a name that no declaration has is refused.
    ``jobs`` worker processes derive declarations side by side (0: one per
    core; at most :func:`workers`); files are written by this process, in
    name order.  Two declarations that would write one file (:func:`clashing`)
    are both failed, and the others built.  Progress goes
    to ``stdout``, failures to ``stderr`` (default: the current sys.stdout
    and sys.stderr)."""
    stdout, stderr = stdout or sys.stdout, stderr or sys.stderr
    if not os.path.isdir(src):
        raise SymflopsError(f"{src}: no such directory",
                            hint="run symflops build from the project root, or give --src DIR")
    files = sorted(glob.glob(os.path.join(src, "*.yaml")) + glob.glob(os.path.join(src, "*.yml")))
    if not files:
        raise SymflopsError(f"{src}: no declarations (*.yaml) found",
                            hint="put one layer declaration per file in this directory")
    if pdf is None:
        pdf = pdflatex_available()
        if not pdf:
            print(f"symflops: {NO_PDFLATEX}", file=stderr)
    elif pdf and not pdflatex_available():
        raise SymflopsError("--pdf was asked for but pdflatex is not on the path",
                            hint="install TeX Live (Debian: texlive-latex-base "
                                 "texlive-latex-recommended lmodern) or drop --pdf")
    if examples:
        check_examples(files, examples)
    directory(out, "--out")
    # the reference is read before any sheet is written: a page that links nowhere stops the build
    reference = (reference_pages(docs, templates) if "html" in formats and docs
                 and os.path.isdir(docs) else [])
    result = BuildResult()
    entries: list[dict[str, Any]] = []
    clashes = clashing(files)
    todo = [p for p in files if p not in clashes]
    work = functools.partial(_sheets, configs=configs, templates=templates, unit=unit,
                             precision=precision, pdf=pdf and "tex" in formats,
                             examples=tuple(examples), formats=tuple(formats),
                             reference=bool(reference))
    progress = Progress(len(files), stdout)
    with _library_scratch():
        pool = None
        try:
            if jobs == 1 or len(todo) <= 1:
                outcomes: Iterator[Outcome] = map(work, todo)
            else:
                # Declarations that read the same file (a model and its block) go to
                # one worker, which then derives their shared ops once; the largest
                # groups first, so that no worker is left with a big one at the end.
                groups = _groups(todo)
                # fork: the workers share the parent's loaded modules (and nothing is pickled but text)
                pool = concurrent.futures.ProcessPoolExecutor(
                    max_workers=workers(jobs, len(groups)),
                    mp_context=multiprocessing.get_context("fork"), initializer=_worker_start)
                futures = {}
                for group in groups:
                    future = pool.submit(_each, work, group)
                    futures.update({path: (future, k) for k, path in enumerate(group)})
                outcomes = (_result(futures[path][0], futures[path][1], path) for path in todo)
            for path in files:
                outcome = (Outcome({}, None, (str(clashes[path]),)) if path in clashes
                           else next(outcomes))
                errors = list(outcome.errors)
                progress.step(os.path.splitext(os.path.basename(path))[0])
                try:
                    _write(path, out, outcome, result, progress)
                except SymflopsError as exc:  # this sheet's output path, or a full disk
                    errors.append(str(exc))
                if errors:
                    progress.end()
                for error in errors:
                    print(f"symflops: {error}", file=stderr)
                if errors:
                    result.failed.append(path)
                if outcome.internal:
                    result.internal.append(path)
                if outcome.entry is not None and "html" in outcome.sheets:
                    entries.append(outcome.entry)
            if "html" in formats:
                _write_reference(out, reference, result, progress)
                _write_index(out, entries, templates, result, progress, reference)
        except BaseException:
            if pool is not None:
                _stop(pool)
                pool = None
            raise
        finally:
            progress.end()
            if pool is not None:
                pool.shutdown(cancel_futures=True)
    return result


def _result(future: concurrent.futures.Future, k: int, path: str) -> Outcome:
    """A worker's outcome for its ``k``-th declaration; a worker that died
    (killed, out of memory) fails its declarations, not the build."""
    try:
        return future.result()[k]
    except concurrent.futures.process.BrokenProcessPool as exc:
        return Outcome({}, None, (f"{path}: internal error: the worker process building it "
                                  f"stopped ({exc})",), True)


def _internal(path: str, exc: BaseException) -> str:
    text = (f"{path}: internal error: {type(exc).__name__}: {shorten(str(exc), 300)} (this is a "
            "bug; rerun with SYMFLOPS_DEBUG=1 and report the traceback)")
    if os.environ.get("SYMFLOPS_DEBUG"):
        text = "".join(traceback.format_exception(exc)) + text
    return text


def check_examples(files: Sequence[str], names: Sequence[str]) -> None:
    """Every one of ``names`` is an example of a declaration in ``files``
    (one that does not load is left to its own report)."""
    known: dict[str, None] = {}
    for path in files:
        try:
            known.update(dict.fromkeys(e.name for e in load(path).examples))
        except SymflopsError:
            continue
    for name in names:
        if name not in known:
            raise SymflopsError(f"--example {name!r}: no declaration has an example of that name",
                                hint=f"the examples are {', '.join(known)}" if known else
                                "no declaration has an 'examples:' block")


def _sheets(path: str, *, configs: Sequence[Mapping[str, sympy.Expr]], templates: str | None,
            unit: str, precision: str | None, pdf: bool, examples: tuple[str, ...] = (),
            formats: tuple[str, ...] = SHEET_FORMATS, reference: bool = False) -> Outcome:
    """One declaration's sheets and PDF, and what failed: what a worker
    returns.  Nothing but an interruption escapes: one declaration's
    failure, of whatever kind, is its own."""
    name = os.path.splitext(os.path.basename(path))[0]
    try:
        mine = [c for c in configs if fits(c, path)]
        layer = load(path)
        for config in mine:  # a defined dim (R = N/G) must come out whole at the values
            try:
                check_definitions(layer, config)
            except SymflopsError as exc:
                raise SymflopsError(f"{path}: with --at, {exc.message}", hint=exc.hint) from None
        own = [n for n in examples if n in {e.name for e in layer.examples}]
        derivation = with_patterns(derive(layer))
        c = costs(derivation, unit, precision)
        sheets: dict[str, str] = {}
        errors: list[str] = []
        counts: SheetCounts | None = None  # made once for every format
        # the HTML sheet is the Markdown sheet read into HTML: made whenever it is asked for
        made = [f for f in ("md", "tex") if f in formats or (f == "md" and "html" in formats)]
        for fmt in made:
            try:
                if fmt == "tex":  # refused before the counts are made, as in render_file
                    check_tex(layer)
                if counts is None:  # an error making them is each format's error
                    counts = explain(derivation, c, mine, own or None)
                sheets[fmt] = render(derivation, counts, fmt, templates)
            except SymflopsError as exc:
                errors.append(str(exc))
        chosen = figures_of(derivation, counts) if counts is not None else None
        with shared_figures():  # each figure drawn once, saved as PNG, PDF and SVG
            figures = {fmt: draw(chosen, derivation, c, fmt) for fmt in sheets
                       if chosen and fmt in formats and fmt in ("md", "tex")}
            entry = None
            if "html" in formats and "md" in sheets:
                try:
                    sheets["html"] = sheet_page(derivation, counts, sheets["md"],
                                                svg_figures(derivation, counts), templates,
                                                reference)
                    entry = {"name": layer.name, "title": layer.title or layer.name,
                             "file": f"{name}.html", "formulas": headline(derivation, counts)}
                except SymflopsError as exc:
                    errors.append(str(exc))
        if "md" not in formats:
            sheets.pop("md", None)
        pdf_bytes = None
        if pdf and "tex" in sheets:
            try:
                pdf_bytes = compile_pdf(sheets["tex"], name, figures["tex"])
            except SymflopsError as exc:  # the .tex and the .pdf go together, or neither
                errors.append(str(exc))
                del sheets["tex"]
                figures.pop("tex", None)
        return Outcome(sheets, pdf_bytes, tuple(errors), figures=figures, entry=entry)
    except SymflopsError as exc:
        return Outcome({}, None, (str(exc),))
    except Exception as exc:  # a bug, but one declaration's: the others are still built
        return Outcome({}, None, (_internal(path, exc),), True)


def _write_reference(out: str, pages: Sequence[DocPage], result: BuildResult,
                     progress: Progress) -> None:
    """``out/docs/NAME.html``, the reference's pages."""
    if not pages:
        return
    where = os.path.join(out, SITE_DIR)
    directory(where, "--out")
    for page in pages:
        target = os.path.join(where, f"{page.name}.html")
        output_target(target, "--out")
        write_file(target, page.html, "--out")
        result.pages.append(target)
        progress.wrote(target)


def _write_index(out: str, entries: Sequence[Mapping[str, Any]], templates: str | None,
                 result: BuildResult, progress: Progress,
                 reference: Sequence[DocPage] = ()) -> None:
    """``out/index.html``, the gallery of the HTML sheets built (in name order),
    and the reference's pages listed."""
    target = os.path.join(out, "index.html")
    output_target(target, "--out")
    write_file(target, index_page(entries, templates, reference), "--out")
    result.gallery.append(target)
    progress.wrote(target)


def _write(path: str, out: str, outcome: Outcome, result: BuildResult,
           progress: Progress) -> None:
    name = os.path.splitext(os.path.basename(path))[0]
    # Every path is checked before any is written: a declaration whose figure
    # or sheet cannot be written (a directory there) leaves all its files as they were.
    for fmt in outcome.sheets:
        for filename in outcome.figures.get(fmt, {}):
            output_target(os.path.join(out, filename), "--out")
    for fmt in [*outcome.sheets, *(["pdf"] if outcome.pdf is not None else [])]:
        output_target(os.path.join(out, f"{name}.{fmt}"), "--out")
    # Figures first: a sheet written is never without the files it shows.
    for fmt in outcome.sheets:
        for filename, data in outcome.figures.get(fmt, {}).items():
            target = os.path.join(out, filename)
            write_file(target, data, "--out")
            result.figures.append(target)
            progress.wrote(target)
    files = [(fmt, text) for fmt, text in outcome.sheets.items()]
    if outcome.pdf is not None:
        files.append(("pdf", outcome.pdf))
    for fmt, data in files:
        target = os.path.join(out, f"{name}.{fmt}")
        write_file(target, data, "--out")
        result.written.append(target)
        progress.wrote(target)
