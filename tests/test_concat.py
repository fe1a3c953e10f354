"""Concatenation ``K[b,t,e] = concat_t(K_mem[b,m,e], K_new[b,s,e])`` (issue 17, item 9)
and the multi-head latent attention that uses it (DeepSeek-V2's MLA).

Expected values come from outside the code under test: NumPy's
``np.concatenate`` and PyTorch's ``torch.cat`` with its autograd for the
forward pass and the gradients, counts made by hand from DeepSeek-V2's shapes
for MLA (written out below, term by term), and positions counted in the
declarations written here.
"""

from pathlib import Path

import numpy as np
import pytest
import sympy

import symflops
from symflops.checks.numeric import backward, forward
from symflops.core.errors import SymflopsError
from symflops.core.ir import substitute
from symflops.count.cost import costs
import forked

ROOT = Path(__file__).resolve().parent.parent
S, D, N, Q, L, C, R, F = sympy.symbols("S D N Q L C R F", positive=True, integer=True)
DEEPSEEK_V2 = {"S": 4096, "D": 5120, "N": 128, "Q": 1536, "L": 512, "C": 128, "R": 32, "F": 128}

# Three parts along the middle axis: one with its axes in another order, one
# broadcast along e (it has no e), so every case of the op is run.
JOINED = """\
name: joined
dims: {B: batch, M: memory, S: new, U: extra, E: width}
tensors:
  A: {shape: [B, M, E], role: input}
  Bt: {shape: [E, S, B], role: input}
  G: {shape: [B, U], role: input}
ops:
  - K[b,t,e] = concat_t(A[b,m,e], Bt[e,s,b], G[b,u])
examples:
  toy: {B: 2, M: 3, S: 4, U: 2, E: 5}
"""
SIZES = {"B": 2, "M": 3, "S": 4, "U": 2, "E": 5}


def load_text(tmp_path, text, name="decl.yaml"):
    path = tmp_path / name
    path.write_text(text)
    return symflops.load(path)


def refusal(tmp_path, text):
    with pytest.raises(SymflopsError) as info:
        symflops.derive(load_text(tmp_path, text))
    return info.value


def arrays(rng):
    b, m, s, u, e = (SIZES[k] for k in "BMSUE")
    return {"A": rng.standard_normal((b, m, e)), "Bt": rng.standard_normal((e, s, b)),
            "G": rng.standard_normal((b, u))}


def test_forward_is_numpy_concatenate(tmp_path):
    layer = load_text(tmp_path, JOINED)
    x = arrays(np.random.default_rng(0))
    got = forward(layer, x, SIZES)["K"]
    e = SIZES["E"]
    want = np.concatenate([x["A"], np.transpose(x["Bt"], (2, 1, 0)),
                           np.broadcast_to(x["G"][:, :, None], (2, 2, e))], axis=1)
    assert got.shape == (2, 3 + 4 + 2, e)
    assert np.array_equal(got, want)


def test_backward_is_slices_and_matches_torch_autograd(tmp_path):
    torch = pytest.importorskip("torch")
    d = symflops.derive(load_text(tmp_path, JOINED))
    # Each part's gradient is its slice of dK: derived, printed as slices.
    assert [r.statement for r in d.rules] == [
        "dA[b,m,e] = dK[b,m,e]", "dBt[e,s,b] = dK[b,M+s,e]", "dG[b,u] = dK[b,M+S+u,e]"]
    rng = np.random.default_rng(1)
    x = arrays(rng)
    dk = rng.standard_normal((2, 9, 5))
    grads = backward(d, forward(d.layer, x, SIZES), {"dK": dk}, SIZES)
    t = {k: torch.tensor(v, requires_grad=True) for k, v in x.items()}
    k = torch.cat([t["A"], t["Bt"].permute(2, 1, 0), t["G"][:, :, None].expand(2, 2, 5)], dim=1)
    k.backward(torch.tensor(dk))
    for name in ("A", "Bt", "G"):
        assert np.allclose(grads["d" + name], t[name].grad.numpy(), rtol=0, atol=1e-12), name


def test_costs_nothing_but_the_broadcast_gradient(tmp_path):
    d = symflops.derive(load_text(tmp_path, JOINED))
    c = costs(d)
    # forward: a copy, 0 FLOPs in both buckets.
    assert (c.forward[0].flops, c.forward[0].elementwise) == (0, 0)
    B, M, S_, U, E = sympy.symbols("B M S U E", positive=True, integer=True)
    # dA, dBt: copies (0); dG[b,u] = sum_e dK[b,M+S+u,e]: one add per element
    # read, B*U*E, elementwise (a lone reduction).
    assert [(b.flops, b.elementwise) for b in c.backward] == [(0, 0), (0, 0), (0, B * U * E)]
    assert d.saved == ()  # no rule reads a part or the output


def test_verify_the_joined_parts(tmp_path):
    pytest.importorskip("torch")
    path = tmp_path / "joined.yaml"
    path.write_text(JOINED)
    run = forked.run("verify", str(path), cwd=ROOT)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "result: pass" in run.stdout


# ----------------------------------------------------------- refusals --

BASE = """\
dims: {B: batch, M: memory, S: new, E: width, T: positions}
tensors:
  K_mem: {shape: [B, M, E], role: input}
  K_new: {shape: [B, S, E], role: input}
  K_odd: {shape: [B, S, T], role: input}
  Qt: {shape: [B, T, E], role: input}
ops:
"""


def test_refuses_a_part_that_reuses_the_joined_letter(tmp_path):
    err = refusal(tmp_path, BASE + "  - K[b,t,e] = concat_t(K_mem[b,t,e], K_new[b,s,e])\n")
    # t ranges over M + S on the output but over M in K_mem: at K_mem's t, column 33.
    assert "indexes the joined axis with the output's letter 't'" in err.message
    assert (err.span.line, err.span.column) == (8, 33)


def test_refuses_an_output_read_over_another_extent(tmp_path):
    err = refusal(tmp_path, BASE + "  - K[b,t,e] = concat_t(K_mem[b,m,e], K_new[b,s,e])\n"
                                   "  - A[b,t] = Qt[b,t,e] K[b,t,e]\n")
    # K's joined axis is M + S, which is not Qt's T: at K's t, column 28.
    assert "index 't' ranges over T in Qt but over M + S in K" in err.message
    assert (err.span.line, err.span.column) == (9, 28)


def test_a_declared_extent_equal_to_the_sum_is_accepted(tmp_path):
    # T is declared as M + S: Qt's axis and K's joined axis are proven equal.
    text = BASE.replace("T: positions}", "T: {description: positions, equals: M + S}}")
    d = symflops.derive(load_text(tmp_path, text + "  - K[b,t,e] = concat_t(K_mem[b,m,e], "
                                  "K_new[b,s,e])\n  - A[b,t] = Qt[b,t,e] K[b,t,e]\n"))
    B, M, S_, E = sympy.symbols("B M S E", positive=True, integer=True)
    # A[b,t] = sum_e Qt K: a row-wise dot, 2 per term, B*(M + S)*E terms, elementwise.
    counted = substitute(costs(d).elementwise_forward, d.layer.substitutions)
    assert sympy.expand(counted - 2 * B * (M + S_) * E) == 0


def test_refuses_parts_that_disagree_on_the_other_letters(tmp_path):
    err = refusal(tmp_path, BASE + "  - K[b,t,e] = concat_t(K_mem[b,m,e], K_odd[b,s,f])\n")
    assert "letter(s) the output lacks: s,f" in err.message
    assert (err.span.line, err.span.column) == (8, 39)


def test_refuses_parts_whose_shared_letter_has_another_extent(tmp_path):
    err = refusal(tmp_path, BASE + "  - K[b,t,e] = concat_t(K_mem[b,m,e], K_odd[b,s,e])\n")
    assert "index 'e' ranges over E in K_mem but over T in K_odd" in err.message
    assert (err.span.line, err.span.column) == (8, 49)


@pytest.mark.parametrize("op, fragment", [
    ("K[b,t,e] = concat_t(K_mem[b,m,e])", "needs at least two parts"),
    ("K[b,t,e] = concat_t(K_mem[b,m,e], 2)", "joins tensors, not constants"),
    ("K[b,t,e] = 2 * concat_t(K_mem[b,m,e], K_new[b,s,e])", "must be the whole right side"),
    ("K[b,u,e] = concat_t(K_mem[b,m,e], K_new[b,s,e])", "a letter the output K does not have"),
    ("K[b,t,e] = gelu(K_mem[b,m,e], K_new[b,s,e], K_new[b,s,e])", "takes at most two arguments"),
])
def test_refuses_other_misuse(tmp_path, op, fragment):
    err = refusal(tmp_path, BASE + f"  - {op}\n")
    assert fragment in err.message and err.span is not None and err.span.line == 8


