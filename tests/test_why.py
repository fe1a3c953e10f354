"""The "why" facts and their sentences: each sentence appears exactly when the
engine's facts make it true, and is absent otherwise.

Expected counts are derived by hand in each test (a dense product
``Y[b,f] = X[b,d] W[d,f]`` costs ``2BDF`` and so does each of its gradients;
a bf16 activation is 2 bytes).
"""

from __future__ import annotations

import pytest
import sympy

import symflops
from symflops.count.cost import costs
from symflops.count.facts import layer_facts
from symflops.core.ir import dim_symbol
from symflops.sheets import printing as P
from symflops.sheets.environment import environment
from symflops.sheets.escape import ESCAPES
from symflops.sheets.notation import Math, Substituted
from symflops.sheets.why import why_context

from conftest import ROOT
from symflops.declaration.reader import build_layer, from_python

DERIVATIONS = ROOT / "derivations"

B, D, F, L, S = (dim_symbol(n) for n in "BDFLS")


def _load(path):
    d = symflops.derive(symflops.load(path))
    return d, costs(d)


def _declared(tensors, ops, dims=None, tokens=None):
    data = {"name": "t", "dims": dims or {"B": "batch", "D": "in", "F": "out"},
            "tensors": tensors, "ops": ops}
    if tokens is not None:
        data["tokens"] = tokens
    layer = build_layer(from_python(data), "<python>", "t")
    d = symflops.derive(layer)
    return d, costs(d)


def _why(d, c, fmt="md", at=None):
    layer = d.layer
    poly = Substituted(P.PolyPrinter(tuple(x.name for x in layer.dims)),
                       tuple(layer.substitutions.items()))
    m = Math(poly, frozenset(t.name for t in layer.tensors))
    return why_context(layer, layer_facts(d, c), m, ESCAPES[fmt], c.unit, at)


def _text(w) -> str:
    return "\n".join([*w["products"], w["summary"] or "", *w["tokens"], *w["activations"]])


FFN = {"X": {"shape": ["B", "D"], "role": "input"},
       "W_in": {"shape": ["D", "F"], "role": "param"},
       "W_out": {"shape": ["F", "D"], "role": "param"}}
FFN_OPS = ["H[b,f] = X[b,d] W_in[d,f]", "Y[b,e] = H[b,f] W_out[f,e]"]


# 1. backward = 2 x forward, and when it fails ------------------------------------

def test_ffn_products_are_twice_their_forward():
    d, c = _declared(FFN, FFN_OPS)
    b = layer_facts(d, c).backward
    assert [p.output for p in b.products] == ["H", "Y"]
    for p in b.products:
        assert p.case == "twice" and p.per_forward == 2 and not p.missing
        assert sympy.expand(p.forward - 2 * B * D * F) == 0
        assert sorted(g.grad for g in p.products) == sorted(
            {"H": ["dX", "dW_in"], "Y": ["dH", "dW_out"]}[p.output])
        assert all(sympy.expand(g.flops - 2 * B * D * F) == 0 for g in p.products)
    assert b.per_forward == 2 and b.twice
    w = _why(d, c)
    assert "backward = 2 × forward for each of these ops" in w["products"][0]
    assert w["summary"].startswith("For the whole layer, backward = 2 × forward")
    assert w["tokens"] == [] and w["activations"] == []  # no tokens, no repeated block


def test_first_input_gets_no_gradient_and_the_layer_is_not_twice():
    tensors = dict(FFN, X={"shape": ["B", "D"], "role": "input", "requires_grad": False})
    d, c = _declared(tensors, FFN_OPS)
    b = layer_facts(d, c).backward
    h = b.products[0]
    assert h.case == "one_operand" and h.per_forward == 1
    assert [(g.tensor, g.reason) for g in h.missing] == [("X", "first_input")]
    assert [g.grad for g in h.products] == ["dW_in"]
    # forward 4BDF, backward dW_out + dH + dW_in = 6BDF
    assert b.per_forward == sympy.Rational(3, 2) and not b.twice
    w = _why(d, c)
    text = _text(w)
    assert "first input and needs no gradient" in text
    assert "backward = 2 × forward:" not in text
    assert r"backward = $\tfrac{3}{2}$ × forward" in w["summary"]


