"""Every file symflops writes goes through here: one atomic writer.

``render -o``, ``build --out``, ``sweep --csv``, ``grads --out`` and
``plan --plot`` all write with :func:`write_file` or :func:`open_output`.

Invariants:

* ``-`` is standard output, wherever a path is taken for output.
* A new path, or an existing regular file, is written through a temporary
  file in the same directory (``.tmp-*``), flushed and ``fsync``-ed, then
  renamed over the target: a reader sees the old file or the whole new one,
  never a part.  Whatever stops the write (an error, a full disk, Ctrl-C,
  SIGTERM turned into an exception by the CLI) removes the temporary file
  and leaves the old file as it was.
* An existing path that is not a regular file (a directory, a device such
  as ``/dev/null``, a FIFO, a socket) is refused and never replaced.  A
  symbolic link is written *through* when it ends at a regular file (that
  file is replaced, in its own directory, and the link is kept); a link to
  anything else, to nothing, or through ``/proc`` (``/dev/stdout`` is a link
  to ``/proc/self/fd/1``, which names an open file, not a path) is refused.
  Use ``-`` for standard output.
* Missing parent directories are created.  Every problem (an empty path, a
  path under a file, a read-only directory, a full disk) is a
  :class:`SymflopsError` naming the option and the path: exit 2, not 70.
* An existing file keeps its permission bits; a new one gets ``0666`` less
  the umask, as a plain ``open()`` would give it.
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import secrets
import stat
import sys
from typing import BinaryIO, Iterator

from ..core.errors import SymflopsError, file_kind

#: The path that means standard output.
STDOUT = "-"

_HINT = "give a path to a regular file, or '-' for standard output"


def _error(what: str, path: str, problem: str, hint: str = _HINT) -> SymflopsError:
    return SymflopsError(f"{what} {path}: {problem}", hint=hint)


def _os_error(what: str, path: str, exc: OSError) -> SymflopsError:
    reason = exc.strerror or str(exc)
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return _error(what, path, f"cannot write: {reason}",
                      "free some space on that file system, or write elsewhere; the old file, "
                      "if any, is unchanged")
    if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return _error(what, path, f"cannot write: {reason}",
                      "choose a directory you can write to")
    if exc.errno in (errno.ENOTDIR, errno.EEXIST):
        return _error(what, path, "a part of the path is a file, not a directory",
                      "give a path whose directories are directories")
    return _error(what, path, f"cannot write: {reason}")


def target(path: str, what: str = "output") -> tuple[str, int | None]:
    """The regular file that writing ``path`` replaces (``path`` itself, or
    the file its symbolic link ends at) and the permission bits to keep
    (None for a new file).  Anything else is a SymflopsError."""
    if path == "":
        raise _error(what, "''", "the path is empty")
    if "\0" in path:
        raise _error(what, repr(path), "the path contains a NUL byte")
    try:
        st = os.stat(path)  # follows symbolic links
    except FileNotFoundError:
        if os.path.islink(path):
            raise _error(what, path, "is a symbolic link to nothing (a dangling link)",
                         "remove the link or give another path") from None
        return path, None
    except OSError as exc:
        raise _os_error(what, path, exc) from None
    link = os.path.islink(path)
    if not stat.S_ISREG(st.st_mode):
        through = " (through a symbolic link)" if link else ""
        raise _error(what, path, f"is {file_kind(st.st_mode)}{through}, not a regular file; it "
                                 "is never replaced")
    if not link:
        return path, stat.S_IMODE(st.st_mode)
    if _through_proc(path):
        raise _error(what, path, "is a link to an open file (through /proc, as /dev/stdout "
                                 "is); it is never replaced")
    real = os.path.realpath(path)
    try:
        same = os.path.samestat(os.stat(real), st)
    except OSError:
        same = False
    if not same:  # the link's name for the file is not a path to it (a deleted file)
        raise _error(what, path, "is a symbolic link whose target cannot be named",
                     "give the target's own path, or '-' for standard output")
    return real, stat.S_IMODE(st.st_mode)


def _through_proc(path: str) -> bool:
    """Whether resolving ``path`` goes through /proc, where a link names an
    open file (``/dev/stdout`` -> ``/proc/self/fd/1``), not a path."""
    step = os.path.abspath(path)
    for _ in range(40):  # the kernel's own limit on links followed
        head = os.path.realpath(os.path.dirname(step))
        if os.path.commonpath([head, "/proc"]) == "/proc":
            return True
        step = os.path.join(head, os.path.basename(step))
        if not os.path.islink(step):
            return False
        step = os.path.join(head, os.readlink(step))
    return True


def directory(path: str, what: str = "--out") -> str:
    """Make sure ``path`` is a directory (created when missing) and return it."""
    if path == STDOUT:
        raise _error(what, path, "this option takes a directory, not standard output",
                     "give a directory, e.g. --out build")
    if path == "":
        raise _error(what, "''", "the path is empty", "give a directory, e.g. --out build")
    if os.path.exists(path) and not os.path.isdir(path):
        raise _error(what, path, f"is {file_kind(os.stat(path).st_mode)}, not a directory",
                     "give a directory, e.g. --out build")
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as exc:
        raise _os_error(what, path, exc) from None
    return path


class _FdWriter(io.RawIOBase):
    """Raw writes on a file descriptor with ``os.write`` (so that a full disk
    raises where the bytes are written) and seeks with ``os.lseek``."""

    def __init__(self, fd: int):
        super().__init__()
        self.fd = fd
        self._abandoned = False

    def abandon(self) -> None:
        """Drop whatever is still buffered: the write failed, and the
        descriptor is closed (its number may already belong to another file)."""
        self._abandoned = True

    def writable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def write(self, data: bytes | bytearray | memoryview) -> int:  # type: ignore[override]
        if self._abandoned:
            return len(data)
        return os.write(self.fd, data)

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        return os.lseek(self.fd, offset, whence)

    def tell(self) -> int:
        return os.lseek(self.fd, 0, os.SEEK_CUR)

    def fileno(self) -> int:
        return self.fd


class _Stdout(io.RawIOBase):
    """Bytes to standard output, after whatever text was printed to it."""

    def writable(self) -> bool:
        return True

    def write(self, data: bytes | bytearray | memoryview) -> int:  # type: ignore[override]
        buffer = getattr(sys.stdout, "buffer", None)
        if buffer is None:  # a text-only stand-in (a test's capture)
            sys.stdout.write(bytes(data).decode("utf-8"))
        else:
            buffer.write(data)
        return len(data)


@contextlib.contextmanager
def open_output(path: str, what: str = "output") -> Iterator[BinaryIO]:
    """A binary file to write ``path`` through, atomically; ``-`` is standard
    output.  The target appears (or is replaced) only when the ``with``
    block ends without an exception."""
    if path == STDOUT:
        try:
            sys.stdout.flush()
            out = io.BufferedWriter(_Stdout(), buffer_size=1 << 16)
            yield out  # type: ignore[misc]
            out.flush()
            if getattr(sys.stdout, "buffer", None) is not None:
                sys.stdout.buffer.flush()
        except BrokenPipeError:
            raise  # the reader went away: the CLI exits quietly
        except OSError as exc:
            raise _os_error(what, "(standard output)", exc) from None
        return
    real, mode = target(path, what)
    folder = os.path.dirname(os.path.abspath(real))
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError as exc:
        raise _os_error(what, path, exc) from None
    # The base name is cut so that the temporary name stays within NAME_MAX.
    tmp: str | None = os.path.join(
        folder, f".tmp-{secrets.token_hex(4)}-{os.path.basename(real)[:100]}")
    raw = _FdWriter(-1)
    out = io.BufferedWriter(raw, buffer_size=1 << 20)
    # One try from the creation on: a signal handled right after os.open
    # returns is inside it too, so the temporary file never outlives it.
    try:
        try:
            raw.fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL
                             | getattr(os, "O_CLOEXEC", 0), 0o666)
        except FileExistsError:  # O_EXCL: that file is not ours, never removed here
            tmp = None
            raise
        if mode is not None:
            os.fchmod(raw.fd, mode)
        yield out  # type: ignore[misc]
        out.flush()
        os.fsync(raw.fd)  # a full disk or quota can surface only here
        out.close()
        fd, raw.fd = raw.fd, -1
        os.close(fd)
        os.replace(tmp, real)
    except BaseException as exc:
        if raw.fd >= 0:
            raw.abandon()
            out.close()
            os.close(raw.fd)
        if tmp is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
        if isinstance(exc, OSError):
            raise _os_error(what, path, exc) from None
        raise


def write_file(path: str, data: str | bytes, what: str = "output") -> None:
    """Write ``data`` (text as UTF-8) to ``path`` atomically; ``-`` is standard output."""
    with open_output(path, what) as out:
        out.write(data.encode("utf-8") if isinstance(data, str) else data)
