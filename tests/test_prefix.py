"""Prefix sums: a sum over a where-domain that an output letter bounds,
``Cs[b,s,h] = La[b,u,h] where u <= s``, and the gate-less recurrence
``H[b,s,d] = H[b,s-1,d] + X[b,s,d]`` that is the same sum.

Expected counts are derived by hand in each test (the running sums and the
differences between them, README *Conventions*), or by running the algorithm
on a brute-force enumeration written here; values come from ``np.cumsum`` and
``torch.cumsum`` and from finite differences.
"""

from pathlib import Path

import numpy as np
import pytest
import sympy

import symflops
from symflops import cli
from symflops.checks.numeric import backward, forward
from symflops.checks.verify import verify
from symflops.count.cost import costs
from symflops.count.inference import cached_windows

ROOT = Path(__file__).resolve().parent.parent
B, S, H, D, W, C = sympy.symbols("B S H D W C", positive=True, integer=True)


def layer(*ops, extra=None):
    tensors = {"La": {"shape": ["B", "S", "H"], "role": "input"},
               "A": {"shape": ["B", "H", "C"], "role": "input"}}
    tensors.update(extra or {})
    return symflops.declare("prefix", dims={"B": "batch", "S": "steps", "H": "heads",
                                            "W": "window", "C": "chunk"},
                            tensors=tensors, ops=list(ops))


def counted(*ops):
    d = symflops.derive(layer(*ops))
    c = costs(d)
    return d, c


def test_cumsum_is_a_prefix_sum_counted_by_hand():
    # Before: "output index 's' of Cs is on no operand".
    d, c = counted("Cs[b,s,h] = La[b,u,h] where u <= s")
    # A running sum along u: per row (b, h), S - 1 adds (the first element is
    # a copy), 1 FLOP each and elementwise: B*H*(S - 1).  One add per term of
    # the domain would be B*H*S(S + 1)/2.
    assert c.forward[0].flops == 0
    assert sympy.expand(c.forward[0].elementwise - B * H * (S - 1)) == 0
    # Its gradient is a suffix sum, derived by the einsum machinery, not typed in:
    (rule,) = d.rules
    assert rule.statement == "dLa[b,u,h] = dCs[b,s,h] where u <= s"
    # a running sum from the end of the axis: S - 1 adds per row again
    assert c.backward[0].flops == 0
    assert sympy.expand(c.backward[0].elementwise - B * H * (S - 1)) == 0
    # MACs count an add as 1 too
    m = costs(d, unit="MACs")
    assert sympy.expand(m.elementwise_forward - B * H * (S - 1)) == 0
    # nothing is saved (the rule reads only dCs) and no key/value cache is made of La
    assert d.saved == ()
    # (decoding keeps the running sum, not the earlier positions of La, as
    # attention keeps its keys)
    assert cached_windows(d) == {}


@pytest.mark.parametrize("where,forward_adds,backward_adds", [
    # exclusive prefix sum: the running sum of the whole axis (S - 1 adds), each
    # output reads it one place back (a copy)
    ("u < s", B * H * (S - 1), B * H * (S - 1)),
    # suffix sum: a running sum from the end, S - 1 adds; its gradient a prefix sum
    ("u >= s", B * H * (S - 1), B * H * (S - 1)),
    # window of W: S - 1 adds, and a subtraction for each s >= W (its window has
    # left position 0 behind), S - min(S, W) of them; the gradient
    # dLa[u] = sum_{u <= s <= u + W - 1} dWi[s] runs from the end: S - 1 adds,
    # and a subtraction for each u with u + W - 1 < S - 1, again S - min(S, W)
    ("u <= s, s - u < W", B * H * (2 * S - 1 - sympy.Min(S, W)),
     B * H * (2 * S - 1 - sympy.Min(S, W))),
])
def test_other_domains_counted_by_hand(where, forward_adds, backward_adds):
    d, c = counted(f"Y[b,s,h] = La[b,u,h] where {where}")
    assert sympy.expand(c.elementwise_forward - forward_adds) == 0
    assert sympy.expand(c.elementwise_backward - backward_adds) == 0
    assert c.flops_forward == c.flops_backward == 0


