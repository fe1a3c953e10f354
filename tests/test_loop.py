"""The loop op (issue 31): a run of statements that reads a tensor one step
back before writing it, the gated DeltaNet's loop over chunks,

    v_new = u - w S ;  o = q S + A v_new ;  S' = S exp(g_last) + k^T v_new

Expected values come from outside the code under test: the counts from a loop
over the steps written here (multiply-adds counted one by one), the values and
gradients from a plain PyTorch loop and autograd, the FLOPs from
FlopCounterMode on transformers' own loop (a copy of its five lines, and its
``torch_chunk_gated_delta_rule`` for the values of the whole chunked layer).
"""

from pathlib import Path

import numpy as np
import pytest
import sympy

import symflops
from symflops import cli
from symflops.checks.numeric import forward
from symflops.checks.verify import verify
from symflops.count.cost import costs

torch = pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parent.parent
DIMS = {"H": "heads", "C": "chunks", "L": "chunk length", "E": "key width", "P": "value width"}
H, C, L, E, P = sympy.symbols("H C L E P", positive=True, integer=True)
LOOP = ["N[h,c,l,p] = U[h,c,l,p] - Wd[h,c,l,e] S[h,c-1,e,p]",
        "O[h,c,l,p] = Qd[h,c,l,e] S[h,c-1,e,p] + A[h,c,l,m] N[h,c,m,p]",
        "S[h,c,e,p] = Gd[h,c] S[h,c-1,e,p] + Kd[h,c,l,e] N[h,c,l,p]"]
SHAPES = {"U": ["H", "C", "L", "P"], "Wd": ["H", "C", "L", "E"], "Qd": ["H", "C", "L", "E"],
          "A": ["H", "C", "L", "L"], "Gd": ["H", "C"], "Kd": ["H", "C", "L", "E"]}


def layer(ops=LOOP):
    return symflops.declare("loop", dims=DIMS, tensors={
        n: {"shape": s, "role": "input"} for n, s in SHAPES.items()}, ops=list(ops))


def _arrays(rng, h, c, l, e, p):
    sizes = {"H": h, "C": c, "L": l, "E": e, "P": p}
    return {n: rng.standard_normal([sizes[x] for x in s]) for n, s in SHAPES.items()}


# ---------------------------------------------------------------- structure --

def test_one_op_with_its_output_and_what_it_keeps():
    lay = layer()
    (op,) = lay.ops
    assert op.kind == "loop" and op.output == "O"
    assert [f.tensor for f in op.aux] == ["N", "S"]
    assert op.inputs == ("U", "Wd", "Qd", "A", "Gd", "Kd")
    assert op.statement() == "; ".join(LOOP)
    d = symflops.derive(lay)
    assert [r.wrt for r in d.rules] == ["U", "Wd", "Qd", "A", "Gd", "Kd"]
    assert d.rules[1].statement == ("dWd[h,c,l,e] = -G_N[h,c,l,p] S[h,c-1,e,p], with G_N, G_S "
                                    "from the reverse loop over c")
    # the saved: the state and the new values (besides the inputs), read by the rules
    assert {"N", "S"} <= set(d.saved)


# ------------------------------------------------------------------- counts --

