"""Writing sheets to disk: ``symflops build`` and ``symflops render -o``.

Every file is written atomically (a temporary file in the target directory,
then ``os.replace``), so an interrupted or failing build leaves the previous
file intact.  A declaration that fails is reported and skipped; the others are
still built, and the caller exits non-zero.
"""

from __future__ import annotations

import concurrent.futures
import functools
import glob
import multiprocessing
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Sequence, TextIO

import jinja2
import sympy

from .cost import costs
from .derive import derive
from .errors import SymflopsError
from .render import render
from .spec import load

#: pdflatex gets this long per sheet before it is stopped.
PDF_TIMEOUT_S = 120


def atomic_write(path: str, data: str | bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file and a rename."""
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=os.path.basename(path), dir=directory)
    try:  # from here on, anything (KeyboardInterrupt too) removes the temporary file
        with os.fdopen(fd, "wb") as fh:
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; a sheet is an ordinary file
            fh.write(data.encode("utf-8") if isinstance(data, str) else data)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def pdflatex_available() -> bool:
    return shutil.which("pdflatex") is not None


def compile_pdf(tex: str, name: str) -> bytes:
    """Compile a LaTeX sheet in a scratch directory; return the PDF's bytes.

    Raises SymflopsError with the first LaTeX error when compilation fails
    (an undefined control sequence among them)."""
    with tempfile.TemporaryDirectory(prefix="symflops-tex-") as tmp:
        src = os.path.join(tmp, f"{name}.tex")
        with open(src, "w", encoding="utf-8") as fh:
            fh.write(tex)
        try:
            subprocess.run(["pdflatex", "-interaction=nonstopmode", "-halt-on-error",
                            "-no-shell-escape", f"{name}.tex"],
                           cwd=tmp, capture_output=True, timeout=PDF_TIMEOUT_S, check=False)
        except subprocess.TimeoutExpired:
            raise SymflopsError(f"pdflatex took longer than {PDF_TIMEOUT_S} s on {name}.tex",
                                hint="build without --pdf, or check the template") from None
        log_path = os.path.join(tmp, f"{name}.log")
        log = open(log_path, encoding="latin-1").read() if os.path.exists(log_path) else ""
        pdf = os.path.join(tmp, f"{name}.pdf")
        errors = [line for line in log.splitlines() if line.startswith("!")]
        if errors or not os.path.exists(pdf):
            first = errors[0] if errors else "no PDF was produced"
            raise SymflopsError(f"LaTeX failed on {name}.tex: {first.lstrip('! ')}",
                                hint="check the template; the .tex file is kept in the build directory")
        with open(pdf, "rb") as fh:
            return fh.read()


def render_file(path: str, fmt: str, configs: Sequence[Mapping[str, sympy.Expr]] = (),
                templates: str | None = None, unit: str = "FLOPs",
                precision: str | None = None) -> str:
    """Load, derive and render one declaration; template errors become
    SymflopsError naming the template, line and variable."""
    return render_formats(path, (fmt,), configs, templates, unit, precision)[fmt]


def render_formats(path: str, fmts: Sequence[str], configs: Sequence[Mapping[str, sympy.Expr]] = (),
                   templates: str | None = None, unit: str = "FLOPs",
                   precision: str | None = None) -> dict[str, str]:
    """One declaration derived once and rendered in each of ``fmts``."""
    layer = load(path)
    derivation = derive(layer)
    c = costs(derivation, unit, precision)
    try:
        return {fmt: render(derivation, c, fmt, configs, templates) for fmt in fmts}
    except jinja2.UndefinedError as exc:
        raise SymflopsError(f"template error: {exc}",
                            hint="a template used a variable the sheet does not have; the "
                                 "variables are listed in symflops/render.py (SheetContext)") from None
    except jinja2.TemplateSyntaxError as exc:
        where = f"{exc.filename or exc.name}:{exc.lineno}"
        raise SymflopsError(f"template syntax error at {where}: {exc.message}",
                            hint="fix the template") from None
    except jinja2.TemplateNotFound as exc:
        raise SymflopsError(f"template not found: {exc.name}",
                            hint="a --templates directory overrides templates by file name; "
                                 "the shipped ones are sheet.md.j2 and sheet.tex.j2") from None


@dataclass
class BuildResult:
    written: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)


def fits(config: Mapping[str, sympy.Expr], path: str) -> bool:
    layer = load(path)
    return set(config) == {d.name for d in layer.dims}


def build(src: str = "derivations", out: str = "build", *, pdf: bool | None = None,
          configs: Sequence[Mapping[str, sympy.Expr]] = (), templates: str | None = None,
          unit: str = "FLOPs", precision: str | None = None, jobs: int = 1,
          stdout: TextIO = sys.stdout, stderr: TextIO = sys.stderr) -> BuildResult:
    """Render every ``*.yaml`` in ``src`` to ``out/NAME.md`` and ``out/NAME.tex``,
    and ``out/NAME.pdf`` when pdflatex is available (or ``pdf`` is True).
    ``jobs`` worker processes derive declarations side by side (0: one per
    core); files are written by this process, in name order."""
    if not os.path.isdir(src):
        raise SymflopsError(f"{src}: no such directory",
                            hint="run symflops build from the project root, or give --src DIR")
    files = sorted(glob.glob(os.path.join(src, "*.yaml")) + glob.glob(os.path.join(src, "*.yml")))
    if not files:
        raise SymflopsError(f"{src}: no declarations (*.yaml) found",
                            hint="put one layer declaration per file in this directory")
    if pdf is None:
        pdf = pdflatex_available()
    elif pdf and not pdflatex_available():
        raise SymflopsError("--pdf was asked for but pdflatex is not on the path",
                            hint="install TeX Live (Debian: texlive-latex-base "
                                 "texlive-latex-recommended lmodern) or drop --pdf")
    result = BuildResult()
    work = functools.partial(_sheets, configs=configs, templates=templates, unit=unit,
                             precision=precision, pdf=pdf)
    if jobs == 1 or len(files) == 1:
        outcomes: Iterable[tuple[dict[str, str] | None, bytes | None, str]] = map(work, files)
        pool = None
    else:
        # fork: the workers share the parent's loaded modules (and nothing is pickled but text)
        pool = concurrent.futures.ProcessPoolExecutor(
            max_workers=jobs or os.cpu_count(), mp_context=multiprocessing.get_context("fork"))
        # Declarations that read the same file (a model and its block) go to
        # one worker, which then derives their shared ops once; the largest
        # groups first, so that no worker is left with a big one at the end.
        futures = {}
        for group in _groups(files):
            future = pool.submit(_each, work, group)
            futures.update({path: (future, k) for k, path in enumerate(group)})
        outcomes = (futures[path][0].result()[futures[path][1]] for path in files)
    try:
        for path, (sheets, pdf_bytes, error) in zip(files, outcomes):
            if sheets is None:
                print(f"symflops: {error}", file=stderr)
                result.failed.append(path)
                continue
            _write(path, out, sheets, pdf_bytes, result, stdout)
    finally:
        if pool is not None:
            pool.shutdown(cancel_futures=True)
    return result


def _groups(files: Sequence[str]) -> list[list[str]]:
    """``files`` in groups that share a declaration (a model and the blocks it
    includes, as the spec reads them), the group with the most ops first.
    A declaration that does not load stands alone; its worker reports it."""
    reads: dict[str, set[str]] = {}
    ops: dict[str, int] = {}
    for path in files:
        try:
            layer = load(path)
        except SymflopsError:
            layer = None
        reads[path] = {os.path.abspath(path)} | {os.path.abspath(b.source)
                                                for b in (layer.blocks if layer else ())}
        ops[path] = len(layer.ops) if layer else 0
    groups: list[tuple[set[str], list[str]]] = []
    for path in files:
        joined = [g for g in groups if g[0] & reads[path]]
        merged = (reads[path].union(*(g[0] for g in joined)),
                  [p for g in joined for p in g[1]] + [path])
        groups = [g for g in groups if g not in joined] + [merged]
    return sorted((sorted(g[1]) for g in groups), key=lambda g: sum(ops[p] for p in g),
                  reverse=True)


def _each(work: Callable[[str], Any], paths: Sequence[str]) -> list[Any]:
    return [work(p) for p in paths]


def _sheets(path: str, *, configs: Sequence[Mapping[str, sympy.Expr]], templates: str | None,
            unit: str, precision: str | None, pdf: bool
            ) -> tuple[dict[str, str] | None, bytes | None, str]:
    """One declaration's sheets (and PDF), or the error text: what a worker returns."""
    name = os.path.splitext(os.path.basename(path))[0]
    try:
        mine = [c for c in configs if fits(c, path)]
        sheets = render_formats(path, ("md", "tex"), mine, templates, unit, precision)
        return sheets, (compile_pdf(sheets["tex"], name) if pdf else None), ""
    except SymflopsError as exc:
        return None, None, str(exc)


def _write(path: str, out: str, sheets: Mapping[str, str], pdf_bytes: bytes | None,
           result: BuildResult, stdout: TextIO) -> None:
    name = os.path.splitext(os.path.basename(path))[0]
    for fmt, text in sheets.items():
        target = os.path.join(out, f"{name}.{fmt}")
        atomic_write(target, text)
        result.written.append(target)
        print(f"wrote {target}", file=stdout)
    if pdf_bytes is not None:
        target = os.path.join(out, f"{name}.pdf")
        atomic_write(target, pdf_bytes)
        result.written.append(target)
        print(f"wrote {target}", file=stdout)