def test_segment_sum_counted_by_hand():
    # Mamba-2's segsum inside a chunk of C: Seg[l,m] = sum_{m < u <= l} A[u].
    d, c = counted("Seg[b,h,l,m] = A[b,h,u] where m < u, u <= l")
    # Per (b, h): a running sum along u, C - 1 adds; an element (l, m) with
    # m < l (the others are empty, 0) is Suf[m+1] - Suf[l+1] scanned from the
    # end, one subtraction unless l = C - 1: C(C-1)/2 - (C - 1) = (C-1)(C-2)/2.
    # (From the start it would be C(C-1)/2, every lower limit m + 1 being >= 1.)
    per = (C - 1) + (C - 1) * (C - 2) / 2
    assert sympy.expand(c.elementwise_forward - B * H * per) == 0
    (rule,) = d.rules
    assert rule.statement == "dA[b,h,u] = dSeg[b,h,l,m] where m < u, u <= l"
    # dA[u] = sum_{l >= u} sum_{m < u} dSeg[l,m]: a running sum of dSeg along l
    # (from the end) and along m (from the start), C(C - 1) adds each per
    # (b, h); then dA[u] is one entry of it, no difference: 2C(C - 1).
    assert sympy.expand(c.elementwise_backward - B * H * 2 * C * (C - 1)) == 0


def _simulated(sizes, limits):
    """The prefix-sum algorithm run by hand at small sizes: for each output
    element, its range (tested condition by condition), and the adds of the
    scan (ext - 1 per row) plus a subtraction where the range leaves out the
    start (scan from the start) -- or the end (from the end), whichever is fewer."""
    n_out, n_x, rows = sizes
    best = None
    for side in ("start", "end"):
        diffs = 0
        for o in range(n_out):
            inside = [x for x in range(n_x) if all(test(x, o) for test in limits)]
            if inside and (inside[0] > 0 if side == "start" else inside[-1] < n_x - 1):
                diffs += 1
        best = diffs if best is None else min(best, diffs)
    return rows * ((n_x - 1) + best)


@pytest.mark.parametrize("w", [1, 2, 3, 7])
@pytest.mark.parametrize("s", [1, 2, 5, 6])
def test_window_count_against_the_algorithm_run_by_hand(s, w):
    _, c = counted("Y[b,s,h] = La[b,u,h] where u <= s, s - u < W")
    at = {B: 2, H: 3, S: s, W: w}
    limits = [lambda x, o: x <= o, lambda x, o: o - x < w]
    assert c.elementwise_forward.subs(at) == _simulated((s, s, 2 * 3), limits)


def test_the_enumeration_check_catches_a_wrong_count():
    from dataclasses import replace

    from symflops.ops.prefix_count import _check, box, prefix_count
    (op,) = layer("Wi[b,s,h] = La[b,u,h] where u <= s, s - u < W").ops
    found = prefix_count(op.term, op.dims())
    for wrong in (replace(found, combines=found.combines + 1),
                  replace(found, combines=B * H * (S - 1)),      # the other orientation's
                  replace(found, scans=found.scans + B)):
        with pytest.raises(AssertionError, match="enumeration"):
            _check(wrong, box(op.term), op.dims())


