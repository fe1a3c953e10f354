"""The worker processes of ``symflops build -j N``: how many, which
declarations go to one worker, and how a signal stops them.

A worker gets a group of declarations that read one file (a model and the
blocks it includes), so that their shared ops are derived once.  A SIGTERM
or Ctrl-C that reaches a worker busy with a sheet unwinds it (its pdflatex
killed, its scratch directory removed) and it exits; an idle one exits at
once.  The parent stops its workers with :func:`_stop` and waits for them.
"""

from __future__ import annotations

import concurrent.futures
import os
import signal
import sys
from typing import Any, Callable, Sequence

from ..core.errors import Terminated
from ..declaration.reader import load
from .pdf import PDF_TIMEOUT_S


def cores() -> int:
    """The cores this process may run on (its CPU affinity where the system
    has one, else every core)."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def workers(jobs: int, tasks: int) -> int:
    """The worker processes of ``-j jobs`` for ``tasks`` groups of declarations:
    ``jobs`` (0: one per core), but never more than the cores nor the groups
    (``-j 10000`` forked ten thousand processes, all but a few idle, and the
    machine stalled); at least one."""
    return max(1, min(jobs or cores(), cores(), tasks))


def _stop(pool: concurrent.futures.ProcessPoolExecutor) -> None:
    """Stop the workers now (the build was interrupted) and wait for them: a
    worker cleans up what it had started before it exits."""
    procs = list((getattr(pool, "_processes", None) or {}).values())
    for proc in procs:
        if proc.is_alive():
            proc.terminate()  # SIGTERM: see _worker_signal
    for proc in procs:
        proc.join(timeout=PDF_TIMEOUT_S)
    pool.shutdown(wait=False, cancel_futures=True)


#: True in a worker while it builds (a signal then unwinds the build, so that
#: its scratch directory and pdflatex are cleaned up), False while it waits.
_busy = False
#: The signal a worker was stopped by while it built (0: none): the exception
#: it raised may have been swallowed where Python cannot pass one on (a
#: finalizer's, printed as "Exception ignored"), so _each checks it too.
_stopped_by = 0


def _worker_signal(signum: int, frame: Any) -> None:
    global _stopped_by
    if _busy:
        _stopped_by = signum
        # Unwind once. A second signal (the parent's _stop sends SIGTERM to
        # a worker that the process group's SIGTERM already reached) must not
        # interrupt the unwinding: raised inside the removal of the scratch
        # directory, it would leave the directory behind.
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, signal.SIG_IGN)
        raise Terminated(signum)
    os._exit(128 + signum)


def _unraisable(info: Any, default: Callable[[Any], None] = sys.unraisablehook) -> None:
    """A Terminated raised where Python cannot pass it on (a weakref callback,
    a finalizer) is not a traceback on stderr: _each exits after the work."""
    if not isinstance(info.exc_value, Terminated):
        default(info)


def _worker_start() -> None:
    sys.unraisablehook = _unraisable
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, _worker_signal)


def _groups(files: Sequence[str]) -> list[list[str]]:
    """``files`` in groups that share a declaration (a model and the blocks it
    includes, as the declaration reader reads them), the group with the most ops first.
    A declaration that does not load stands alone; its worker reports it."""
    reads: dict[str, set[str]] = {}
    ops: dict[str, int] = {}
    for path in files:
        try:
            layer = load(path)
        except Exception:  # reported by the worker that builds it
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
    """A worker's job: its group of declarations, one after the other."""
    global _busy
    _busy = True
    try:
        done = [work(p) for p in paths]
    except Terminated as exc:  # everything it had started is cleaned up by now
        os._exit(128 + exc.signum)
    finally:
        _busy = False
    if _stopped_by:
        # stopped, but its Terminated was swallowed on the way: its signals are
        # ignored now, and sending the result could block for ever on a pipe
        # nobody reads (the parent is gone; the worker holds the read end too)
        os._exit(128 + _stopped_by)
    return done
