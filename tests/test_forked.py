"""tests/forked.py runs ``python -m symflops`` in a forked child: each
command here gives the same exit status, standard output and standard error
as a fresh interpreter started by ``subprocess.run`` (the oracle)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import forked

ROOT = Path(__file__).resolve().parent.parent
FFN = str(ROOT / "derivations" / "ffn.yaml")


def fresh(*args, **kwargs):
    return subprocess.run([sys.executable, "-m", "symflops", *args], capture_output=True,
                          **{"text": True, **kwargs})


@pytest.mark.parametrize("args", [
    ("eval", FFN, "B=2", "D=3", "F=5", "--json"),   # 0, standard output
    ("eval", FFN, "B=2", "D=3", "F=0"),             # 2, one line on standard error
    ("--help",),                                    # argparse's exit 0
    ("eval",),                                      # argparse's usage error, exit 2
    ("derive", "no/such/file.yaml"),
], ids=["json", "bad-value", "help", "usage", "missing"])
def test_the_same_as_a_fresh_interpreter(args):
    got, expected = forked.run(*args, cwd=ROOT), fresh(*args, cwd=ROOT)
    assert (got.returncode, got.stdout, got.stderr) == (
        expected.returncode, expected.stdout, expected.stderr)


def test_bytes_arguments_and_bytes_output(tmp_path):
    """A path that is not UTF-8 reaches the command as Python decodes it."""
    folder = os.fsencode(tmp_path) + b"/bad\xffname"
    os.mkdir(folder)
    args = ("derive", folder + b"/missing.yaml")
    got, expected = forked.run(*args, text=False), fresh(*args, text=False)
    assert got.returncode == expected.returncode == 2
    assert got.stderr == expected.stderr and b"bad\\udcffname" in got.stderr


def test_relative_paths_are_read_from_the_test_s_directory(tmp_path, monkeypatch):
    """Without ``cwd`` the command runs where the test is (as subprocess.run
    does), whatever directory the command before it ran in."""
    (tmp_path / "mine.yaml").write_text(Path(FFN).read_text())
    assert forked.run("eval", "derivations/ffn.yaml", "B=1", "D=1", "F=1", cwd=ROOT).returncode == 0
    monkeypatch.chdir(tmp_path)
    here = forked.run("eval", "mine.yaml", "B=1", "D=1", "F=1")
    assert here.returncode == 0, here.stderr
    assert forked.run("eval", "derivations/ffn.yaml", "B=1", "D=1", "F=1").returncode == 2


def test_a_start_up_setting_runs_a_fresh_interpreter():
    """PYTHONHASHSEED acts when an interpreter starts: such a command is not
    forked, and gives the fresh interpreter's answer all the same."""
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    got = forked.run("eval", FFN, "B=2", "D=3", "F=5", env=env)
    assert got.returncode == 0 and got.stdout == fresh("eval", FFN, "B=2", "D=3", "F=5").stdout
