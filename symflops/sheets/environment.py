"""The Jinja environment of the sheets: templates, sandbox, bounds, errors.

A user template directory (``--templates DIR``) is searched before the
shipped templates, so any template or partial can be overridden by name.
Every template is rendered in Jinja's sandbox and read like any other file
(regular files, at most 1 MiB); whatever a user template does wrong is a
SymflopsError naming its ``file:line`` (:func:`template_error`).
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import threading
from typing import Any, Literal, Mapping, Sequence, get_args

import jinja2
import jinja2.sandbox
from jinja2.loaders import split_template_path

from ..core.errors import SymflopsError, read_text, shorten

#: The formats a sheet is rendered in.
Format = Literal["md", "tex"]
FORMATS: tuple[Format, ...] = get_args(Format)
TEMPLATE_NAMES: dict[Format, str] = {"md": "sheet.md.j2", "tex": "sheet.tex.j2"}


def template_dir() -> str:
    """The shipped templates: ``templates/`` beside the package in a source
    checkout, else the installed package ``symflops.templates``."""
    here = os.path.dirname(os.path.abspath(__file__))
    checkout = os.path.join(os.path.dirname(os.path.dirname(here)), "templates")
    if os.path.isfile(os.path.join(checkout, TEMPLATE_NAMES["md"])):
        return checkout
    import importlib.util

    spec = importlib.util.find_spec("symflops.templates")
    if spec is None or spec.origin is None:
        raise RuntimeError("symflops' templates are not installed; reinstall the package")
    return os.path.dirname(spec.origin)



class _Loader(jinja2.FileSystemLoader):
    """Templates are read like every other file (:func:`~symflops.core.errors.read_text`):
    regular files only, at most 1 MiB, UTF-8; a FIFO never blocks the render."""

    def get_source(self, environment: jinja2.Environment, template: str
                   ) -> tuple[str, str, Any]:
        pieces = split_template_path(template)
        for folder in self.searchpath:
            filename = os.path.normpath(os.path.join(folder, *pieces))
            if not os.path.lexists(filename):
                continue
            source = read_text(filename, "give a template file (UTF-8 text)",
                               lead=f"template {shorten(filename, 200)}")
            mtime = os.path.getmtime(filename)

            def uptodate(filename: str = filename, mtime: float = mtime) -> bool:
                try:
                    return os.path.getmtime(filename) == mtime
                except OSError:
                    return False

            return source, filename, uptodate
        raise jinja2.TemplateNotFound(template)


@functools.lru_cache(maxsize=32)
def environment(fmt: Format, user_templates: str | None = None) -> jinja2.Environment:
    """The Jinja environment for ``fmt``; a user's directory comes first.
    Sandboxed (:class:`jinja2.sandbox.SandboxedEnvironment`): a template can
    place the sheet's strings and call safe methods on them, never reach
    Python's internals (``cycler.__init__.__globals__`` is refused).  One
    per format and directory, so each template is compiled once per
    process (Jinja checks the file's time stamp before reusing it)."""
    dirs = ([user_templates] if user_templates else []) + [template_dir()]
    options: dict[str, Any] = {}
    if fmt == "tex":
        # LaTeX is full of braces and percent signs; give Jinja its own marks.
        options = dict(block_start_string="((*", block_end_string="*))",
                       variable_start_string="(((", variable_end_string=")))",
                       comment_start_string="((=", comment_end_string="=))",
                       line_comment_prefix="%%")
    return _Bounded(loader=_Loader(dirs), undefined=jinja2.StrictUndefined, autoescape=False,
                    keep_trailing_newline=True, trim_blocks=True, lstrip_blocks=True, **options)


#: A rendered sheet may be at most this long, and take at most this long to
#: render; a user template beyond either is stopped (the shipped sheets are
#: under 200 kB and render in well under a second).
MAX_SHEET_CHARACTERS = 32 * 1024 * 1024
MAX_RENDER_SECONDS = 60


class _Bounded(jinja2.sandbox.SandboxedEnvironment):
    """The sandbox, with bounded arithmetic: ``'x' * 10**10`` or ``9**9**9``
    in a template is refused before Python builds it (the sandbox already
    bounds ``range``)."""

    intercepted_binops = frozenset(["*", "**"])

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        if operator == "**" and isinstance(right, int) and abs(right) > 64 and left not in (0, 1, -1):
            raise _Limit(f"the power {left!r} ** {right!r} is too large")
        if operator == "*":
            for seq, n in ((left, right), (right, left)):
                if isinstance(seq, (str, list, tuple)) and isinstance(n, int) \
                        and len(seq) * n > MAX_SHEET_CHARACTERS:
                    raise _Limit("a repetition longer than a sheet may be")
        return super().call_binop(context, operator, left, right)


def bounded_render(template: jinja2.Template, context: Mapping[str, Any]) -> str:
    """``template.render`` with the sheet's length and render time bounded."""
    parts, length = [], 0
    with _deadline(MAX_RENDER_SECONDS):
        for piece in template.generate(**context):
            length += len(piece)
            if length > MAX_SHEET_CHARACTERS:
                raise _Limit(
                    f"the sheet grew beyond {MAX_SHEET_CHARACTERS:,} characters")
            parts.append(piece)
    return "".join(parts)


class _Limit(jinja2.sandbox.SecurityError):
    """A template went past the sheet's bounds of length or time."""


@contextlib.contextmanager
def _deadline(seconds: float) -> Any:
    """Raise :class:`_Limit` in the main thread after ``seconds`` (elsewhere: no bound)."""
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer"):
        yield
        return

    def stop(signum: int, frame: Any) -> None:
        raise _Limit(f"rendering took longer than {seconds:g} s")

    previous = signal.signal(signal.SIGALRM, stop)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _template_line(exc: BaseException, dirs: Sequence[str]) -> str | None:
    """``file:line`` of the innermost template frame of ``exc``'s traceback
    (Jinja rewrites its tracebacks so that template code shows as its lines)."""
    roots = [os.path.realpath(d) for d in dirs]
    where = None
    tb = exc.__traceback__
    while tb is not None:
        name = tb.tb_frame.f_code.co_filename
        real = os.path.realpath(name)
        if any(os.path.commonpath([real, r]) == r for r in roots):
            where = f"{name}:{tb.tb_lineno}"
        tb = tb.tb_next
    return where


def _in_user_templates(where: str | None, user_templates: str | None) -> bool:
    if where is None or not user_templates:
        return False
    root = os.path.realpath(user_templates)
    return os.path.commonpath([os.path.realpath(where.rpartition(":")[0]), root]) == root


def template_error(exc: Exception, fmt: Format, user_templates: str | None) -> SymflopsError | None:
    """The SymflopsError for an exception raised while rendering, or None for
    one that is a bug (raised by a shipped template alone, and not a Jinja
    error): syntax, an undefined variable, a sandbox refusal, a missing
    template, a template that raises or calls itself without end."""
    if isinstance(exc, jinja2.TemplateSyntaxError):
        where = f"{exc.filename or exc.name}:{exc.lineno}"
        return SymflopsError(f"template {where}: syntax error: {exc.message}",
                             hint="fix the template")
    dirs = ([user_templates] if user_templates else []) + [template_dir()]
    where = _template_line(exc, dirs)
    if not isinstance(exc, jinja2.TemplateError) and not _in_user_templates(where, user_templates):
        return None
    at = f"template {where}" if where else f"template {TEMPLATE_NAMES[fmt]}"
    if isinstance(exc, _Limit):
        return SymflopsError(f"{at}: {exc}", hint=f"a sheet renders in at most "
                             f"{MAX_RENDER_SECONDS} s and {MAX_SHEET_CHARACTERS:,} characters; "
                             "loop over the sheet's lists rather than over large ranges")
    if isinstance(exc, jinja2.sandbox.SecurityError):
        return SymflopsError(f"{at}: refused by the sandbox: {exc}",
                             hint="a template places the sheet's strings; it cannot reach "
                                  "Python objects, their attributes or functions")
    if isinstance(exc, jinja2.UndefinedError):
        return SymflopsError(f"{at}: {exc.message}",
                             hint="a template used a variable the sheet does not have; the "
                                  "variables are listed in symflops/sheets/context.py (SheetContext)")
    if isinstance(exc, jinja2.TemplateNotFound):
        return SymflopsError(f"{at}: template not found: {exc.name}",
                             hint="a --templates directory overrides templates by file name; "
                                  "the shipped ones are sheet.md.j2 and sheet.tex.j2 (with "
                                  "base.md.j2 and base.tex.j2)")
    if isinstance(exc, RecursionError):
        return SymflopsError(f"{at}: the template calls itself without end (Python's "
                             "recursion limit was reached)",
                             hint="give the recursive macro or include a condition that stops it")
    return SymflopsError(f"{at}: the template raised {type(exc).__name__}: {exc}",
                         hint="fix the template")