def test_an_activation_without_gradient_is_named():
    # X needs no gradient, so neither does H = relu(X): Y = H W yields only dW
    d, c = _declared({"X": {"shape": ["B", "D"], "role": "input", "requires_grad": False},
                      "W": {"shape": ["D", "F"], "role": "param"}},
                     ["H[b,d] = relu(X[b,d])", "Y[b,f] = H[b,d] W[d,f]"])
    (p,) = layer_facts(d, c).backward.products
    assert [(g.tensor, g.reason) for g in p.missing] == [("H", "no_gradient")]
    assert [g.grad for g in p.products] == ["dW"] and p.per_forward == 1
    assert layer_facts(d, c).backward.per_forward == 1
    w = _why(d, c)
    assert any("$H$ needs no gradient" in s for s in w["products"])
    assert r"backward = $1$ × forward" in w["summary"]


def test_frozen_weight_only_input_gradient():
    d, c = _load(DERIVATIONS / "lora.yaml")
    b = layer_facts(d, c).backward
    frozen = [p for p in b.products if p.operands == ("X", "W0")]
    assert len(frozen) == 1
    p = frozen[0]
    assert p.case == "one_operand" and p.per_forward == 1
    assert [(g.tensor, g.reason) for g in p.missing] == [("W0", "frozen")]
    assert [g.grad for g in p.products] == ["dX"]
    # 2BIR + 2BIO + 2BOR forward against 4BIR + 2BIO + 4BOR backward: no constant ratio
    assert b.per_forward is None
    w = _why(d, c)
    assert any("is frozen" in s and "one backward product only" in s for s in w["products"])
    assert "no fixed multiple" in w["summary"] and "not 2 × forward" in w["summary"]


def test_attention_products_of_two_activations_are_still_twice():
    d, c = _load(DERIVATIONS / "mha.yaml")
    b = layer_facts(d, c).backward
    pairs = {p.output: p for p in b.products if not p.weights}
    assert set(pairs) == {"A", "O"}
    assert sorted(g.grad for g in pairs["A"].products) == ["dK", "dQ"]
    assert sorted(g.grad for g in pairs["O"].products) == ["dP", "dV"]
    # A[n,s,t] = Q[s,n,e] K[t,n,e]: 2 N S^2 E, and so is each of dQ, dK
    n, e = dim_symbol("N"), dim_symbol("E")
    assert sympy.expand(pairs["A"].forward - 2 * n * S**2 * e) == 0
    assert all(p.case == "twice" for p in pairs.values())
    w = _why(d, c)
    assert any("multiply two activations and no weight" in s for s in w["products"])
    assert w["summary"].startswith("For the whole layer, backward = 2 × forward")


def test_a_cheaper_backward_product_is_named_with_its_ratio():
    # Y[b] = X[b,d] w[d] costs 2BD; dw[d] = X[b,d] dY[b] too, but dX[b,d] = dY[b] w[d]
    # is an outer product: no matmul-type FLOPs, BD elementwise.
    d, c = _declared({"X": {"shape": ["B", "D"], "role": "input"},
                      "w": {"shape": ["D"], "role": "param"}}, ["Y[b] = X[b,d] w[d]"],
                     dims={"B": "batch", "D": "width"})
    p = layer_facts(d, c).backward.products[0]
    assert p.case == "order" and p.per_forward == 1
    by = {g.grad: g for g in p.products}
    assert by["dX"].flops == 0 and sympy.expand(by["dX"].elementwise - B * D) == 0
    assert by["dX"].per_forward == 0 and by["dw"].per_forward == 1
    w = _why(d, c)
    assert any("cheaper, ratio $0$" in s and "elementwise work" in s for s in w["products"])
    assert "backward = 2 × forward:" not in _text(w)


BLOCK = """
dims: {B: batch, D: width}
tensors:
  X: {shape: [B, D], role: input}
  W: {shape: [D, D], role: param}
ops:
  - Y[b,d] = X[b,e] W[e,d]
"""


def _repeated(tmp_path, first_needs_grad: bool, repeat: str = "L"):
    flag = "" if first_needs_grad else ", requires_grad: false"
    (tmp_path / "block.yaml").write_text(BLOCK)
    (tmp_path / "model.yaml").write_text(f"""
dims: {{L: layers, B: batch, D: width}}
tokens: B
tensors:
  X0: {{shape: [B, D], role: input{flag}}}
ops:
  - include: block.yaml
    repeat: {repeat}
    tensors: {{X: X0, Y: XL}}
""")
    return _load(tmp_path / "model.yaml")


