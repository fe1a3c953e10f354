"""Bad input that is not a declaration: dim values, plan options, claims,
.npz files, verify's seed and sizes.  Each is refused with exit 2 and one
clear line (no traceback), never a negative or fractional count printed, a
hang, or an internal error (exit 70); and a few inputs at the edge of what
is accepted still work, with values checked by hand.

Issue 14, items 6 (invalid sizes), 11 (resource exhaustion), 15 (exit 70 on
bad input) and 16 (misleading messages).  Declarations that must be refused
are in tests/bad/ (tests/test_bad_input.py).
"""

from __future__ import annotations

import io
import itertools
import json
import zipfile
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
import sympy

from symflops import cli
from symflops.core.sizes import promised_quotient, size_problem
import forked

ROOT = Path(__file__).resolve().parent.parent
FFN = ROOT / "derivations" / "ffn.yaml"
BLOCK = ROOT / "derivations" / "llama_block.yaml"  # tokens B*S; R = N / G
LLAMA_BLOCK_DIMS = ["D=64", "E=8", "F=32"]

# Small declarations written into a temporary directory by the fixture below.
DECLARATIONS = {
    "outer.yaml": "dims: {B: b, D: d}\ntensors:\n  x: {shape: [B], role: input}\n"
                  "  y: {shape: [D], role: input}\nops:\n  - Z[b,d] = x[b] y[d]\n",
    "fifth.yaml": "dims: {B: b, D: d}\ntensors:\n  X: {shape: [B, D**5], role: input}\n"
                  "ops:\n  - Y[b] = X[b,d]\n",
    "steep.yaml": "dims: {B: b, D: d}\ntensors:\n  X: {shape: [B, B**40], role: input}\n"
                  "ops:\n  - Y[b] = X[b,d]\n",
    "constant.yaml": "dims: {B: b, D: d}\ntensors:\n  X: {shape: [B, D], role: input}\n"
                     "ops:\n  - Y[b,d] = X[b,d] + 1\n",
    "embedding.yaml": "dims: {B: b, V: v, D: d}\ntensors:\n  tok: {shape: [B], role: index}\n"
                      "  E: {shape: [V, D], role: param}\nops:\n  - X[b,d] = E[tok[b], d]\n",
    "triangle.yaml": "dims:\n  B: b\n  T: {equals: B*(B+1)/2}\ntensors:\n"
                     "  X: {shape: [T], role: input}\nops:\n  - Y[] = X[t]\n",
    "steep_axis.yaml": "dims: {B: b, D: d}\ntensors:\n  X: {shape: [D, B**40 + B], role: input}\n"
                       "ops:\n  - Y[d] = X[d,i]\n",
}


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("hostile")
    for name, text in DECLARATIONS.items():
        (d / name).write_text(text)
    np.savez(d / "u64.npz", tok=np.array([0, 2**64 - 1], dtype=np.uint64), E=np.ones((3, 2)))
    np.savez(d / "objects.npz", E=np.array([1, "a"], dtype=object))
    np.save(d / "lone.npy", np.ones(3))
    np.savez(d / "outer.npz", x=np.ones(20_000), y=np.ones(20_000))  # Z: 4e8 elements
    header = io.BytesIO()  # 10**10 float64 elements claimed in a 500-byte file
    np.lib.format.write_array_header_1_0(header, {"descr": "<f8", "fortran_order": False,
                                                  "shape": (100_000, 100_000)})
    tok = io.BytesIO()
    np.lib.format.write_array(tok, np.array([0]))
    with zipfile.ZipFile(d / "claims.npz", "w") as z:
        z.writestr("E.npy", header.getvalue() + b"\0" * 64)
        z.writestr("tok.npy", tok.getvalue())
    np.savez(d / "steep.npz", X=np.ones((3, 4)))  # no B: B**40 + B is 2 at B = 1, 2**40 + 2 at 2
    np.savez(d / "steep2.npz", X=np.ones((3, 2)))  # B**40 + B = 2 at B = 1
    with zipfile.ZipFile(d / "text.npz", "w") as z:
        z.writestr("E.txt", b"hello")
    return d


def main(argv, capsys) -> tuple[int, str, str]:
    status = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return status, out, err


