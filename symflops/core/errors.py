"""One exception family for everything a user can get wrong.

Every error that comes from user input is a :class:`SymflopsError` carrying the
source position (file, line, column, all 1-based) of the offending text, what is
wrong, and how to fix it.  The CLI prints ``str(error)`` as a single line and
exits with status 2; it never shows a Python traceback for these.

Messages are bounded: a user value is quoted through :func:`quote` (at most
:data:`QUOTE` characters), the source line under a caret is a window of at
most :data:`WINDOW` characters around the column (shown only for a file
:func:`quotable` allows: named ``*.yaml``, ``*.yml`` or ``*.json``, outside
the private directories, links resolved, and parsed as its format far
enough to be one), and no message line is
longer than :data:`MAX_MESSAGE` characters, whatever a caller put in it.
Control characters of user text are shown escaped, never sent to the
terminal as they are.

Files are read by :func:`read_text` only: regular files (a FIFO, a device, a
directory is refused before a byte is read, so nothing blocks), at most
:data:`MAX_READ` bytes (1 MiB), UTF-8 (an invalid byte is reported at its
line and column).
"""

from __future__ import annotations

import difflib
import os
import stat
from dataclasses import dataclass

#: Characters of a user value quoted in a message.
QUOTE = 60
#: Characters of a source line shown under a caret.
WINDOW = 80
#: The longest message line (the message and its hint each).
MAX_MESSAGE = 600
#: Files whose lines an error may show under a caret: declarations, configs.
QUOTED_FILES = (".yaml", ".yml", ".json")
#: Directories whose files no message quotes, whatever their names or contents
#: (their real paths, links resolved): system configuration and secrets, kernel
#: and device files.
PRIVATE_DIRS = ("/etc", "/proc", "/sys", "/dev", "/boot", "/run", "/private/etc")
#: Directories of credentials, wherever they are (``~/.ssh``, ``/root/.ssh``):
#: no file under one is quoted either.
PRIVATE_NAMES = frozenset({".ssh", ".gnupg", ".aws", ".azure", ".kube", ".docker",
                           ".password-store"})
#: The most bytes read from one file (a declaration, a template, a config): 1 MiB.
MAX_READ = 1 << 20


def printable(text: str) -> str:
    """``text`` with control characters written as escapes (``\\n``, ``\\x1b``)."""
    return "".join(c if c.isprintable() or c == " " else repr(c)[1:-1] for c in text)


def shorten(text: str, limit: int = QUOTE) -> str:
    """``text`` cut to ``limit`` characters (its middle elided with '...'),
    control characters escaped."""
    text = printable(text)
    if len(text) <= limit:
        return text
    head = (limit - 3) * 2 // 3
    return text[:head] + "..." + text[len(text) - (limit - 3 - head):]


def quote(value: object, limit: int = QUOTE) -> str:
    """A user value for a message: ``'text'`` quoted and cut to about ``limit``
    characters, a number as digits (or its size, when it has more than ``limit``)."""
    if isinstance(value, str):
        if len(value) <= limit and value.isprintable():
            return repr(value)
        return "'" + shorten(value, limit) + "'"  # escaped once, by shorten
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 3 * limit:
        return f"an integer of about {int(value.bit_length() * 0.30103) + 1} digits"
    return shorten(repr(value), limit)


@dataclass(frozen=True)
class Span:
    """Where a piece of user text lives: 1-based line and column in ``file``.

    ``text`` is the whole source line, kept so that an error can show it with a
    caret under the offending column.
    """

    file: str
    line: int
    column: int
    text: str | None = None

    def shifted(self, columns: int) -> "Span":
        """The same place moved ``columns`` characters to the right on its line."""
        return Span(self.file, self.line, self.column + columns, self.text)

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.column}"


