"""``python -m symflops ARGS`` as a real process, without paying its start-up.

Most command-line tests run the command as a process: its exit status, its
standard output and error, what it leaves on disk.  A fresh interpreter
spends about half a second importing SymPy and symflops before the command
starts, and the suite starts a few hundred of them.  :func:`run` runs
the same command in a child forked from a process that has imported them
once (one such process per test worker, started when first needed):

- the child is a process of its own: its file descriptors 0, 1 and 2 are a
  file of the given input (else ``/dev/null``) and two files the test reads
  back, its working directory and environment are the test's, it runs
  ``symflops.__main__.main`` as ``python -m symflops`` does, and its exit
  status is what the interpreter would give (``sys.exit``'s rules, 120 when
  flushing standard output fails at exit);
- what one command does to the interpreter's state (caches, imported
  modules, signal handlers) dies with its child: each command starts from
  the same imported, unused state.

What a forked child cannot reproduce runs as a fresh interpreter
(``subprocess.run``): an environment whose Python or locale settings differ
from the worker's (they act at start-up), options of ``subprocess.run``
other than ``cwd``, ``env``, ``input``, ``text`` and ``capture_output``, and
any machine without ``os.fork``.  Tests of start-up itself, of signals sent
to a running command, and of hash seeds start their own interpreters.
"""

from __future__ import annotations

import atexit
import io
import os
import pickle
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

#: Environment variables read when an interpreter starts (or, ``MPL...``, when
#: matplotlib is imported, which the forking process does): a command given
#: other values than the worker's runs as a fresh interpreter.
_START_UP = ("PYTHON", "LC_", "LANG", "MPL")

#: The forking process: it imports what the commands import, then forks one
#: child per request read from its standard input (a pickled tuple) and
#: writes the child's exit status to its standard output (pickled).
_SERVER = r"""
import os, pickle, sys
requests = os.fdopen(os.dup(0), "rb")
replies = os.fdopen(os.dup(1), "wb")
null = os.open(os.devnull, os.O_RDWR)
os.dup2(null, 0)
os.dup2(null, 1)
os.close(null)
import importlib, io
import sympy
import symflops.__main__
# What the commands import when they first need it: every module of symflops
# (the commands, the sheets), matplotlib with the three back ends the figures
# are saved with; and what a process's first figure builds once (the mathtext
# grammar of a log axis's labels, the fonts), by drawing one small figure
import pkgutil
for found in pkgutil.walk_packages(symflops.__path__, "symflops."):
    importlib.import_module(found.name)
import matplotlib.figure
for fmt in ("png", "pdf", "svg"):
    figure = matplotlib.figure.Figure(layout="constrained")
    figure.subplots().loglog([1, 1000], [1, 1000])
    figure.savefig(io.BytesIO(), format=fmt)
try:  # the oracle of verify and grads, where installed (it starts no thread on import)
    import torch
except ImportError:
    pass


def child(argv, cwd, env, stdin, out, err, address_space, timeout):
    if address_space is not None:
        import resource
        resource.setrlimit(resource.RLIMIT_AS, (address_space, address_space))
    for fd, path, flags in ((0, stdin, os.O_RDONLY),
                            (1, out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
                            (2, err, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)):
        opened = os.open(path, flags, 0o600)
        os.dup2(opened, fd)
        os.close(opened)
    requests.close()
    replies.close()
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    sys.argv = [symflops.__main__.__file__, *argv]
    try:
        code = symflops.__main__.main(argv)
    except SystemExit as exc:  # argparse's --help and usage errors
        code = exc.code
    except BaseException:
        import traceback
        traceback.print_exc()
        code = 1
    if code is None:
        code = 0
    elif not isinstance(code, int):
        print(code, file=sys.stderr)
        code = 1
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            code = 120
    os._exit(code & 0xFF)


while True:
    try:
        request = pickle.load(requests)
    except EOFError:
        break
    pid = os.fork()
    if pid == 0:
        try:
            child(*request)
        finally:
            os._exit(70)
    timeout, stopped = request[-1], False
    if timeout is not None:  # a hang: the child (not yet reaped, so its pid is its own) is killed
        import select, signal
        handle = os.pidfd_open(pid)
        if not select.select([handle], [], [], timeout)[0]:
            os.kill(pid, signal.SIGKILL)
            stopped = True
        os.close(handle)
    _, status = os.waitpid(pid, 0)
    pickle.dump((os.waitstatus_to_exitcode(status), stopped), replies)
    replies.flush()
"""