# (arguments, with {d} for the fixture's directory; exit status; fragment of stderr)
REFUSED = [
    # item 6: dim values are positive integers, given once
    (["eval", FFN, "B=2", "D=1.5", "F=2"], "dimension D must be a positive integer, got '1.5'"),
    (["eval", FFN, "B=2", "D=1/3", "F=2"], "dimension D must be a positive integer, got '1/3'"),
    (["eval", FFN, "B=2", "D=0", "F=2"], "dimension D must be a positive integer, got '0'"),
    (["eval", FFN, "B=2", "D=-4", "F=2"], "dimension D must be a positive integer, got '-4'"),
    (["eval", FFN, "B=2", "D=4096", "D=8192", "F=2"], "dimension D is given twice"),
    (["eval", FFN, "B=2,B=3", "D=4", "F=2"], "dimension B is given twice"),
    (["check", FFN, "params > 0", "--at", "B=1.5,D=2,F=2"],
     "dimension B must be a positive integer, got '1.5'"),
    (["render", FFN, "--at", "B=2,D=2,F=2.5"], "dimension F must be a positive integer"),
    (["sweep", FFN, "B=2", "D=2", "F=2.5", "--csv", "-"], "dimension F must be a positive integer"),
    # a defined dim is a positive integer where values are given (R = N / G)
    (["eval", BLOCK, "B=1", "S=8", "N=32", "G=5", *LLAMA_BLOCK_DIMS],
     "at N=32, G=5 the defined dimension R = N/G is 32/5 = 6.4, not a positive whole number"),
    (["check", BLOCK, "params > 0", "--at", "B=1,S=8,N=32,G=5,D=64,E=8,F=32"],
     "the defined dimension R = N/G is 32/5"),
    (["render", BLOCK, "--at", "B=1,S=8,N=6,G=4,D=64,E=8,F=32"], "R = N/G is 3/2 = 1.5"),
    (["sweep", BLOCK, "B=1", "S=8", "N=32", "G=4,8,5", *LLAMA_BLOCK_DIMS, "--csv", "-"],
     "at N=32, G=5 the defined dimension R = N/G is 32/5"),
    (["plan", BLOCK, "N=6", "G=4", *LLAMA_BLOCK_DIMS, "--tokens", "1e6", "--seq", "16"],
     "the defined dimension R = N/G is 3/2"),
    # plan: dims of the declaration
    (["plan", BLOCK, "N=4", "G=2", "D=64", "E=8", "F=1.5", "--tokens", "1e6", "--seq", "16"],
     "dimension F must be a positive integer, got '1.5'"),
    (["plan", BLOCK, "N=4", "G=2", "D=64", "E=8", "F=32", "F=64", "--tokens", "1e6"],
     "dimension F is given twice"),
    (["plan", BLOCK, "B=8", "N=4", "G=2", *LLAMA_BLOCK_DIMS, "--tokens", "1e6", "--seq", "16"],
     "B=8 given with the declaration, but the plan sets B"),
    # item 15: plan numbers whose figures would overflow a float
    (["plan", "--params", "7e9", "--tokens", "2e12", "--sustained", "1e-300"],
     "--sustained 1e-300 is outside the range the planner takes, 1e-30 to 1e30"),
    (["plan", "--params", "10**999", "--tokens", "2e12", "--sustained", "4e14"],
     "--params 10**999 is outside the range"),
    (["plan", BLOCK, "N=4", "G=2", "D=10**300", "E=8", "F=32", "--tokens", "1e6", "--seq", "16"],
     "beyond the 1e-300 to 1e300 it can print"),
    # item 16: a percentage, and '%' elsewhere
    (["plan", "--params", "7e9", "--tokens", "2e12", "--accelerator", "h100", "--mfu", "40%%"],
     "--mfu '40%%': a percentage has one '%'"),
    (["plan", "--params", "7e9", "--tokens", "2e12%", "--accelerator", "h100", "--mfu", "40%"],
     "--tokens: '2e12%' is not a number"),
    # item 11: claims whose expansion would never finish
    (["check", FFN, "flops.total == (B+D)**100000"], "has an exponent above 64"),
    (["check", FFN, "flops.total <= B**(10**10)"], "has an exponent above 64"),
    (["check", FFN, "flops.total <= (B+D+F+1)**30"], "would expand to more than 1000 terms"),
    # item 15: results too long to print exactly
    (["eval", "{d}/fifth.yaml", "B=1", "D=10**999"], "a result at B=1, D≈1.000e+999 has more than 4,000 digits"),
    # verify
    (["verify", FFN, "--seed", "-1"], "--seed must be a whole number 0 or more, got -1"),
    (["verify", "{d}/steep.yaml"], "verify needs small sizes, but with every dim 2 X [B, B**40] "
                                   "holds 2,199,023,255,552 elements"),
    # grads: .npz files read header first
    (["grads", "{d}/embedding.yaml", "--inputs", "{d}/u64.npz", "--out", "{d}/o.npz"],
     "index array 'tok' holds 18446744073709551615, outside 0..2"),
    (["grads", "{d}/embedding.yaml", "--inputs", "{d}/claims.npz", "--out", "{d}/o.npz"],
     "holds 10,000,000,000 elements by the headers, more than the limit of 100,000,000"),
    (["grads", "{d}/embedding.yaml", "--inputs", "{d}/objects.npz", "--out", "{d}/o.npz"],
     "array 'E' holds objects (pickled), which are never loaded"),
    (["grads", "{d}/embedding.yaml", "--inputs", "{d}/lone.npy", "--out", "{d}/o.npz"],
     "is a single .npy array, not an .npz archive"),
    (["grads", "{d}/embedding.yaml", "--inputs", "{d}/text.npz", "--out", "{d}/o.npz"],
     "holds 'E.txt', which is not a .npy array"),
    (["grads", "{d}/outer.yaml", "--inputs", "{d}/outer.npz", "--out", "{d}/o.npz"],
     "Z [B, D] would hold 400,000,000 elements at B=20000, D=20000"),
]


