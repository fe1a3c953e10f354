"""The op vocabulary beyond matmul: pointwise functions, gating, residuals,
dropout, softmax, norms, and attention as the acid test.

Expected values are hand derivations written here, or the figures of
../shared/seeds/004 (attention corrections at L = 80, h = 8192, S = 8192).
"""

import math
from pathlib import Path

import pytest
import sympy

import symflops
from symflops.ops import functions as F
from symflops.count.cost import costs
from symflops.count.evaluate import number

ROOT = Path(__file__).resolve().parent.parent
S, H, D, N, E, G, R, B, FF = sympy.symbols("S H D N E G R B F", positive=True, integer=True)


def derived(name):
    d = symflops.derive(symflops.load(ROOT / "derivations" / f"{name}.yaml"))
    return d, costs(d)


def attention_products(d, c):
    """Forward and backward FLOPs of the two attention products (the ops
    writing the scores A and the mixed values O)."""
    ops = [k for k, op in enumerate(d.layer.ops) if op.output in ("A", "O")]
    forward = sum(c.forward[k].flops for k in ops)
    backward = sum(cb.flops for r, cb in zip(d.rules, c.backward) if r.op in ops)
    return sympy.expand(forward), sympy.expand(backward)


# h, the total query width, of each shipped attention declaration.
ATTENTION = [("attention", H), ("mha", N * E), ("gqa", G * R * E)]


@pytest.mark.parametrize("name,h", ATTENTION, ids=[a[0] for a in ATTENTION])
def test_attention_products_count_4_S2_h_forward_and_12_S_h_per_token(name, h):
    fwd, bwd = attention_products(*derived(name))
    # Seed 004: the score and value products cost about 4 S^2 h per sequence
    # forward (2 S^2 h each); with their backward products, 12 S h per token.
    assert fwd == sympy.expand(4 * S**2 * h)
    assert sympy.expand((fwd + bwd) / S) == sympy.expand(12 * S * h)


def test_seed_attention_correction_at_8k():
    fwd, bwd = attention_products(*derived("attention"))
    per_token_per_layer = sympy.expand((fwd + bwd) / S)
    L, six_n = 80, 6 * 70.6e9  # seed 004: 6N = 423.6 billion FLOPs per token
    correction = L * number(per_token_per_layer, {"S": 8192, "H": 8192})
    assert round(correction / 1e9, 2) == 64.42
    assert round(100 * correction / six_n, 2) == 15.21


def test_attention_projections_are_6_P_per_token():
    d, c = derived("attention")
    fwd, bwd = attention_products(d, c)
    P = 4 * D * H  # W_q, W_k, W_v, W_o
    assert c.params == P
    assert sympy.expand(c.flops_total - fwd - bwd) == sympy.expand(6 * P * S)


def test_gqa_shares_keys_and_values_across_a_group():
    d, c = derived("gqa")
    # Hand count: W_q and W_o are D x (G R E) each, W_k and W_v are D x (G E) each.
    assert c.params == sympy.expand(2 * D * G * R * E + 2 * D * G * E)


def test_softmax_rule_is_the_textbook_one():
    d, _ = derived("attention")
    (rule,) = [r for r in d.rules if r.grad == "dA"]
    # dA = P (dP - sum_t dP P), as the issue states it
    assert rule.statement == "dA[s,t] = P[s,t] dP[s,t] - P[s,t] P[s,u] dP[s,u]"


@pytest.mark.parametrize("name,saves,in_output", [
    ("sigmoid", "output", "y*(1 - y)"),
    ("tanh", "output", "1 - y**2"),
    ("exp", "output", "y"),
])
def test_output_saving_functions_derive_their_derivative_in_the_output(name, saves, in_output):
    f = F.FUNCTIONS[name]
    assert f.saves == saves
    y = F.Y
    expected = {"y*(1 - y)": y * (1 - y), "1 - y**2": 1 - y**2, "y": y}[in_output]
    assert sympy.simplify(f.derivative_of_output - expected) == 0