def brute_force(h, c_, l, e, p):
    """Multiply-adds and elementwise FLOPs of the loop, step by step, as the
    convention says (the zero state's products and the last state not run)."""
    fwd_mac = fwd_ew = bwd_mac = bwd_ew = 0
    for c in range(c_):
        first, last = c == 0, c == c_ - 1
        # forward: N = U - Wd S (the product once the state is not zero)
        fwd_mac += 0 if first else h * l * e * p
        fwd_ew += 0 if first else h * l * p      # joining U and -Wd S
        # O = Qd S + A N
        fwd_mac += (0 if first else h * l * e * p) + h * l * l * p
        fwd_ew += 0 if first else h * l * p
        # S = Gd S + Kd N, not run at the last step
        if not last:
            fwd_mac += h * e * p * l
            if not first:
                fwd_ew += 2 * h * e * p          # Gd * S, and the join
        # backward, the reverse loop: G_N from O (A^T dO) and from S (Kd G_S, not at the last)
        bwd_mac += h * l * l * p + (0 if last else h * l * e * p)
        bwd_ew += 0 if last else h * l * p       # joining the two into G_N
        # the previous state's gradient (not at the first step): -Wd^T G_N, Qd^T dO, Gd G_S
        if not first:
            bwd_mac += 2 * h * l * e * p
            bwd_ew += 0 if last else 2 * h * e * p   # Gd G_S, its join to the others
            bwd_ew += h * e * p                  # joining the first two
        # the inputs: dU = G_N (no work); dWd, dQd read S_prev; dA = dO N^T
        bwd_mac += (0 if first else 2 * h * l * e * p) + h * l * l * p
        # dGd = G_S . S_prev (a dot product, elementwise: E P multiply-adds per h)
        bwd_ew += 0 if (first or last) else 2 * h * e * p
        bwd_mac += 0 if last else h * l * e * p  # dKd = N G_S^T
    return 2 * fwd_mac, fwd_ew, 2 * bwd_mac, bwd_ew


@pytest.mark.parametrize("steps", [1, 2, 3, 7])
def test_counts_against_a_loop_over_the_steps(steps):
    d = symflops.derive(layer())
    c = costs(d)
    at = {H: 3, C: steps, L: 5, E: 4, P: 6}
    f, fe, b, be = brute_force(3, steps, 5, 4, 6)
    assert c.flops_forward.subs(at) == f
    assert c.elementwise_forward.subs(at) == fe
    assert c.flops_backward.subs(at) == b
    assert sum(x.elementwise for x in c.backward).subs(at) == be


def test_counts_by_hand():
    c = costs(symflops.derive(layer()))
    # forward: Wd S, Qd S and Kd N over C - 1 steps, A N over C, 2 FLOPs per multiply-add
    assert sympy.expand(c.flops_forward - 2 * H * L * P * (3 * E * (C - 1) + C * L)) == 0
    # the state's own term Gd S runs at the C - 2 middle steps: never a negative count
    assert c.elementwise_forward.has(sympy.Max)
    assert c.elementwise_forward.subs({C: 1, H: 1, L: 1, E: 1, P: 1}) == 0


# ------------------------------------------------- values and gradients --

def plain_loop(t, u, w, q, a, g, k):
    """The loop as transformers writes it (torch_chunk_gated_delta_rule's second
    phase), the state zero before the first chunk; [h, c, ...] layout."""
    state = torch.zeros(u.shape[0], w.shape[-1], u.shape[-1], dtype=u.dtype)
    out = []
    for i in range(u.shape[1]):
        v_new = u[:, i] - w[:, i] @ state
        out.append(q[:, i] @ state + a[:, i] @ v_new)
        state = state * g[:, i, None, None] + k[:, i].transpose(-1, -2) @ v_new
    return torch.stack(out, 1)


def test_values_and_gradients_against_a_plain_loop_and_autograd():
    rng = np.random.default_rng(0)
    arrays = _arrays(rng, 2, 4, 3, 5, 6)
    lay = layer()
    values = forward(lay, arrays, {"H": 2, "C": 4, "L": 3, "E": 5, "P": 6})
    t = {n: torch.tensor(v, requires_grad=True) for n, v in arrays.items()}
    ref = plain_loop(torch, t["U"], t["Wd"], t["Qd"], t["A"], t["Gd"], t["Kd"])
    assert np.allclose(values["O"], ref.detach().numpy(), rtol=1e-12, atol=1e-12)
    d = symflops.derive(lay)
    from symflops.checks.numeric import backward

    dO = rng.standard_normal(values["O"].shape)
    grads = backward(d, values, {"dO": dO}, {"H": 2, "C": 4, "L": 3, "E": 5, "P": 6})
    refs = torch.autograd.grad(ref, [t[n] for n in SHAPES], torch.tensor(dO))
    for n, r in zip(SHAPES, refs):
        assert np.allclose(grads["d" + n], r.numpy(), rtol=1e-10, atol=1e-10), n


