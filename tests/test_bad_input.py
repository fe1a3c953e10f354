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
import time
from pathlib import Path

import pytest

import symflops
from symflops.check import check
from symflops.statement import MAX_FACTORS, MAX_LETTERS

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


@pytest.mark.parametrize("name", ["too_many_letters", "too_many_factors", "too_many_terms"])
def test_too_large_op_fails_fast(name):
    """An op past the size limits is refused as soon as it is parsed, instead
    of running for minutes in the derivation."""
    start = time.perf_counter()
    with pytest.raises(symflops.SymflopsError, match="more than the limit"):
        symflops.load(BAD / f"{name}.yaml")
    assert time.perf_counter() - start < 1.0


def test_an_op_at_the_limits_derives_and_checks_quickly():
    """16 letters over 16 dims in one op: derived, printed and decided in seconds
    (factoring is skipped past 10 dims, and a sign with one sign of coefficients
    is read off without expanding)."""
    letters = [f"i{k}" for k in range(MAX_LETTERS)]
    dims = {f"D{k}": "" for k in range(MAX_LETTERS)}
    start = time.perf_counter()
    layer = symflops.declare("wide", dims=dims, tensors={
        "A": {"shape": list(dims), "role": "input"},
        "W": {"shape": list(dims), "role": "param"}},
        ops=[f"Y[] = A[{','.join(letters)}] W[{','.join(letters)}]"])
    # a dot product: each gradient is an outer product with the scalar dY, 1 per term
    results = check(layer, ["flops.backward == flops.forward", "params > 0"])
    assert [r.holds for r in results] == [True, True]
    assert time.perf_counter() - start < 10
    chain = symflops.declare("chain", dims={"D": ""}, tensors={
        f"X{k}": {"shape": ["D", "D"], "role": "param"} for k in range(MAX_LETTERS - 1)},
        ops=[f"Y[i0,i{MAX_LETTERS - 1}] = " + " ".join(f"X{k}[i{k},i{k + 1}]"
                                                      for k in range(MAX_LETTERS - 1))])
    assert len(symflops.derive(chain).rules) == MAX_LETTERS - 1 < MAX_FACTORS
