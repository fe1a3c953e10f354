"""``symflops build`` on hostile sources: declarations whose files would land
on one another's, ``-j`` far beyond the machine, files that are not regular.

Issue 25 items 3, 8 and 10.  Every expected value is written here by hand
from the README (*Builds*, *Figures*): a sheet of ``NAME.yaml`` is
``NAME.md``/``.tex``/``.pdf``, its figures ``STEM.KIND.EXT`` with ``STEM``
the name with each character outside ``[A-Za-z0-9_.-]`` replaced by ``_``.
"""

from __future__ import annotations

import concurrent.futures
import io
import os
import shutil
import socket
import unicodedata
from pathlib import Path

import pytest

from symflops.commands import names
from symflops.commands import pool as pool_module
from symflops.commands.build import build
import forked

ROOT = Path(__file__).resolve().parent.parent
FFN = ROOT / "derivations" / "ffn.yaml"
DROPOUT = ROOT / "derivations" / "dropout.yaml"


def run(*args, timeout=600):
    return forked.run(*map(str, args), timeout=timeout)


def _quiet_build(src, out, **kwargs):
    err = io.StringIO()
    result = build(str(src), str(out), pdf=False, stdout=io.StringIO(), stderr=err, **kwargs)
    return result, err.getvalue()


# --------------------------------------------------------- names that clash --

@pytest.mark.parametrize("jobs", [1, 2])
@pytest.mark.parametrize("first, second, shared", [
    # 'a b' has the figure stem a_b (the space replaced): a_b.graph.pdf is both's
    ("a b.yaml", "a_b.yaml", "a_b.graph.pdf"),
    # the same sheet name from two extensions
    ("x.yaml", "x.yml", "x.md"),
    # the sheet x.graph.pdf of x.graph.yaml is the graph figure of x.yaml
    ("x.graph.yaml", "x.yaml", "x.graph.pdf"),
    # one file where case is ignored (macOS, Windows), refused on every system
    ("A.yaml", "a.yaml", "A.md"),
    # é composed (U+00E9) and decomposed (e, U+0301): one file on macOS
    ("\u00e9.yaml", "e\u0301.yaml", "\u00e9.md"),
])
def test_two_declarations_that_would_write_one_file_are_refused(tmp_path, jobs, first, second,
                                                                shared):
    src, out = tmp_path / "src", tmp_path / "out"
    src.mkdir()
    shutil.copy(FFN, src / first)
    shutil.copy(DROPOUT, src / second)
    shutil.copy(FFN, src / "other.yaml")
    result, err = _quiet_build(src, out, jobs=jobs)
    # both refused, each message naming both files and the file they share; the other built
    assert sorted(os.path.basename(p) for p in result.failed) == sorted([first, second]), err
    lines = [line for line in err.splitlines() if "not built" in line]
    assert len(lines) == 2, err
    for line in lines:
        assert str(src / first) in line and str(src / second) in line, line
        assert any(f"'{unicodedata.normalize(form, name)}'" in line
                   for name in (shared, shared.lower()) for form in ("NFC", "NFD")), line
        assert "rename one of the two" in line
    assert sorted(p.name for p in out.iterdir() if not p.name.startswith("other.")) == []
    assert (out / "other.md").read_text().startswith("# Transformer feed-forward")


def test_the_cli_exits_2_for_a_clash(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    shutil.copy(FFN, src / "a b.yaml")
    shutil.copy(DROPOUT, src / "a_b.yaml")
    result = run("build", "--src", src, "--out", tmp_path / "out", "--no-pdf")
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert "would both write 'a_b.graph.pdf'" in result.stderr, result.stderr
    assert not (tmp_path / "out" / "a_b.graph.pdf").exists()


def test_every_figure_a_sheet_writes_is_among_the_names_checked(tmp_path):
    """The clash check compares names.outputs(path); the figures a
    build really writes (at an --at configuration, so all four kinds) must
    all be in it, else two declarations could still share a file."""
    src, out = tmp_path / "src", tmp_path / "out"
    src.mkdir()
    shutil.copy(ROOT / "derivations" / "transformer_block.yaml", src / "t b+.yaml")
    result, err = _quiet_build(src, out, configs=[])
    assert not result.failed, err
    written = {os.path.basename(p) for p in result.written + result.figures}
    assert written, err
    assert written <= set(names.outputs(str(src / "t b+.yaml"))), written
    assert {"t_b_.graph.pdf", "t b+.md"} <= written


def test_the_shipped_declarations_do_not_clash():
    files = sorted(str(p) for p in (ROOT / "derivations").glob("*.y*ml"))
    assert names.clashing(files) == {}


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
    result = run("build", "--src", src, "--out", tmp_path / "out", "--format", "md", "-j", "10000")
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "out" / "ffn.md").exists() and (tmp_path / "out" / "dropout.md").exists()


@pytest.mark.parametrize("jobs, tasks, expected", [
    # on a machine of 4 cores: min(jobs or 4, 4, tasks), at least 1
    (10000, 3, 3), (10000, 10000, 4), (0, 50, 4), (0, 2, 2), (1, 5, 1), (2, 1, 1), (3, 5, 3),
    (2, 0, 1)])
def test_the_worker_count(monkeypatch, jobs, tasks, expected):
    monkeypatch.setattr(pool_module, "cores", lambda: 4)
    assert pool_module.workers(jobs, tasks) == expected


def test_the_cores_are_the_ones_this_process_may_use(monkeypatch):
    """A process pinned to one core (taskset, a container's cpuset) gets one
    worker: os.sched_getaffinity, not os.cpu_count."""
    if not hasattr(os, "sched_getaffinity"):
        pytest.skip("no CPU affinity on this system")
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0})
    monkeypatch.setattr(os, "cpu_count", lambda: 64)
    assert pool_module.workers(0, 10) == 1


# ------------------------------------------------- files that are not regular --

# Issue 25 item 10 reported that a FIFO in a -j 2 build's source gave no path
# in its message; on this code -j 1 and -j 2 already printed the same line, so
# this test holds the two to each other rather than reproducing a failure.
@pytest.mark.parametrize("kind", ["fifo", "directory", "device", "socket"])
def test_a_source_that_is_not_a_file_is_reported_alike_with_and_without_workers(tmp_path,
                                                                               kind):
    src = tmp_path / "src"
    src.mkdir()
    shutil.copy(DROPOUT, src)  # with odd.yaml, two declarations: -j 2 starts two workers
    odd = src / "odd.yaml"
    {"fifo": os.mkfifo, "directory": os.mkdir, "device": lambda p: os.symlink("/dev/null", p),
     "socket": lambda p: socket.socket(socket.AF_UNIX).bind(str(p))}[kind](odd)
    said = {}
    for jobs in ("1", "2"):
        # (Markdown alone: the message is the same whatever the formats built)
        result = run("build", "--src", src, "--out", tmp_path / f"out{jobs}", "--no-pdf",
                     "--format", "md", "-j", jobs)
        assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
        said[jobs] = [line.replace(f"out{jobs}", "out") for line in result.stderr.splitlines()]
        assert any(line.startswith(f"symflops: error: {odd}: is ") for line in said[jobs]), \
            result.stderr
    assert said["1"] == said["2"]


def test_every_kind_of_figure_has_its_file_names_checked():
    """A kind of figure added to the sheets without its names in the clash
    check would let two declarations overwrite each other's figure."""
    from typing import get_args
    from symflops.sheets.figures import FIGURE_FILES, FigureKind
    assert {kind for kind, _ in FIGURE_FILES} == set(get_args(FigureKind))