def test_verify_passes():
    assert verify(symflops.derive(layer()), seed=5).passed


# ------------------------------------------- FlopCounterMode, transformers --

def _count(fn):
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter:
        fn()
    return counter.get_total_flops()


def test_the_difference_from_transformers_loop_is_five_products_with_the_state():
    """FlopCounterMode on transformers' loop runs the zero state's products at
    the first chunk (q S, w S) and the last chunk's k^T v_new, and takes the
    gradients of q and w at the first chunk: 3 products forward, 2 backward,
    each 2 Qc Dk Dv FLOPs per head; symflops's torch forward skips them, as counted."""
    h, c, l, e, p = 2, 5, 4, 3, 6
    rng = np.random.default_rng(1)
    arrays = _arrays(rng, h, c, l, e, p)
    (op,) = layer().ops

    def leaves():
        return {n: torch.tensor(v, requires_grad=True) for n, v in arrays.items()}

    mine, theirs = leaves(), leaves()
    dims = {"H": h, "C": c, "L": l, "E": e, "P": p}
    holder = {}
    ours_fwd = _count(lambda: holder.update(op.torch(torch, mine, dims)))
    hf_fwd = _count(lambda: holder.update(hf=plain_loop(
        torch, *(theirs[n] for n in ("U", "Wd", "Qd", "A", "Gd", "Kd")))))
    assert torch.allclose(holder["O"], holder["hf"], atol=1e-12)
    product = 2 * h * l * e * p  # one (Qc x Dk) by (Dk x Dv) product, every head
    assert hf_fwd - ours_fwd == 3 * product
    G = torch.ones_like(holder["O"])
    ours_bwd = _count(lambda: torch.autograd.grad(holder["O"], list(mine.values()), G))
    hf_bwd = _count(lambda: torch.autograd.grad(holder["hf"], list(theirs.values()), G))
    assert hf_bwd - ours_bwd == 2 * product
    # and symflops's counts are the torch forward's and backward's
    cs = costs(symflops.derive(layer()))
    at = {H: h, C: c, L: l, E: e, P: p}
    assert cs.flops_forward.subs(at) == ours_fwd
    assert cs.flops_backward.subs(at) == ours_bwd


def test_the_chunked_layer_computes_what_transformers_computes():
    """derivations/deltanet_chunk.yaml, run forward, against transformers 5.24's
    torch_chunk_gated_delta_rule on the same inputs (one sequence)."""
    qn = pytest.importorskip("transformers.models.qwen3_next.modeling_qwen3_next")
    lay = symflops.load(ROOT / "derivations" / "deltanet_chunk.yaml")
    k_, q_, h, e, p = 3, 4, 2, 5, 3
    rng = np.random.default_rng(2)

    def unit(x):
        return x / np.linalg.norm(x, axis=-1, keepdims=True)

    arrays = {"Qn": unit(rng.standard_normal((k_, q_, h, e))),
              "Kn": unit(rng.standard_normal((k_, q_, h, e))),
              "V": rng.standard_normal((k_, q_, h, p)),
              "Be": 1 / (1 + np.exp(-rng.standard_normal((k_, q_, h)))),
              "Gl": -np.abs(rng.standard_normal((k_, q_, h))) * 0.3}
    values = forward(lay, arrays, {"K": k_, "Q": q_, "H": h, "E": e, "P": p})
    seq = {n: torch.tensor(v.reshape((1, k_ * q_) + v.shape[2:])) for n, v in arrays.items()}
    out, _ = qn.torch_chunk_gated_delta_rule(seq["Qn"], seq["Kn"], seq["V"], g=seq["Gl"],
                                             beta=seq["Be"], chunk_size=q_)
    # transformers' [batch, position, head, width]; O is [h, c, l, p]
    ours = np.transpose(values["O"], (1, 2, 0, 3)).reshape(1, k_ * q_, h, p)
    assert np.allclose(ours, out.double().numpy(), rtol=1e-4, atol=1e-5)


# ----------------------------------------------------------------- refusals --

BAD = [
    (["N[h,c,l,p] = U[h,c,l,p] - Wd[h,c,l,e] S[h,c-2,e,p]"] + LOOP[1:],
     "S[...] read at c-2", 1),
    ([LOOP[0], "O[h,c,l,p] = Qd[h,c,l,e] S[h,c,e,p] + A[h,c,l,m] N[h,c,m,p]", LOOP[2]],
     "the state S read at the step c itself", 2),
    ([LOOP[0], "O[h,c,l,p] = Qd[h,c,l,e] exp(S[h,c-1,e,p]) + A[h,c,l,m] N[h,c,m,p]", LOOP[2]],
     "the state S read under exp(...)", 2),
    ([LOOP[0], "O[h,c,l,p] = Qd[h,c,l,e] N[h,c-1,e,p] + A[h,c,l,m] N[h,c,m,p]", LOOP[2]],
     "N and S are both read one step back in one loop", 2),
    ([LOOP[0], "O[h,l,p] = A[h,c,l,m] N[h,c,m,p]", LOOP[2]],
     "O does not carry the loop letter 'c' on its output", 2),
    ([LOOP[0], LOOP[2]], "a loop has one output: every tensor the loop writes is read inside it",
     1),
    ([LOOP[0], LOOP[1], "R[h,c,l,p] = U[h,c,l,p] U[h,c,l,p]", LOOP[2]],
     "a loop has one output: O and R are read by no statement of the loop", 1),
    (LOOP + ["Y[h,c,e,p] = S[h,c,e,p]"], "S is the loop's state: only the loop reads it", 4),
    (LOOP + ["Y[h,c,l,p] = N[h,c,l,p]"], "N is kept by the loop over c: only the loop reads it",
     4),
    ([LOOP[0], "O[h,c,l,p] = Qd[h,c,l,e] S[h,c-1,e,p] + A[h,c,l,m] N[h,c,m,p] where m <= c",
      LOOP[2]], "a condition on the loop letter 'c'", 2),
]


@pytest.mark.parametrize("ops,message,line", BAD, ids=[m for _, m, _ in BAD])
def test_refused_by_name(ops, message, line):
    # ``line``: the statement (1-based) the message points at; the first is on line 10
    with pytest.raises(symflops.SymflopsError) as err:
        symflops.loads(_yaml(ops), "bad.yaml")
    assert message in str(err.value), str(err.value)
    assert err.value.span is not None and err.value.span.line == 9 + line, err.value.span


def _yaml(ops):
    return ("dims: {H: h, C: c, L: l, E: e, P: p}\ntensors:\n"
            + "".join(f"  {n}: {{shape: [{', '.join(s)}], role: input}}\n"
                      for n, s in SHAPES.items())
            + "ops:\n" + "".join(f"  - {o}\n" for o in ops))


def test_refused_by_the_cli_at_the_column(tmp_path, capsys):
    path = tmp_path / "bad.yaml"
    ops = ["N[h,c,l,p] = U[h,c,l,p] - Wd[h,c,l,e] S[h,c-2,e,p]"] + LOOP[1:]
    path.write_text(_yaml(ops))
    assert cli.main(["derive", str(path)]) == 2
    first = capsys.readouterr().err.splitlines()[0]
    # line 10 is the first statement ("  - " then the text); 'c-2' is at column 42 of it
    column = 5 + ops[0].index("c-2")
    assert f"{path}:10:{column}: error: S[...] read at c-2" in first, first
    assert "fix: " in first


