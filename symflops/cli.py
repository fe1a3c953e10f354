"""The ``symflops`` command: parse the command line, run one command, map the
outcome to an exit status.  ``symflops`` (the console script) and ``python -m
symflops`` reach :func:`main` through :mod:`symflops.__main__`.

Start-up is light: this module and the parser (:mod:`symflops.commands.cli`)
import neither SymPy, Jinja2, PyYAML nor NumPy; the module that runs a
command (:data:`COMMANDS`) is imported when that command runs, inside
:func:`main`'s handlers, so that Ctrl-C while it imports is "interrupted"
too.

Exit status: 0 success; 1 a check or verification failed; 2 bad input (one
line on stderr naming file:line:column, no traceback); 70 an internal error
(a bug: set SYMFLOPS_DEBUG=1 for the traceback); 130 interrupted (Ctrl-C,
SIGINT); 143 terminated (SIGTERM; 129 for SIGHUP).  A termination signal is
raised as :class:`~symflops.core.errors.Terminated` where the program is, so that
temporary files (``.tmp-*`` beside an output, ``symflops-tex-*``) are removed
on the way out, exactly as for Ctrl-C.
"""

from __future__ import annotations

import errno
import importlib
import os
import signal
import sys
import threading
import traceback
from typing import Sequence

from .commands.cli import build_parser
from .core.errors import SymflopsError, Terminated

#: The module of :mod:`symflops.commands` whose ``run(args)`` runs each command.
COMMANDS = {"derive": "layer", "eval": "layer", "render": "layer", "build": "layer",
            "sweep": "layer", "exercises": "layer", "check": "check", "verify": "verify", "grads": "grads",
            "plan": "plan", "import-hf": "importhf", "shard": "shard", "roofline": "roofline"}


def run(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    module = importlib.import_module(f".commands.{COMMANDS[args.command]}", __package__)
    return module.run(args)


def _terminate(signum: int, frame: object) -> None:
    """SIGTERM and SIGHUP: unwind like Ctrl-C does (a second signal during
    the clean-up is ignored, so that the clean-up finishes)."""
    for sig in _SIGNALS:
        signal.signal(sig, signal.SIG_IGN)
    raise Terminated(signum)


_SIGNALS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name))


def _quiet_stdout() -> None:
    """Standard output failed (the reader left, the disk is full): point it at
    /dev/null so that the interpreter's last flush has nothing to complain of."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):  # not a real file (a test's capture)
        pass


def main(argv: Sequence[str] | None = None) -> int:
    previous = {}
    if threading.current_thread() is threading.main_thread():  # where handlers can be set
        previous = {sig: signal.signal(sig, _terminate) for sig in _SIGNALS}
    try:
        code = run(argv)
        sys.stdout.flush()  # a full disk behind standard output shows here
        return code
    except SymflopsError as exc:
        print(f"symflops: {exc}", file=sys.stderr)
        excerpt = exc.excerpt()
        if excerpt:
            print(excerpt, file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("symflops: interrupted", file=sys.stderr)
        return 130
    except Terminated as exc:
        print(f"symflops: terminated by signal {exc.signum}", file=sys.stderr)
        return 128 + exc.signum
    except BrokenPipeError:
        _quiet_stdout()
        return 0
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EIO) and not exc.filename:
            _quiet_stdout()  # writing standard output failed: the input was fine, the output not
            print(f"symflops: cannot write standard output: {exc.strerror}", file=sys.stderr)
            return 2
        return _internal(exc)
    except Exception as exc:  # a bug in symflops, not in the user's input
        return _internal(exc)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _internal(exc: Exception) -> int:
    if os.environ.get("SYMFLOPS_DEBUG"):
        traceback.print_exception(exc)
    print(f"symflops: internal error: {type(exc).__name__}: {exc} "
          "(this is a bug; rerun with SYMFLOPS_DEBUG=1 and report the traceback)",
          file=sys.stderr)
    return 70