class SymflopsError(Exception):
    """A problem with user input, reported with its place and a fix.

    >>> str(SymflopsError("unknown tensor 'Z'", Span("ffn.yaml", 12, 20),
    ...                   hint="declare it under 'tensors:'"))
    "ffn.yaml:12:20: error: unknown tensor 'Z'; fix: declare it under 'tensors:'"
    """

    def __init__(self, message: str, span: Span | None = None, hint: str | None = None):
        super().__init__(message)
        self.message = message
        self.span = span
        self.hint = hint

    def __str__(self) -> str:
        where = f"{shorten(str(self.span), 300)}: " if self.span is not None else ""
        fix = f"; fix: {shorten(self.hint, MAX_MESSAGE)}" if self.hint else ""
        return f"{where}error: {shorten(self.message, MAX_MESSAGE)}{fix}"

    def excerpt(self) -> str:
        """The source line with a caret under the column, or '' when unknown:
        at most :data:`WINDOW` characters of it, around the column.  Only a
        file :func:`quotable` allows is shown, and only a line its reader
        kept: a file that is not a declaration or config (``/etc/shadow``,
        by any name) is never shown."""
        if self.span is None or not self.span.text or not quotable(self.span.file):
            return ""
        line = self.span.text.rstrip("\r\n").expandtabs(1)
        column = min(max(self.span.column - 1, 0), len(line))
        start = max(0, min(column - WINDOW // 2, len(line) - WINDOW))
        end = min(len(line), start + WINDOW)
        window = "".join(c if c.isprintable() else "?" for c in line[start:end])
        lead = "..." if start > 0 else ""
        window = lead + window + ("..." if end < len(line) else "")
        return f"    {window}\n    {' ' * (column - start + len(lead))}^"


def quotable(file: str) -> bool:
    """Whether a message may show lines of ``file`` (the one rule, with the
    readers' own, below): a file named as a declaration or a config
    (:data:`QUOTED_FILES`) whose real path, links resolved, lies in no private
    directory (:data:`PRIVATE_DIRS`, :data:`PRIVATE_NAMES`): ``x.json``, a link
    to ``/etc/shadow``, is never quoted.  Text that is no file on disk (a
    declaration given from Python, named ``<string>``) is its caller's.

    The readers add the rule of the contents: a reader keeps the line out of a
    :class:`Span` (its ``text`` empty) unless the file parsed as its format far
    enough to be one (a mapping with one of a declaration's keys, a config's
    JSON object), so that a file that is neither is reported by position only;
    and a file that is not a declaration at all is refused before any of its
    keys or values is quoted (:func:`symflops.lang.yaml.parse_yaml`,
    :func:`symflops.hf.json_file.read_json`)."""
    if not os.path.lexists(file):
        return True
    if not file.endswith(QUOTED_FILES):
        return False
    real = os.path.realpath(file)
    parts = real.split(os.sep)
    return not (any(real == d or real.startswith(d + os.sep) for d in PRIVATE_DIRS)
                or any(p in PRIVATE_NAMES for p in parts))


def closest(name: str, known: list[str]) -> str:
    """A hint naming the nearest known spelling, then every known one."""
    near = difflib.get_close_matches(name, known, n=1)
    listed = ", ".join(known) if known else "none"
    return (f"did you mean {near[0]!r}? " if near else "") + f"known: {listed}"


def file_kind(mode: int) -> str:
    """What a file that is not a regular file is, in words."""
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


NOT_REGULAR = ("give the path of a regular file (a FIFO, a device, a socket or a directory is "
               "never read)")


def read_text(path: str | os.PathLike[str], hint: str, span: Span | None = None,
              lead: str | None = None, limit: int = MAX_READ) -> str:
    """A UTF-8 text file's contents; a missing, unreadable, non-regular or
    too large file, or one that is not UTF-8, is a SymflopsError (``lead``,
    default the path, starts its message).

    The file is opened without blocking (``O_NONBLOCK``: a FIFO with no
    writer does not wait) and checked with ``fstat`` before anything is
    read; at most ``limit`` + 1 bytes are read, so a file that grows, or
    reports no size (``/proc``), is bounded too."""
    file = os.fspath(path)
    lead = lead or shorten(file, 200)
    try:
        fd = os.open(file, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise SymflopsError(f"{lead}: no such file", span, hint) from None
    except OSError as exc:
        try:  # a socket cannot be opened at all (ENXIO): say what it is
            mode = os.stat(file).st_mode
        except OSError:
            mode = stat.S_IFREG
        if not stat.S_ISREG(mode):
            raise SymflopsError(f"{lead}: is {file_kind(mode)}, not a regular file", span,
                                NOT_REGULAR) from None
        raise SymflopsError(f"{lead}: cannot read: {exc.strerror or exc}", span,
                            "give a readable UTF-8 text file") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise SymflopsError(f"{lead}: is {file_kind(mode)}, not a regular file", span,
                                NOT_REGULAR)
        chunks, size = [], 0
        while size <= limit:
            chunk = os.read(fd, limit + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError as exc:
        raise SymflopsError(f"{lead}: cannot read: {exc.strerror or exc}", span,
                            "give a readable UTF-8 text file") from None
    finally:
        os.close(fd)
    if size > limit:
        raise SymflopsError(f"{lead}: is larger than the read limit of {limit:,} bytes "
                            f"({limit / (1 << 20):g} MiB)", span,
                            "split it into smaller files; no declaration, template or "
                            "config needs more")
    data = b"".join(chunks)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _not_utf8(file, data, exc) from None


def _not_utf8(file: str, data: bytes, exc: UnicodeDecodeError) -> SymflopsError:
    """The first invalid byte at its line and column (in characters), with
    no excerpt: a file that is not text is not quoted."""
    start = data.rfind(b"\n", 0, exc.start) + 1
    line = data.count(b"\n", 0, exc.start) + 1
    column = len(data[start:exc.start].decode("utf-8")) + 1
    return SymflopsError(f"this file is not UTF-8 text: byte 0x{data[exc.start]:02x} cannot be "
                         "decoded", Span(file, line, column),
                         "save the file as UTF-8 (symflops reads UTF-8 text only)")


class Terminated(BaseException):
    """A termination signal (SIGTERM, SIGHUP), raised where the program was, so
    that temporary files and directories are removed on the way out.  Not an
    Exception: nothing that handles errors catches it by accident."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum
