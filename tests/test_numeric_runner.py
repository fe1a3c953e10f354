"""The NumPy runner ``verify`` and ``grads`` evaluate layers with, and the
sizes ``verify`` draws.

* A shift's bracket ``[q = 2p + k - 1]`` is read into the operand that
  carries ``q`` (a gather, zeros outside the axis) instead of a dense 0/1
  tensor: the same sums, checked here against loops written out by hand.
* A dim defined by a formula (``T: {equals: M + S}``) takes its formula's
  value at the sizes verify draws: before, it was drawn like a free dim, and
  verify stopped with an internal error (exit 70) on a shape mismatch.
"""

from pathlib import Path

import numpy as np
import sympy

from symflops.core.ir import Affine, Einsum, Factor, SHIFT
from symflops.ops.einsum.numeric import run_einsum
import forked

ROOT = Path(__file__).resolve().parent.parent


def test_a_padded_strided_read_is_the_loop():
    """Y[b,o,p] = X[b,c,2*p+k-1] W[o,c,k] over X's P positions (index -1 and
    past the end read 0)."""
    rng = np.random.default_rng(0)
    b, c, o, n, p, k = 2, 3, 4, 7, 4, 3
    x, w = rng.standard_normal((b, c, n)), rng.standard_normal((o, c, k))
    bracket = Factor("", ("q", "p", "k"), fn=Affine((sympy.Integer(2), sympy.Integer(1)),
                                                     sympy.Integer(-1)))
    e = Einsum(Factor("Y", ("b", "o", "p")),
               (Factor("X", ("b", "c", "q")), Factor("W", ("o", "c", "k")), bracket))
    extents = {"b": b, "c": c, "o": o, "p": p, "k": k, "q": n}
    got = run_einsum(e, {"X": x, "W": w}, extents)
    want = np.zeros((b, o, p))
    for bi in range(b):
        for oi in range(o):
            for pi in range(p):
                for ci in range(c):
                    for ki in range(k):
                        q = 2 * pi + ki - 1
                        if 0 <= q < n:
                            want[bi, oi, pi] += x[bi, ci, q] * w[oi, ci, ki]
    assert np.allclose(got, want)


def test_two_brackets_on_one_operand_and_a_scattered_one_are_the_loop():
    """Z[b,i,j] = A[b,i+u,j+v] K[u,v] (both brackets read into A), and the
    input gradient dA[b,q,r] = dZ[b,i,j] K[u,v] where q = i+u, r = j+v,
    whose brackets write the output (kept as 0/1 tensors)."""
    rng = np.random.default_rng(1)
    b, i, j, u, v = 2, 3, 4, 2, 3
    a, kern = rng.standard_normal((b, i + u - 1, j + v - 1)), rng.standard_normal((u, v))
    extents = {"b": b, "i": i, "j": j, "u": u, "v": v, "q": i + u - 1, "r": j + v - 1}
    shifts = (Factor("", ("q", "i", "u"), fn=SHIFT), Factor("", ("r", "j", "v"), fn=SHIFT))
    forward = Einsum(Factor("Z", ("b", "i", "j")), (Factor("A", ("b", "q", "r")),
                                                    Factor("K", ("u", "v")), *shifts))
    want = np.zeros((b, i, j))
    for ii in range(i):
        for jj in range(j):
            want[:, ii, jj] = np.einsum("buv,uv->b", a[:, ii:ii + u, jj:jj + v], kern)
    assert np.allclose(run_einsum(forward, {"A": a, "K": kern}, extents), want)
    dz = rng.standard_normal((b, i, j))
    grad = Einsum(Factor("dA", ("b", "q", "r")), (Factor("dZ", ("b", "i", "j")),
                                                  Factor("K", ("u", "v")), *shifts))
    da = np.zeros_like(a)
    for ii in range(i):
        for jj in range(j):
            da[:, ii:ii + u, jj:jj + v] += dz[:, ii, jj, None, None] * kern
    assert np.allclose(run_einsum(grad, {"dZ": dz, "K": kern}, extents), da)


def test_verify_draws_a_defined_dim_from_its_formula(tmp_path):
    path = tmp_path / "defined.yaml"
    path.write_text("""\
name: defined
dims: {B: batch, M: memory, S: new, E: width, T: {description: positions, equals: M + S}}
tensors:
  K_mem: {shape: [B, M, E], role: input}
  K_new: {shape: [B, S, E], role: input}
  Qt: {shape: [B, T, E], role: input}
ops:
  - K[b,t,e] = concat_t(K_mem[b,m,e], K_new[b,s,e])
  - A[b,t] = Qt[b,t,e] K[b,t,e]
""")
    run = forked.run("verify", str(path), "--no-torch", cwd=ROOT)
    assert run.returncode == 0, run.stdout + run.stderr
    sizes = dict(item.split("=") for item in
                 next(line for line in run.stdout.splitlines()
                      if line.startswith("small sizes:")).split(":", 1)[1].replace(",", "").split())
    assert int(sizes["T"]) == int(sizes["M"]) + int(sizes["S"])


def test_sizes_with_ratios_that_must_divide():
    """moe_block defines R = N / G and C = c k B S / M: sizes where both divide
    and every tensor stays small are found (values may repeat after the first
    draws), and the defined dims take their formulas' values."""
    import symflops
    from symflops.checks.sizes import MEDIUM, MEDIUM_LIMITS, choose_sizes, small_sizes

    layer = symflops.load(ROOT / "derivations" / "moe_block.yaml")
    for seed in range(3):
        rng = np.random.default_rng(seed)
        for v in (small_sizes(layer, rng), choose_sizes(layer, rng, *MEDIUM, MEDIUM_LIMITS)):
            assert v["R"] * v["G"] == v["N"]
            assert v["C"] * v["M"] == v["c"] * v["k"] * v["B"] * v["S"]