def test_gelu_derivative_matches_the_hand_formula():
    # d/dx [x Phi(x)] = Phi(x) + x phi(x), with the standard normal cdf and pdf.
    for x in (-2.0, -0.3, 0.0, 0.7, 1.9):
        phi = math.exp(-x * x / 2) / math.sqrt(2 * math.pi)
        Phi = 0.5 * (1 + math.erf(x / math.sqrt(2)))
        assert float(F.FUNCTIONS["gelu"].derivative.subs(F.X, x)) == pytest.approx(Phi + x * phi)


def test_function_costs_count_the_formula():
    # 1 / (1 + exp(-x)): negate, exp, add, divide.  x / (1 + exp(-x)): the same four.
    assert F.FUNCTIONS["sigmoid"].cost == 4
    assert F.FUNCTIONS["silu"].cost == 4
    assert F.FUNCTIONS["relu"].cost == 1  # max(0, x)


def test_pointwise_rules_read_what_the_convention_says():
    d, _ = derived("activations")
    reads = {r.grad: set(r.reads) for r in d.rules}
    assert reads["dX"] >= {"X"}
    by_op = {d.layer.ops[r.op].output: set(r.reads) for r in d.rules}
    assert "Sg" in by_op["Sg"] and "X" not in by_op["Sg"]   # sigmoid reads its output
    assert "T" in by_op["T"] and "Ex" in by_op["Ex"]
    assert "X" in by_op["G"] and "G" not in by_op["G"]      # gelu reads its input


def test_swiglu_is_6PB_in_matmuls_and_gating_is_elementwise():
    d, c = derived("swiglu")
    P = 3 * D * FF
    assert c.params == P
    assert c.flops_total == sympy.expand(6 * P * B)
    # Forward elementwise: silu (4 per element) and the gating multiply (1): 5 B F.
    assert c.elementwise_forward == 5 * B * FF


def test_gelu_mlp_bias_and_residual_are_elementwise():
    d, c = derived("gelu_mlp")
    assert c.flops_total == 12 * B * D * FF
    grads = {r.grad for r in d.rules}
    assert {"db_in", "db_out", "dW_in", "dW_out", "dX"} <= grads
    (db_out,) = [r for r in d.rules if r.grad == "db_out"]
    assert db_out.statement == "db_out[e] = dO[b,e]"  # a bias gradient sums over the batch


def test_dropout_saves_a_one_byte_mask_and_not_its_input():
    d, c = derived("dropout")
    assert d.saved == ("X", "mask_Z")
    # bf16 X (2 bytes) for dW; the keep-mask at 1 byte per element.
    assert c.memory()["activation_bytes"] == sympy.expand(2 * B * D + B * FF)
    (rule,) = [r for r in d.rules if r.grad == "dA"]
    assert rule.statement == "dA[b,f] = 10 dZ[b,f] mask_Z[b,f] / 9"


def test_norms_save_rstd_and_derive_gain_and_bias_gradients():
    d, c = derived("norms")
    assert {"N_hat", "rstd_N_hat", "X", "rstd_R_hat"} <= set(d.saved)
    assert {r.grad for r in d.rules} >= {"dg_ln", "dbeta", "dg_rms", "dX"}
    assert c.flops_total == 0  # no matmul at all: everything is elementwise


@pytest.mark.parametrize("name,h", [("attention_scores_causal", "E"), ("attention_causal", "H")])
def test_seed_causal_attention_correction_at_8k(name, h):
    # Seed 004: under the causal pair count S(S+1)/2, the 8k correction is about
    # 32.22 billion FLOPs per token, 7.61 % of 6N = 423.6 billion (L = 80, h = 8192).
    d, c = derived(name)
    width = sympy.Symbol(h, positive=True, integer=True)
    ops = [k for k, op in enumerate(d.layer.ops) if op.output in ("A", "O")]
    assert len(ops) == 2
    work = sum(c.forward[k].flops for k in ops) + sum(
        cb.flops for r, cb in zip(d.rules, c.backward) if r.op in ops)
    per_token = sympy.expand(work / S)
    # Hand count: each product costs 2 E S(S+1)/2 forward and twice that backward.
    assert per_token == sympy.expand(6 * 2 * width * (S + 1) / 2)
    correction = 80 * number(per_token, {"S": 8192, h: 8192})
    assert round(correction / 1e9, 2) == 32.22
    assert round(100 * correction / (6 * 70.6e9), 2) == 7.61


