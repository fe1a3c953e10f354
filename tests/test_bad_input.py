"""Bad input gets one clear line: file:line:column, what is wrong, how to fix.

Each file in tests/bad/ starts with two comment lines written by hand::

    # expect: <fragment of the message>
    # at: <line>:<column>

The CLI must exit 2, print the fragment and the position, print no
traceback, and write nothing to stdout.
"""

import re
from pathlib import Path

import pytest
import sympy

import symflops
from symflops import cli
from symflops.checks.check import check
from symflops.lang.statement import MAX_FACTORS, MAX_LETTERS, MAX_TENSORS
import forked

BAD = Path(__file__).resolve().parent / "bad"
CASES = sorted(BAD.glob("*.yaml"))


def run_cli(*args, cwd=None):
    return forked.run(*map(str, args), cwd=cwd)


def header(path):
    text = path.read_text()
    expect = re.search(r"^# expect: (.*)$", text, re.M).group(1)
    at = re.search(r"^# at: (\d+:\d+)$", text, re.M).group(1)
    return expect, at


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_bad_declaration_is_one_clear_error(path, capsys):
    """In-process (a fresh interpreter per file would cost a second each);
    the test below runs a few through the real command line."""
    expect, at = header(path)
    assert cli.main(["derive", str(path)]) == 2
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    assert captured.out == ""
    first = captured.err.splitlines()[0]
    assert f"{path}:{at}: error: " in first, first
    assert expect in first
    assert "fix: " in first


@pytest.mark.parametrize("name", ["invalid_yaml", "too_many_letters", "unknown_tensor"])
def test_bad_declaration_from_the_shell(name):
    path = BAD / f"{name}.yaml"
    expect, at = header(path)
    result = run_cli("derive", path)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert result.stdout == ""
    first = result.stderr.splitlines()[0]
    assert f"{path}:{at}: error: " in first and expect in first, first


def test_corpus_is_not_empty():
    assert len(CASES) >= 80


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
    (["B=10", "D=4", "F=0"], "must be a positive integer"),
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
    of running for minutes in the derivation: loading (parse and lowering,
    no derivation) raises.  How long that takes is measured in bench/, not here."""
    with pytest.raises(symflops.SymflopsError, match="more than the limit"):
        symflops.load(BAD / f"{name}.yaml")


def test_an_op_at_the_limits_derives_and_checks_quickly():
    """16 letters over 16 dims in one op: derived, printed and decided
    (factoring is skipped past 10 dims, and a sign with one sign of coefficients
    is read off without expanding; the time is a benchmark matter)."""
    letters = [f"i{k}" for k in range(MAX_LETTERS)]
    dims = {f"D{k}": "" for k in range(MAX_LETTERS)}
    layer = symflops.declare("wide", dims=dims, tensors={
        "A": {"shape": list(dims), "role": "input"},
        "W": {"shape": list(dims), "role": "param"}},
        ops=[f"Y[] = A[{','.join(letters)}] W[{','.join(letters)}]"])
    # a dot product: each gradient is an outer product with the scalar dY, 1 per term
    results = check(layer, ["flops.backward == flops.forward", "params > 0"])
    assert [r.holds for r in results] == [True, True]
    n = MAX_TENSORS
    chain = symflops.declare("chain", dims={"D": ""}, tensors={
        f"X{k}": {"shape": ["D", "D"], "role": "param"} for k in range(n)},
        ops=[f"Y[i0,i{n}] = " + " ".join(f"X{k}[i{k},i{k + 1}]" for k in range(n))])
    d = symflops.derive(chain)
    assert len(d.rules) == n < MAX_FACTORS
    # By hand: the written order multiplies n - 1 pairs of D x D matrices, 2 D**3 each;
    # each rule's cheapest order multiplies the other n - 1 matrices and dY the same way.
    D = sympy.Symbol("D", positive=True, integer=True)
    c = symflops.costs(d)
    assert c.flops_forward == 2 * (n - 1) * D**3 and c.flops_backward == n * 2 * (n - 1) * D**3


# Claims are given on the command line, so the tests/bad format cannot hold
# them: each row is (claims, --at values, where, fragment of the message).
BAD_CLAIMS = [
    (["flops.total == 6*parms*B"], [], "<claim 1>:1:18", "unknown name 'parms'"),
    (["flops.totl == 1"], [], "<claim 1>:1:1", "did you mean 'flops.total'?"),
    (["flops == 1"], [], "<claim 1>:1:1", "unknown name 'flops'"),
    (["memory.foo == 1"], [], "<claim 1>:1:1", "unknown name 'memory.foo'"),
    (["flops.total"], [], "<claim 1>:1:1", "'flops.total' is not a comparison"),
    (["flops.total < params < B"], [], "<claim 1>:1:22", "misplaced comparison '<'"),
    ([""], [], "<claim 1>:1:1", "empty expression"),
    (["flops.total == (B"], [], "<claim 1>:1:16", "'(' is never closed"),
    (["flops.total == B D"], [], "<claim 1>:1:18", "missing operator between 'B' and 'D'"),
    (["flops.total == foo(B)"], [], "<claim 1>:1:16", "unknown function 'foo'"),
    (["B == sqrt()"], [], "<claim 1>:1:6", "sqrt() takes 1 argument, got 0"),
    (["flops.total == B/0"], [], "<claim 1>:1:18", "division by zero"),
    (["flops.total == 10**100000"], [], "<claim 1>:1:18", "too large"),
    (["flops.total = 6*params*B"], [], "<claim 1>:1:13", "unexpected character '='"),
    (["B == __import__('os')"], [], "<claim 1>:1:17", "unexpected character"),
    (["flops.total == B[0]"], [], "<claim 1>:1:17", "unexpected character '['"),
    (["params > 0", "flops.total >= B D"], [], "<claim 2>:1:18", "missing operator"),
    (["params > 0"], ["B=1,D=2"], None, "no value for dimension(s) F"),
    (["params > 0"], ["B=1,D=2,F=3,Q=4"], None, "has no dimension 'Q'"),
    (["params > 0"], ["B=1,D=2,F=0"], None, "must be a positive integer"),
    (["params > 0"], ["B=1,D=2,F"], None, "expected NAME=VALUE"),
]


@pytest.mark.parametrize("claims,at,where,fragment", BAD_CLAIMS,
                         ids=[f"{k}-{row[3][:24]}" for k, row in enumerate(BAD_CLAIMS)])
def test_bad_claim_is_one_clear_error(capsys, claims, at, where, fragment):
    ffn = Path(__file__).resolve().parent.parent / "derivations" / "ffn.yaml"
    args = ["check", str(ffn), *claims] + [x for a in at for x in ("--at", a)]
    assert cli.main(args) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    first = captured.err.splitlines()[0]
    assert first.startswith(f"symflops: {where}: error: " if where else "symflops: error: "), first
    assert fragment in first and "fix: " in first
    assert "Traceback" not in captured.err


def test_dim_named_like_a_quantity_is_refused_by_check(tmp_path, capsys):
    path = tmp_path / "clash.yaml"
    path.write_text("dims: {B: batch, params: width}\n"
                    "tensors:\n  X: {shape: [B, params], role: input}\n"
                    "ops:\n  - Y[b] = X[b,d]\n")
    assert cli.main(["check", str(path), "B > 0"]) == 2
    first = capsys.readouterr().err.splitlines()[0]
    assert first.startswith(f"symflops: {path}:1:18: error: dimension 'params' has the name of "
                            "a derived quantity"), first
    assert "fix: rename the dimension" in first