def test_numpy_forward_is_cumsum_and_rules_match_finite_differences():
    lay = layer("Cs[b,s,h] = La[b,u,h] where u <= s",
                "Su[b,s,h] = La[b,u,h] where u >= s",
                "Y[b,s,h] = Cs[b,s,h] + Su[b,s,h]")
    rng = np.random.default_rng(3)
    la = rng.standard_normal((2, 5, 3))
    values = forward(lay, {"La": la, "A": rng.standard_normal((2, 3, 4))},
                     {"B": 2, "S": 5, "H": 3, "W": 2, "C": 4})
    np.testing.assert_allclose(values["Cs"], np.cumsum(la, axis=1))
    np.testing.assert_allclose(values["Su"], np.flip(np.cumsum(np.flip(la, 1), axis=1), 1))
    # dLa of Y = cumsum + suffix sum at dY = G: the suffix sum of G plus its prefix sum
    g = rng.standard_normal((2, 5, 3))
    grads = backward(symflops.derive(lay), values, {"dY": g},
                     {"B": 2, "S": 5, "H": 3, "W": 2, "C": 4})
    expected = np.flip(np.cumsum(np.flip(g, 1), axis=1), 1) + np.cumsum(g, axis=1)
    np.testing.assert_allclose(grads["dLa"], expected)
    assert verify(symflops.derive(lay), seed=2, use_torch=False).passed


def test_torch_forward_is_cumsum():
    torch = pytest.importorskip("torch")
    lay = layer("Cs[b,s,h] = La[b,u,h] where u <= s")
    (op,) = lay.ops
    la = torch.randn(2, 6, 3, dtype=torch.float64)
    out = op.torch(torch, {"La": la}, {"B": 2, "S": 6, "H": 3, "W": 1, "C": 1})["Cs"]
    assert torch.allclose(out, torch.cumsum(la, dim=1))
    # a window of 3 as the difference of two cumulative sums, written here
    w = layer("Wi[b,s,h] = La[b,u,h] where u <= s, s - u < W").ops[0]
    got = w.torch(torch, {"La": la}, {"B": 2, "S": 6, "H": 3, "W": 3, "C": 1})["Wi"]
    cs = torch.cumsum(la, dim=1)
    want = cs - torch.nn.functional.pad(cs, (0, 0, 3, 0))[:, :6]
    assert torch.allclose(got, want)


def test_verify_passes_on_every_form(capsys):
    lay = layer("Ex[b,s,h] = La[b,u,h] where u < s",
                "Wi[b,s,h] = La[b,u,h] where u <= s, s - u < W",
                "Seg[b,h,l,m] = A[b,h,u] where m < u, u <= l",
                "Y[b,s,h] = Ex[b,s,h] + Wi[b,s,h]")
    report = verify(symflops.derive(lay), seed=1)
    assert report.passed, [c for c in report.rules if not c.passed]


def test_masked_exp_saves_its_output():
    # exp of a segment sum, zero above the diagonal: inside the domain L = exp(Seg),
    # so its rule reads the saved output, as exp's does without a where-clause.
    # Before: dSeg = dL exp'(Seg), which saved Seg as well as L.
    lay = layer("L[b,h,l,m] = exp(Seg[b,h,l,m]) where m <= l",
                "Y[b,h,l] = L[b,h,l,m] A[b,h,m]",
                extra={"Seg": {"shape": ["B", "H", "C", "C"], "role": "input"}})
    d = symflops.derive(lay)
    assert "dSeg[b,h,l,m] = dL[b,h,l,m] exp'@out(L[b,h,l,m]) where m <= l" in \
        [r.statement for r in d.rules]
    assert "Seg" not in d.saved and "L" in d.saved
    assert verify(d, seed=3).passed


# ------------------------------------------------------- the recurrence --

def recurrence(op):
    return symflops.declare("rec", dims={"B": "batch", "S": "steps", "D": "width"}, tensors={
        "X": {"shape": ["B", "S", "D"], "role": "input"}}, ops=[op])


def test_a_recurrence_without_a_gate_is_the_prefix_sum():
    # Before: "the previous state must be multiplied by one tensor, the gate".
    rec = symflops.derive(recurrence("H[b,s,d] = H[b,s-1,d] + X[b,s,d]"))
    where = symflops.derive(recurrence("H[b,s,d] = X[b,u,d] where u <= s"))
    assert [r.statement for r in rec.rules] == [r.statement for r in where.rules] \
        == ["dX[b,u,d] = dH[b,s,d] where u <= s"]
    a, b = costs(rec), costs(where)
    assert (a.forward, a.backward) == (b.forward, b.backward)
    # S - 1 adds per (b, d), as the gated recurrence counts S - 1 steps (at 2
    # FLOPs per multiply-add; here an add alone)
    assert sympy.expand(a.elementwise_forward - B * D * (S - 1)) == 0
    assert sympy.expand(a.elementwise_backward - B * D * (S - 1)) == 0
    ra, rb = verify(rec, seed=4), verify(where, seed=4)
    assert ra.passed and rb.passed
    assert [(c.statements, c.fd_error, c.torch_error) for c in ra.rules] == \
        [(c.statements, c.fd_error, c.torch_error) for c in rb.rules]