def test_cross_entropy_starts_the_backward_pass_from_the_loss():
    d, c = derived("lm_loss")
    (rule,) = [r for r in d.rules if r.grad == "dZ"]
    # dZ = dL (P - onehot(y)): the softmax probabilities minus the target's one-hot.
    assert rule.statement == "dZ[b,v] = P_L[b,v] dL[] - dL[] where v = y[b]"
    assert d.saved == ("X", "y", "P_L")  # targets are one integer per row, not a one-hot matrix
    V = sympy.Symbol("V", positive=True, integer=True)
    assert c.flops_total == 6 * B * D * V  # the output projection's 6PB; the loss is elementwise
    # 3 per logit (exp, add, divide) and 2 per row (log, subtract the target's logit)
    assert c.elementwise_forward == sympy.expand(3 * B * V + 2 * B)


@pytest.mark.parametrize("mean", [False, True])
def test_cross_entropy_rule_matches_finite_differences(mean):
    from gradcheck import gradient_errors

    name = "cross_entropy_mean_v" if mean else "cross_entropy_v"
    layer = symflops.declare(
        "ce", dims={"B": "rows", "T": "positions", "V": "classes"},
        tensors={"Z": {"shape": ["B", "T", "V"], "role": "input"},
                 "y": {"shape": ["T", "B"], "role": "index"}},
        ops=[f"L[] = {name}(Z[b,t,v], y[t,b])"])
    errors = gradient_errors(layer)
    assert errors and max(errors.values()) < 1e-6, errors


def test_causal_softmax_gives_zero_probability_outside_the_domain():
    import numpy as np

    d, _ = derived("attention_causal")
    softmax = next(op for op in d.layer.ops if op.output == "P")
    A = np.random.default_rng(0).standard_normal((4, 4))
    P = softmax.run({"A": A})["P"]
    assert np.allclose(np.triu(P, 1), 0) and np.allclose(P.sum(axis=1), 1)


def test_decoder_block_is_6N_per_token_plus_the_causal_attention_term():
    d, c = derived("transformer_block")
    Nh, F_ = sympy.symbols("N F", positive=True, integer=True)
    h = Nh * E
    dense = 4 * D * h + 2 * D * F_            # W_q, W_k, W_v, W_o and the two MLP matrices
    small = 4 * D + F_ + D                    # LayerNorm gains and biases, MLP biases
    assert c.params == sympy.expand(dense + small)
    per_token = sympy.expand(c.flops_total / S)
    # Seed 004: 6N per token for the dense products, plus 12 S h full-square or, causal,
    # 12 h (S+1)/2 for the two attention products with their backward.
    assert sympy.expand(per_token - 6 * dense) == sympy.expand(6 * h * (S + 1))


def test_applied_functions_print_the_codes_rules_are_written_in():
    # The spellings of README's rule strings: gelu(X), gelu'(X), sigmoid'@out(Y).
    from symflops.core.ir import Apply, Factor
    assert str(Factor("X", ("b", "d"), fn=Apply("gelu"))) == "gelu(X[b,d])"
    assert str(Factor("X", ("b", "d"), fn=Apply("gelu", "derivative"))) == "gelu'(X[b,d])"
    assert str(Factor("Y", ("b",), fn=Apply("sigmoid", "derivative@out"))) == "sigmoid'@out(Y[b])"
    assert str(Factor("", ("t", "s"), fn="<=")) == "[t <= s]"
    with pytest.raises(TypeError):
        Factor("X", ("b",), fn="gelu")  # a function name must be an Apply, never a bare string
