"""The feed-forward block and the toy layer, checked against the seeds.

Expected values are written here by hand from ../shared/seeds:
000 (the FFN cheatsheet) and 004 (the 10-token, 4-to-3 toy layer).
"""

from pathlib import Path

import sympy

import symflops
from symflops.count.cost import costs
from symflops.count.evaluate import number

ROOT = Path(__file__).resolve().parent.parent
B, D, F = sympy.symbols("B D F", positive=True, integer=True)


def ffn(**overrides):
    tensors = {
        "X": {"shape": ["B", "D"], "role": "input"},
        "W_in": {"shape": ["D", "F"], "role": "param"},
        "W_out": {"shape": ["F", "D"], "role": "param"},
    }
    for name, extra in overrides.items():
        tensors[name] = {**tensors[name], **extra}
    return symflops.declare("ffn", dims={"B": "tokens", "D": "width", "F": "hidden"},
                            tensors=tensors,
                            ops=["H[b,f] = X[b,d] W_in[d,f]", "Y[b,e] = H[b,f] W_out[f,e]"])


def test_shipped_declaration_matches_seed_totals():
    c = costs(symflops.derive(symflops.load(ROOT / "derivations" / "ffn.yaml")))
    assert c.flops_forward == 4 * B * D * F
    assert c.flops_backward == 8 * B * D * F
    assert c.flops_total == 12 * B * D * F
    P = 2 * D * F  # the seed: P = DF + FD
    assert c.params == P
    assert sympy.expand(c.flops_total - 6 * P * B) == 0
    assert c.per_param(c.flops_forward) == 2 * B
    assert c.per_param(c.flops_backward) == 4 * B


def test_each_product_costs_2BDF_and_rules_are_the_seed_rules():
    d = symflops.derive(ffn())
    c = costs(d)
    assert [f.flops for f in c.forward] == [2 * B * D * F] * 2
    assert [b.flops for b in c.backward] == [2 * B * D * F] * 4
    # The seed's table, in its order: dW_out = H^T dY, dH = dY W_out^T, dW_in = X^T dH, dX = dH W_in^T.
    assert [str(r.matrix_form) for r in d.rules] == [
        "dW_out = H^T dY", "dH = dY W_out^T", "dW_in = X^T dH", "dX = dH W_in^T"]
    assert [r.statement for r in d.rules] == [
        "dW_out[f,e] = H[b,f] dY[b,e]", "dH[b,f] = dY[b,e] W_out[f,e]",
        "dW_in[d,f] = X[b,d] dH[b,f]", "dX[b,d] = dH[b,f] W_in[d,f]"]


def test_saved_activations_are_X_and_H():
    d = symflops.derive(ffn())
    assert d.saved == ("X", "H")
    assert d.needed_by("X") == ("dW_in",)
    assert d.needed_by("H") == ("dW_out",)
    assert costs(d).activations == sympy.expand(B * (D + F))


def test_seed_memory_table_in_bytes():
    # Seed 000, section 5: params 2 B (bf16), grads 2, Adam m 4, v 4, activations 2 (bf16).
    m = costs(symflops.derive(ffn()), precision="bf16-adam").memory()
    assert m["params"] == 2 * D * F
    assert m["params_bytes"] == 2 * (2 * D * F)
    assert m["grads_bytes"] == 2 * (2 * D * F)
    assert m["optimizer_bytes"] == (4 + 4) * (2 * D * F)
    assert m["activation_bytes"] == sympy.expand(2 * B * (D + F))
    assert m["fixed_bytes"] == 12 * 2 * D * F


def test_first_input_needs_no_gradient_backward_is_6BDF():
    d = symflops.derive(ffn(X={"requires_grad": False}))
    assert costs(d).flops_backward == 6 * B * D * F
    assert "dX" not in {r.grad for r in d.rules}
    assert d.saved == ("X", "H")  # dW_in = X^T dH still reads X


def test_frozen_weight_passes_gradient_but_gets_none():
    d = symflops.derive(ffn(W_in={"role": "frozen"}))
    grads = [r.grad for r in d.rules]
    assert "dW_in" not in grads and "dX" in grads
    assert d.saved == ("H",)  # X is only needed for the weight gradient
    c = costs(d)
    assert c.params == 2 * D * F and c.trainable == D * F
    assert c.memory()["optimizer"] == 2 * D * F  # Adam m and v of W_out only


def test_toy_layer_of_seed_004():
    # 10 tokens, input width 4, output width 3, 12 weights: 240 FLOPs per product, 720 in all.
    layer = symflops.declare("toy", dims={"T": "tokens", "I": "in", "O": "out"},
                             tensors={"X": {"shape": ["T", "I"], "role": "input"},
                                      "W": {"shape": ["I", "O"], "role": "param"}},
                             ops=["Y[t,o] = X[t,i] W[i,o]"])
    c = costs(symflops.derive(layer))
    at = {"T": 10, "I": 4, "O": 3}
    assert number(c.forward[0].flops, at) == 240
    assert [number(b.flops, at) for b in c.backward] == [240, 240]
    assert number(c.flops_total, at) == 720 == 6 * 12 * 10
    assert number(c.params, at) == 12


def test_macs_switch_halves_matmul_counts():
    c = costs(symflops.derive(ffn()), unit="MACs")
    assert c.flops_total == 6 * B * D * F  # one MAC per multiply-add


def test_eval_is_exact_at_seed_scale():
    c = costs(symflops.derive(ffn()))
    at = {"B": 1048576, "D": 4096, "F": 16384}
    assert number(c.flops_total, at) == 12 * 1048576 * 4096 * 16384
    assert isinstance(number(c.flops_total, at), int)