def test_gateless_recurrence_grads_command(tmp_path, capsys):
    path = tmp_path / "rec.yaml"
    path.write_text("dims: {B: batch, S: steps, D: width}\n"
                    "tensors:\n  X: {shape: [B, S, D], role: input}\n"
                    "ops:\n  - H[b,s,d] = H[b,s-1,d] + X[b,s,d]\n")
    rng = np.random.default_rng(0)
    x, g = rng.standard_normal((2, 7, 3)), rng.standard_normal((2, 7, 3))
    np.savez(tmp_path / "in.npz", X=x, dH=g)
    assert cli.main(["grads", str(path), "--inputs", str(tmp_path / "in.npz"),
                     "--out", str(tmp_path / "out.npz")]) == 0
    out = np.load(tmp_path / "out.npz")
    # the gradient of a running sum: the running sum of dH from the end
    np.testing.assert_allclose(out["dX"], np.flip(np.cumsum(np.flip(g, 1), axis=1), 1))


# ------------------------------------------------------------- refusals --

def bad_file(tmp_path, op):
    path = tmp_path / "bad.yaml"
    path.write_text("dims: {B: batch, S: steps, H: heads, W: window}\n"
                    "tensors:\n"
                    "  X: {shape: [B, S, H], role: input}\n"
                    "  Z: {shape: [B, S, H], role: input}\n"
                    f"ops:\n  - {op}\n")
    return path


BAD = [
    ("Y[b,s,h] = 2 X[b,u,h] where u <= s", "a prefix sum (the output letter 's' on no operand, "
     "bounded by the where-clause) sums one tensor", 11),
    ("Y[b,s,h] = X[b,u,h] Z[b,u,h] where u <= s", "sums one tensor", 11),
    ("Y[b,s,h] = exp(X[b,u,h]) where u <= s", "sums one tensor", 11),
    ("Y[b,s] = X[b,u,h] where u <= s", "also sums over 'h', which no output letter bounds", 15),
    # silently counted as B*H*S adds before (the where-clause left out of the term's count)
    ("Y[b,s,h] = X[b,u,h] + Z[b,s,h] where u <= s", "a term of this sum is a prefix sum", 11),
    ("Y[b,s,h] = X[b,u,h] where u <= s, h <= s", "compared with letters of different extents",
     4),
    ("Y[b,s,h,t] = X[b,u,h] where u <= s, s <= t", "output index 't' of Y is on no operand", 8),
    ("Y[b,s,h] = X[b,u,h] where u <= s, s - u < W - W", "leave no pair (u, s) for any dims",
     26),
    ("Y[b,s,h,t] = X[b,u,h] where u <= s, u <= t, t <= s", "compares two output letters", 44),
    ("Y[b,s,h] = X[b,u+1,h] where u <= s", "ranges over S - 1", 15),
]


@pytest.mark.parametrize("op,message,column", BAD, ids=[m for _, m, _ in BAD])
def test_refused_by_name_at_the_column(tmp_path, capsys, op, message, column):
    path = bad_file(tmp_path, op)
    assert cli.main(["derive", str(path)]) == 2
    first = capsys.readouterr().err.splitlines()[0]
    # the statement starts at column 5 of line 6 ("  - "); ``column`` is 0-based in it
    assert f"{path}:6:{5 + column}: error: " in first, first
    assert message in first and "fix: " in first, first


