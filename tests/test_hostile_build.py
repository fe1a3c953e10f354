"""``symflops build`` on hostile sources: ``-j`` far beyond the machine.

Issue 25 item 8.  Every expected value is written here by hand from the
README (*Commands*, *Builds*).
"""

from __future__ import annotations

import concurrent.futures
import io
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from symflops.commands import build as build_module
from symflops.commands.build import build

ROOT = Path(__file__).resolve().parent.parent
FFN = ROOT / "derivations" / "ffn.yaml"
DROPOUT = ROOT / "derivations" / "dropout.yaml"


def run(*args, timeout=600):
    return subprocess.run([sys.executable, "-m", "symflops", *map(str, args)],
                          capture_output=True, text=True, timeout=timeout)


def _quiet_build(src, out, **kwargs):
    err = io.StringIO()
    result = build(str(src), str(out), pdf=False, stdout=io.StringIO(), stderr=err, **kwargs)
    return result, err.getvalue()


# ------------------------------------------------------------- -j 10000 --

def test_jobs_far_beyond_the_machine_use_at_most_one_worker_per_declaration_and_core(
        tmp_path, monkeypatch):
    """-j 10000 forked ten thousand workers (all but two idle) and the build
    never ended.  The pool's constructor is watched: it is asked for at most
    min(declarations, cores) workers, and the build finishes."""
    src = tmp_path / "src"
    src.mkdir()
    for name in ("ffn", "dropout", "embedding"):   # three independent declarations
        shutil.copy(ROOT / "derivations" / f"{name}.yaml", src / f"{name}.yaml")
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    asked = []
    real = concurrent.futures.ProcessPoolExecutor

    def watched(*args, max_workers=None, **kwargs):
        asked.append(max_workers)
        # checked before any process is forked: a build asking for 10,000 stops here
        assert max_workers is not None and 1 <= max_workers <= min(3, cores), max_workers
        return real(*args, max_workers=max_workers, **kwargs)

    monkeypatch.setattr(concurrent.futures, "ProcessPoolExecutor", watched)
    result, err = _quiet_build(src, tmp_path / "out", jobs=10000)
    assert asked == [min(3, cores)], asked
    assert not result.failed and len(result.written) == 6, err


def test_jobs_far_beyond_the_machine_from_the_command_line(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    shutil.copy(FFN, src)
    shutil.copy(DROPOUT, src)
    result = run("build", "--src", src, "--out", tmp_path / "out", "--no-pdf", "-j", "10000")
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "out" / "ffn.md").exists() and (tmp_path / "out" / "dropout.md").exists()


@pytest.mark.parametrize("jobs, tasks, expected", [
    # on a machine of 4 cores: min(jobs or 4, 4, tasks), at least 1
    (10000, 3, 3), (10000, 10000, 4), (0, 50, 4), (0, 2, 2), (1, 5, 1), (2, 1, 1), (3, 5, 3),
    (2, 0, 1)])
def test_the_worker_count(monkeypatch, jobs, tasks, expected):
    monkeypatch.setattr(build_module, "cores", lambda: 4)
    assert build_module.workers(jobs, tasks) == expected


def test_the_cores_are_the_ones_this_process_may_use(monkeypatch):
    """A process pinned to one core (taskset, a container's cpuset) gets one
    worker: os.sched_getaffinity, not os.cpu_count."""
    if not hasattr(os, "sched_getaffinity"):
        pytest.skip("no CPU affinity on this system")
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0})
    monkeypatch.setattr(os, "cpu_count", lambda: 64)
    assert build_module.workers(0, 10) == 1
