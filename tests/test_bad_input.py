"""Bad input gets one clear line: file:line:column, what is wrong, how to fix.

Each file in tests/bad/ starts with two comment lines written by hand::

    # expect: <fragment of the message>
    # at: <line>:<column>

The CLI must exit 2, print the fragment and the position, print no
traceback, and write nothing to stdout.
"""

import re
import subprocess
import sys
from pathlib import Path

import pytest

BAD = Path(__file__).resolve().parent / "bad"
CASES = sorted(BAD.glob("*.yaml"))


def run_cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "symflops", *map(str, args)],
                          capture_output=True, text=True, cwd=cwd)


def header(path):
    text = path.read_text()
    expect = re.search(r"^# expect: (.*)$", text, re.M).group(1)
    at = re.search(r"^# at: (\d+:\d+)$", text, re.M).group(1)
    return expect, at


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_bad_declaration_is_one_clear_error(path):
    expect, at = header(path)
    result = run_cli("derive", path)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert result.stdout == ""
    first = result.stderr.splitlines()[0]
    assert f"{path}:{at}: error: " in first, first
    assert expect in first
    assert "fix: " in first


def test_corpus_is_not_empty():
    assert len(CASES) >= 15


def test_missing_file(tmp_path):
    result = run_cli("derive", tmp_path / "nope.yaml")
    assert result.returncode == 2
    assert "nope.yaml: no such file" in result.stderr
    assert "Traceback" not in result.stderr


def test_hostile_shape_is_not_executed():
    marker = Path("/tmp/symflops-pwned")
    marker.unlink(missing_ok=True)
    result = run_cli("derive", BAD / "python_in_shape.yaml")
    assert result.returncode == 2
    assert not marker.exists()


@pytest.mark.parametrize("values,fragment", [
    (["B=10", "D=4"], "no value for dimension(s) F"),
    (["B=10", "D=4", "F=3", "Q=2"], "has no dimension 'Q'"),
    (["B=10", "D=4", "F=0"], "must be positive"),
    (["B=10", "D=4", "F"], "expected NAME=VALUE"),
    (["B=10", "D=4", "F=__import__('os')"], "error"),
])
def test_eval_rejects_bad_values(values, fragment):
    ffn = Path(__file__).resolve().parent.parent / "derivations" / "ffn.yaml"
    result = run_cli("eval", ffn, *values)
    assert result.returncode == 2, result.stderr
    assert fragment in result.stderr
    assert "Traceback" not in result.stderr