def test_a_gradient_in_fewer_copies_is_named(tmp_path):
    d, c = _repeated(tmp_path, first_needs_grad=False)
    p = layer_facts(d, c).backward.products[0]
    # dW in all L copies, dX in L - 1 of them: (2L - 1) / L
    assert p.case == "copies"
    assert sympy.simplify(p.per_forward - (2 * L - 1) / L) == 0
    w = _why(d, c)
    assert any(r"\frac{2L - 1}{L}" in s and "first copy" in s for s in w["products"])
    d, c = _repeated(tmp_path, first_needs_grad=True)
    assert layer_facts(d, c).backward.products[0].case == "twice"


# 2. weight gradients sum over tokens ------------------------------------------------

def test_weight_gradients_sum_over_the_token_letters():
    d, c = _load(DERIVATIONS / "transformer.yaml")
    sums = {s.grad: s for s in layer_facts(d, c).token_sums}
    assert sums["dW_q"].letters == ("b", "s") and sums["dW_q"].every_token
    assert sums["dW_k"].letters == ("b", "t") and sums["dW_k"].every_token
    # the position table: dW_P[s,d] = sum_b dX0[b,s,d], over b only
    assert sums["dW_P"].letters == ("b",) and not sums["dW_P"].every_token
    w = _why(d, c)
    assert any("$dW_{\\text{q}}$" in s and "all-reduce their weight gradients" in s
               for s in w["tokens"])
    assert any(s.startswith("$dW_{\\text{P}}$ sums over $b$") and "all-reduce" not in s
               for s in w["tokens"])


def test_no_token_sentence_without_tokens_or_token_letters():
    d, c = _declared(FFN, FFN_OPS)  # no tokens declared
    assert layer_facts(d, c).token_sums == () and _why(d, c)["tokens"] == []
    # A weight made of weights: dA and dC sum over r and f, no token letter.
    d, c = _declared({"X": {"shape": ["B", "D"], "role": "input"},
                      "A": {"shape": ["D", "R"], "role": "param"},
                      "C": {"shape": ["R", "F"], "role": "param"}},
                     ["Wm[d,f] = A[d,r] C[r,f]", "Y[b,f] = X[b,d] Wm[d,f]"],
                     dims={"B": "batch", "D": "in", "F": "out", "R": "rank"}, tokens="B")
    assert layer_facts(d, c).token_sums == ()
    assert _why(d, c)["tokens"] == []


# 3. activations per layer x L -----------------------------------------------------------

def test_repeated_block_activations_and_checkpointing(tmp_path):
    d, c = _repeated(tmp_path, first_needs_grad=True)
    (r,) = layer_facts(d, c).repeated
    # one copy saves X (B D elements, 2 bytes each): 2BD; L copies; full recomputation
    # keeps each copy's input, the same X here, and runs Y = X W again: 2BD^2 per copy
    assert sympy.expand(r.one_copy - 2 * B * D) == 0
    assert sympy.expand(r.all_copies - 2 * L * B * D) == 0
    assert sympy.expand(r.total - 2 * L * B * D) == 0 and r.share == 1
    assert sympy.expand(r.recompute_flops - 2 * L * B * D**2) == 0
    w = _why(d, c, at={"L": 4, "B": 8, "D": 16})
    (s,) = w["activations"]
    assert "activation checkpointing exists" in s and "100.0% at" in s


def test_llama_block_share_at_a_configuration():
    d, c = _load(DERIVATIONS / "llama.yaml")
    (r,) = layer_facts(d, c).repeated
    assert r.repeat == L and sympy.expand(r.all_copies - r.one_copy * L) == 0
    assert sympy.expand(r.recompute_bytes - c.memory()["activation_bytes"]) != 0


def test_no_activation_sentence_without_a_repeated_block(tmp_path):
    d, c = _repeated(tmp_path, first_needs_grad=True, repeat="1")
    assert layer_facts(d, c).repeated == () and _why(d, c)["activations"] == []
    d, c = _declared(FFN, FFN_OPS)
    assert layer_facts(d, c).repeated == ()


# the partials -----------------------------------------------------------------------------

@pytest.mark.parametrize("fmt", ["md", "tex"])
def test_partials_render_each_list_and_escape(fmt):
    d, c = _load(DERIVATIONS / "transformer.yaml")
    w = _why(d, c, fmt)
    out = environment(fmt).get_template(f"why.{fmt}.j2").render(why=w)
    for s in (*w["products"], w["summary"], *w["tokens"], *w["activations"]):
        assert s in out
    assert ("decoder\\_block" in out)  # the block's name, escaped in both formats
    empty = environment(fmt).get_template(f"why.{fmt}.j2").render(
        why={"products": [], "summary": None, "tokens": [], "activations": []})
    assert empty.strip() == ""