def test_a_two_summed_letter_box_compared_is_refused(tmp_path, capsys):
    path = tmp_path / "bad.yaml"
    path.write_text("dims: {S: steps}\ntensors:\n  X: {shape: [S, S], role: input}\n"
                    "ops:\n  - Y[s] = X[u,v] where v <= u, u <= s\n")
    assert cli.main(["derive", str(path)]) == 2
    first = capsys.readouterr().err.splitlines()[0]
    assert "compares two summed letters, 'v' and 'u'" in first and "fix: " in first


# ---------------------------------------------------------------- sheet --

def test_the_sheet_states_the_count(tmp_path, capsys):
    path = tmp_path / "cs.yaml"
    path.write_text("dims: {B: batch, S: steps}\ntokens: B*S\n"
                    "tensors:\n  X: {shape: [B, S], role: input}\n"
                    "ops:\n  - Y[b,s] = X[b,u] where u <= s\n")
    for fmt in ("md", "tex"):
        assert cli.main(["render", str(path), "--format", fmt, "-o", str(tmp_path / f"s.{fmt}")]) == 0
        text = (tmp_path / f"s.{fmt}").read_text()
        assert "A prefix sum: a running sum of" in text
        # a layer with tokens and no parameter: no empty list of dense names
        # (it printed an empty display "$$", which pdflatex refuses)
        assert "sum over an index: $$" not in text
        assert "sum over an index): $" in text


# -------------------------------------------------------- verify --at --

def test_verify_at_given_sizes(tmp_path, capsys):
    path = tmp_path / "cs.yaml"
    path.write_text("dims: {B: batch, S: steps}\ntensors:\n  X: {shape: [B, S], role: input}\n"
                    "ops:\n  - Y[b,s] = X[b,u] where u <= s\n")
    assert cli.main(["verify", str(path), "--at", "B=2,S=3", "--no-torch"]) == 0
    assert "small sizes:  B=2, S=3" in capsys.readouterr().out
    assert cli.main(["verify", str(path), "--at", "B=2", "--no-torch"]) == 2
    assert "S" in capsys.readouterr().err
    assert cli.main(["verify", str(path), "--at", "B=1000,S=1000", "--no-torch"]) == 2
    assert "verify needs small sizes" in capsys.readouterr().err


# -- a prefix sum among the later stages: bytes moved (roofline) and sharding ---------

CUMSUM = """name: cs
dims: {B: batch, S: seq, H: heads}
roles: {batch: B, heads: H}
tensors:
  La: {shape: [B, S, H], role: input}
ops:
  - Cs[b,s,h] = La[b,u,h] where u <= s
"""


def test_a_prefix_sum_moves_its_input_and_output_once(tmp_path, capsys):
    """bf16: La read once (B S H elements, 2 bytes) and Cs written once (2 bytes):
    4 B H S bytes; B H (S - 1) adds.  Before, every summary of a layer with a
    prefix sum exited 70 ('PrefixSum' object has no attribute 'moved')."""
    path = tmp_path / "cs.yaml"
    path.write_text(CUMSUM)
    assert cli.main(["roofline", str(path), "--accelerator", "h100"]) == 0
    rows = [line.split() for line in capsys.readouterr().out.splitlines()
            if line.strip().startswith("Cs ")]
    assert rows and rows[0][2:4] == ["B*H*(S", "-"] and "4*B*H*S" in rows[0], rows


def test_a_prefix_sum_splits_along_other_letters_and_refuses_its_own(tmp_path, capsys):
    path = tmp_path / "cs.yaml"
    path.write_text(CUMSUM)
    assert cli.main(["shard", str(path), "--dp", "2"]) == 0
    out = capsys.readouterr().out
    # forward B H (S - 1) adds and the suffix-sum rule's as many, over 2 devices
    assert "FLOPs elementwise     B*H*S - B*H" in out, out
    assert cli.main(["shard", str(path), "--mesh", "X=2", "--place", "S=X"]) == 2
    err = capsys.readouterr().err
    assert "the letter s is split over X" in err and "sums along it" in err, err