@pytest.mark.parametrize(("argv", "fragment"), REFUSED, ids=[f[1][:40] for f in REFUSED])
def test_refused_with_one_clear_line(argv, fragment, files, capsys):
    status, out, err = main([str(a).format(d=files) for a in argv], capsys)
    assert status == 2, err
    assert "Traceback" not in err and "internal error" not in err
    assert err.startswith("symflops: ") and fragment in err.splitlines()[0], err
    assert "fix: " in err.splitlines()[0]
    assert not (files / "o.npz").exists()


def test_dim_values_written_as_exponents_stay_accepted(capsys):
    status, out, err = main(["eval", FFN, "B=4e3", "D=2**3", "F=1_000", "--json"], capsys)
    assert status == 0, err
    assert json.loads(out)["flops"]["total"] == 12 * 4000 * 8 * 1000  # 12 B D F, by hand


def test_defined_dim_that_divides_is_evaluated(capsys):
    # R = N / G = 2: the attention of 4 query heads over 2 key/value heads.
    args = ["eval", BLOCK, "B=1", "S=8", "N=4", "G=2", *LLAMA_BLOCK_DIMS, "--json"]
    status, out, err = main(args, capsys)
    assert status == 0, err
    assert json.loads(out)["params"] > 0


def test_integer_valued_rational_polynomial_is_a_size(files, capsys):
    # T = B (B + 1) / 2 is whole at every B: the triangle numbers 1, 3, 6, 10.
    status, out, err = main(["eval", files / "triangle.yaml", "B=4", "--json"], capsys)
    assert status == 0, err
    assert json.loads(out)["memory"]["activations"] == 0
    assert json.loads(out)["params"] == 0
    status, out, err = main(["derive", files / "triangle.yaml", "--json"], capsys)
    assert "B**2/2 + B/2" in out or "B*(B + 1)/2" in out


def test_huge_exact_results_print_in_tables(capsys):
    """An exact result of 2,998 digits prints (Python refuses str() of an
    int above 4,300 digits; the limit here is 4,000); a sheet's numbers table
    writes it as a power of ten where float() would overflow."""
    at = "B=10**999,D=10**999,F=10**999"
    status, out, err = main(["render", FFN, "--at", at], capsys)
    assert status == 0, err
    # 12 B D F = 1.2e2998 training FLOPs, 4 B D F forward (by hand)
    assert r"$1.2 \times 10^{2998}$" in out and r"$4 \times 10^{2997}$" in out
    status, out, err = main(["eval", FFN, *at.split(","), "--json"], capsys)
    assert status == 0, err
    assert json.loads(out)["flops"]["total"] == 12 * 10**2997
    # the forward intensity at B = D = F = N: 4 N^3 FLOPs over two products
    # that each read two N x N operands and write one, 2 bytes an element:
    # 12 N^2 bytes, so N / 3, beyond a float's range: the nearest whole number
    assert json.loads(out)["quantities"]["intensity.forward"] == 10**999 // 3
    status, out, err = main(["check", FFN, "flops.total == 6*params*B", "--at", at], capsys)
    assert status == 0, err


def test_plan_mfu_percent_is_a_fraction(capsys):
    status, out, err = main(["plan", "--params", "7e9", "--tokens", "2e12", "--accelerator",
                             "h100", "--mfu", "40%", "--json"], capsys)
    assert status == 0, err
    data = json.loads(out)
    assert Fraction(data["rate"]["mfu"]).limit_denominator(1000) == Fraction(2, 5)