# ------------------------------------------------------------------ MLA --

def mla():
    d = symflops.derive(symflops.load(ROOT / "derivations" / "attention_mla.yaml"))
    return d, costs(d)


def test_mla_parameters_by_hand():
    _, c = mla()
    # DeepSeek-V2's attention, one layer:
    #   W_dq (q_a_proj) 5120 x 1536, g_q 1536,
    #   W_uq + W_qr1 + W_qr2 (q_b_proj) 1536 x 128*(128 + 64),
    #   W_dkv + W_kr1 + W_kr2 (kv_a_proj_with_mqa) 5120 x (512 + 64), g_kv 512,
    #   W_uk + W_uv (kv_b_proj) 512 x 128*(128 + 128), W_o (o_proj) 128*128 x 5120.
    hand = (5120 * 1536 + 1536 + 1536 * 128 * 192 + 5120 * 576 + 512
            + 512 * 128 * 256 + 128 * 128 * 5120)
    assert hand == 149_227_520
    assert int(c.params.subs({sympy.Symbol(k, positive=True, integer=True): v
                              for k, v in DEEPSEEK_V2.items()})) == hand
    assert sympy.expand(c.params - (D * Q + Q + Q * N * (C + 2 * R) + D * (L + 2 * R) + L
                                    + L * N * (C + F) + N * F * D)) == 0


def test_mla_flops_by_hand():
    _, c = mla()
    pairs = S * (S + 1) / 2  # causal: t <= s
    forward = (2 * S * D * Q                      # query latent
               + 2 * S * Q * N * (C + 2 * R)      # query up-projections, rotary halves too
               + 2 * S * D * L                    # key/value latent
               + 2 * S * D * 2 * R                # the shared rotary key, two halves
               + 2 * S * L * N * (C + F)          # keys and values from the latent
               + 2 * N * (C + 2 * R) * pairs      # scores over C + 2R wide heads
               + 2 * N * F * pairs                # mixing the values
               + 2 * S * N * F * D)               # output projection
    assert sympy.expand(c.flops_forward - forward) == 0
    # Every product above is a matrix product of two tensors that both need a
    # gradient: two backward products of its size each; the concatenations,
    # rotary rotations and norms add none.
    assert sympy.expand(c.flops_backward - 2 * forward) == 0
    # Elementwise, forward: each RMSNorm 3 per element + 2 per row and its gain
    # 1 per element; each rotary half 2 products + 1 add per element; the
    # scale 1 and the causal softmax 3 per score; the concatenations 0.
    elementwise = (4 * S * Q + 2 * S + 4 * S * L + 2 * S + 2 * 3 * S * N * R + 2 * 3 * S * R
                   + 4 * N * pairs)
    assert sympy.expand(c.elementwise_forward - elementwise) == 0
    at = {sympy.Symbol(k, positive=True, integer=True): v for k, v in DEEPSEEK_V2.items()}
    assert int(c.flops_forward.subs(at)) == int(forward.subs(at)) == 1_909_817_606_144


def test_mla_rotary_key_is_broadcast_to_the_heads():
    d, c = mla()
    rules = {r.statement: k for k, r in enumerate(d.rules)}
    # dKr1 sums dKh's rotary slice over the N heads: N*R*S adds, elementwise.
    k = rules["dKr1[t,i] = dKh[t,n,C+i]"]
    assert (c.backward[k].flops, c.backward[k].elementwise) == (0, N * R * S)
    assert "dQr2[s,n,j] = dQh[s,n,C+R+j]" in rules


def test_mla_rotary_tables_are_buffers():
    """cos and sin, S x R each, are constants: no parameter, no gradient, not
    saved as activations (the rules read them), their 2SR elements counted apart."""
    d, c = mla()
    assert sympy.expand(c.buffers - 2 * S * R) == 0
    assert "cos" not in d.saved and "sin" not in d.saved
    assert not any(r.grad in ("dcos", "dsin") for r in d.rules)