_server: subprocess.Popen | None = None
_started_env: dict[str, str] = {}


def _start() -> subprocess.Popen:
    global _server, _started_env
    if _server is None or _server.poll() is not None:
        _started_env = dict(os.environ)
        _server = subprocess.Popen([sys.executable, "-c", _SERVER], stdin=subprocess.PIPE,
                                   stdout=subprocess.PIPE, cwd=ROOT)
        atexit.register(_stop, _server)
    return _server


def _stop(server: subprocess.Popen) -> None:
    if server.stdin is not None:
        server.stdin.close()
    server.wait()


def _start_up(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k.startswith(_START_UP)}


def run(*args: Any, cwd: Any = None, env: dict[str, str] | None = None,
        input: str | bytes | None = None, text: bool = True, capture_output: bool = True,
        timeout: float | None = None, address_space: int | None = None,
        **others: Any) -> subprocess.CompletedProcess:
    """``subprocess.run([sys.executable, "-m", "symflops", *args], capture_output=True,
    text=text, cwd=cwd, env=env, input=input, timeout=timeout)``, in a forked child
    where it can be (the module's docstring says where not).  ``timeout`` is a
    guard against a hang, as in ``subprocess.run``: the child is killed and
    :class:`subprocess.TimeoutExpired` raised.  ``address_space``: the child's
    limit of virtual memory in bytes (``RLIMIT_AS``), set before the command runs."""
    argv = [a if isinstance(a, bytes) else str(a) for a in args]
    environment = dict(os.environ if env is None else env)
    started = _started_env if _server is not None else dict(os.environ)
    if (others or not capture_output or not hasattr(os, "fork")
            or (timeout is not None and not hasattr(os, "pidfd_open"))
            or _start_up(environment) != _start_up(started)):
        if address_space is not None:
            others["preexec_fn"] = lambda: _limit(address_space)
        return subprocess.run([sys.executable, "-m", "symflops", *argv], cwd=cwd, env=env,
                              input=input, text=text, capture_output=capture_output,
                              timeout=timeout, **others)
    folder = tempfile.mkdtemp(prefix="symflops-forked-")
    try:
        stdin = os.devnull
        if input is not None:
            stdin = os.path.join(folder, "in")
            with open(stdin, "wb") as fh:
                fh.write(input.encode() if isinstance(input, str) else input)
        out, err = os.path.join(folder, "out"), os.path.join(folder, "err")
        request = ([os.fsdecode(a) for a in argv], os.fspath(cwd) if cwd is not None
                   else os.getcwd(), environment, stdin, out, err, address_space, timeout)
        server = _start()
        assert server.stdin is not None and server.stdout is not None
        pickle.dump(request, server.stdin)
        server.stdin.flush()
        code, stopped = pickle.load(server.stdout)
        if stopped:
            raise subprocess.TimeoutExpired([sys.executable, "-m", "symflops", *argv], timeout)
        stdout, stderr = Path(out).read_bytes(), Path(err).read_bytes()
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    command = [sys.executable, "-m", "symflops", *argv]
    if text:  # as subprocess.run decodes: the locale's encoding, universal newlines
        return subprocess.CompletedProcess(command, code, _decoded(stdout), _decoded(stderr))
    return subprocess.CompletedProcess(command, code, stdout, stderr)


def _limit(address_space: int) -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (address_space, address_space))


def _decoded(data: bytes) -> str:
    return io.TextIOWrapper(io.BytesIO(data)).read()