def test_constant_term_is_verified_with_torch(files, capsys):
    """``Y = X + 1``: a term with no tensor operand.  Its forward is X + 1
    (by hand) in PyTorch and NumPy, and its derived rule dX = dY passes
    finite differences and autograd."""
    torch = pytest.importorskip("torch")
    from symflops.checks.numeric import forward
    from symflops.declaration.reader import load
    from symflops.ops.einsum.torch import torch_op

    layer = load(files / "constant.yaml")
    X = np.arange(6.0).reshape(2, 3)
    (op,) = layer.ops
    got = torch_op(torch, op, {"X": torch.tensor(X)}, {"B": 2, "D": 3})
    assert np.array_equal(got.numpy(), X + 1)
    assert np.array_equal(forward(layer, {"X": X}, {"B": 2, "D": 3})["Y"], X + 1)
    status, out, err = main(["verify", files / "constant.yaml", "--json"], capsys)
    assert status == 0, err
    report = json.loads(out)
    assert report["passed"] and report["torch_version"]
    assert [r["statements"] for r in report["rules"]] == [["dX[b,d] = dY[b,d]"]]


def test_grads_reads_a_dim_off_a_steep_axis_at_once(files):
    """An axis ``B**40 + B`` of 2 elements gives B = 1 (1 + 1, by hand); one of
    4 elements fits no B (1 + 1 = 2, 2**40 + 2 > 4).  Found by a search over
    the increasing size, not sympy.solve of a degree-40 equation (minutes)."""
    def grads(inputs):
        return forked.run("grads", str(files / "steep_axis.yaml"), "--inputs", str(files / inputs), "--out", str(files / "steep_out.npz"), timeout=900)
    ok = grads("steep2.npz")
    assert ok.returncode == 0, ok.stderr
    assert np.load(files / "steep_out.npz")["dX"].shape == (3, 2)
    bad = grads("steep.npz")
    assert bad.returncode == 2 and "cannot infer dim(s) B" in bad.stderr, bad.stderr


def test_limits_fail_fast_from_the_shell(tmp_path):
    """Within a generous 20 s (the limits cut in at once; without them each
    of these runs for minutes or exhausts memory)."""
    laughs = ROOT / "tests" / "bad" / "billion_laughs.yaml"
    for argv in (["derive", laughs], ["check", FFN, "flops.total == (B+D)**100000"],
                 ["derive", ROOT / "tests" / "bad" / "axis_power_of_sum.yaml"]):
        result = forked.run(*map(str, argv), timeout=900)
        assert result.returncode == 2, result.stderr
        assert "Traceback" not in result.stderr


# ------------------------------------------------------ sizes, brute force --

_X, _Y = sympy.symbols("X Y", positive=True, integer=True)
POLYNOMIALS = [_X, _X - 1, _X + _Y - 1, _X - _Y, _X**2 - _X + 1, _X**2 - 3 * _X + 3,
               _X * (_X + 1) / 2, _X / 2, (_X + 1) / 2, _X * _Y * (_X + _Y) / 2,
               _X**3 / 6 + _X**2 / 2 + _X / 3, _X**3 / 6 + _X / 3, 2 * _X - 3 * _Y + 2,
               sympy.Integer(3), sympy.Rational(3, 2), _X**2 * _Y - _X * _Y + 1]


@pytest.mark.parametrize("p", POLYNOMIALS, ids=str)
def test_a_proved_size_is_a_positive_integer_at_every_point(p):
    """Every polynomial accepted as a size is a positive integer at each point
    of a brute-force grid; one refused as not whole is not whole at some point
    of it, and one refused as not positive is at most 0 at some point (or
    positive everywhere but not provably: X**2 - 3X + 3 only)."""
    values = [p.subs({_X: x, _Y: y}) for x, y in itertools.product(range(1, 13), repeat=2)]
    problem = size_problem(p)
    if problem is None:
        assert all(v.is_Integer and v > 0 for v in values)
    elif "whole" in problem:
        assert not all(v.is_Integer for v in values)
    elif "positive" in problem:
        assert all(v.is_Integer for v in values)
        assert not all(v > 0 for v in values) or p == _X**2 - 3 * _X + 3


def test_promised_quotients_are_single_positive_terms():
    N, G, B = sympy.symbols("N G B", positive=True, integer=True)
    assert promised_quotient(N / G) and promised_quotient(2 * B * N / (3 * G))
    assert not promised_quotient((N + 1) / G)
    assert not promised_quotient(-N / G)
    assert not promised_quotient(sympy.Rational(1, 2))  # no dims: never whole


def test_grads_inputs_that_are_not_regular_files_are_never_opened(tmp_path):
    """A FIFO would block zipfile and numpy forever; a device would never end."""
    import os

    fifo = tmp_path / "in.npz"
    os.mkfifo(fifo)
    for inputs, fragment in ((fifo, "is a FIFO (named pipe), not a regular file"),
                             ("/dev/zero", "is a character device, not a regular file")):
        result = forked.run("grads", "derivations/ffn.yaml", "--inputs", str(inputs), "--out", str(tmp_path / "g.npz"), timeout=900)
        assert result.returncode == 2 and fragment in result.stderr, result.stderr
        assert "Traceback" not in result.stderr