def test_a_single_statement_through_a_product_stays_refused():
    # a group needs two statements; one that reads itself is a recurrence, which
    # takes a gate, not a product with a summed letter.  The refusal names the
    # construct (it used to say to write S[c,e,p] with c-1 for c, which would
    # change what the statement computes)
    with pytest.raises(symflops.SymflopsError,
                       match="read through the summed letter 'f': a recurrence through a "
                             "matrix is not supported in one statement"):
        symflops.declare("m", dims={"C": "c", "E": "e", "P": "p"}, tensors={
            "M": {"shape": ["C", "E", "E"], "role": "input"},
            "X": {"shape": ["C", "E", "P"], "role": "input"}},
            ops=["S[c,e,p] = M[c,e,f] S[c-1,f,p] + X[c,e,p]"])


def test_a_general_loop_verifies():
    """Weights shared by every step (their gradients sum over the steps), a
    function of a loop tensor, the state through a matrix (a summed letter)
    and in a product of three, and a statement after the loop reading its output."""
    lay = symflops.loads("""
name: shared_loop
dims: {B: batch, C: steps, E: state rows, P: state columns, L: positions}
tensors:
  X: {shape: [B, C, L, P], role: input}
  Wq: {shape: [L, E], role: param}
  M: {shape: [E, E], role: param}
  G: {shape: [B, C], role: input}
ops:
  - V[b,c,l,p] = X[b,c,l,p] - Wq[l,e] S[b,c-1,e,p]
  - Y[b,c,l,p] = tanh(V[b,c,l,p]) + Wq[l,e] S[b,c-1,e,p]
  - S[b,c,e,p] = M[e,f] S[b,c-1,f,p] + G[b,c] Wq[l,e] V[b,c,l,p]
  - Z[b,c,l,p] = Y[b,c,l,p] Y[b,c,l,p]
""")
    d = symflops.derive(lay)
    assert [op.kind for op in lay.ops] == ["loop", "contraction"]
    # the state's own term M S runs at the C - 2 middle steps: 2 B E^2 P each
    c = costs(d)
    Bs, Cs, Es, Ps, Ls = sympy.symbols("B C E P L", positive=True, integer=True)
    at = {Bs: 2, Cs: 4, Es: 3, Ps: 5, Ls: 2}
    # per step, B L E P = 60 multiply-adds for Wq S (in V and in Y) and for (G Wq) V
    # (written order: G Wq first, elementwise, then with V, a sum over l), and
    # B E E P = 90 for M S. V's and Y's over C - 1 = 3 steps, (G Wq) V over the
    # C - 1 = 3 before the last, M S over the C - 2 = 2 in between: 2 FLOPs each
    want = 2 * (3 * 60 + 3 * 60 + 3 * 60 + 2 * 90)
    assert c.flops_forward.subs(at) == want
    for seed in (0, 1):
        assert verify(d, seed=seed).passed


def test_an_input_named_like_a_total_is_saved_and_a_taken_total_refused():
    # a tensor whose name starts with G_ is no total: the rules read it, it is saved
    ops = [o.replace("Wd[", "G_w[") for o in LOOP]
    lay = symflops.declare("loop", dims=DIMS, tensors={
        **{n: {"shape": s, "role": "input"}
           for n, s in SHAPES.items() if n != "Wd"},
        "G_w": {"shape": SHAPES["Wd"], "role": "input"}}, ops=ops)
    assert "G_w" in symflops.derive(lay).saved
    with pytest.raises(symflops.SymflopsError, match="the name 'G_N' is taken"):
        symflops.declare("loop", dims=DIMS, tensors={
            **{n: {"shape": s, "role": "input"} for n, s in SHAPES.items()},
            "G_N": {"shape": ["H"], "role": "input"}}, ops=LOOP)
