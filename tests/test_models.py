"""Whole models: composition, the 6N rule, recomputation, MoE, LoRA, KV cache.

Expected values are written here by hand (the 6N rule, Korthikanti et al.'s
per-layer activation bytes) or are published figures (GPT-2 small's and
Llama-2-7B's parameter counts)."""

from __future__ import annotations

import os
import re

import pytest
import sympy

from symflops.cli import main
from symflops.count.cost import costs
from symflops.derive.backward import derive
from symflops.core.errors import SymflopsError
from symflops.count.evaluate import evaluate
from symflops.declaration.reader import load, loads
from symflops.count.records import Summary
from symflops.count.summary import summary

HERE = os.path.dirname(__file__)
DERIVATIONS = os.path.join(HERE, "..", "derivations")
B, S, D, N, E, F, L, V, G, M, k, c = sympy.symbols("B S D N E F L V G M k c", positive=True,
                                                  integer=True)
I, O, R = sympy.symbols("I O R", positive=True, integer=True)


def _summary(name: str) -> Summary:
    d = derive(load(os.path.join(DERIVATIONS, name + ".yaml")))
    return summary(d, costs(d))


def _zero(e: sympy.Expr) -> bool:
    return sympy.simplify(e) == 0


def test_transformer_is_6n_plus_causal_attention_per_token():
    s = _summary("transformer")
    n_dense = L * (4 * D * N * E + 2 * D * F) + V * D  # by hand: q, k, v, o; MLP; tied unembedding
    assert _zero(s.model.parameters.dense - n_dense)
    per = s.model.per_token.flops.total
    # causal: each position attends to s+1 keys on average (S+1)/2; 2 products x 2 FLOPs x 3 passes
    assert _zero(per - 6 * n_dense - 6 * L * N * E * (S + 1))
    assert _zero(s.model.per_token.beyond_six_n - 6 * L * N * E * (S + 1))


def test_full_square_attention_term_is_12_L_S_h(tmp_path):
    src = open(os.path.join(DERIVATIONS, "decoder_block.yaml")).read()
    (tmp_path / "decoder_block.yaml").write_text(src.replace(" where t <= s", ""))
    (tmp_path / "model.yaml").write_text(open(os.path.join(DERIVATIONS, "transformer.yaml")).read())
    d = derive(load(tmp_path / "model.yaml"))
    s = summary(d, costs(d))
    assert _zero(s.model.per_token.beyond_six_n - 12 * L * S * N * E)
    assert s.model.inference is None  # no causal op: nothing to cache while decoding


def test_gpt2_small_has_124_439_808_parameters():
    s = _summary("transformer")
    at = {"L": 12, "D": 768, "N": 12, "E": 64, "F": 3072, "V": 50257, "S": 1024, "B": 1}
    # 124,439,808 is GPT-2 small with its 1024 x 768 position table and every bias and norm
    assert evaluate(s.model.parameters.total, at) == 124_439_808
    assert evaluate(s.model.parameters.dense, at) == 124_439_808 - 1024 * 768 - 12 * (
        4 * 768 + 3 * 768 + 768 + 3072 + 768) - 2 * 768


def test_llama2_7b_parameters_and_kv_cache():
    s = _summary("llama")
    at = {"L": 32, "D": 4096, "N": 32, "G": 32, "E": 128, "F": 11008, "V": 32000, "S": 4096, "B": 1}
    assert evaluate(s.model.parameters.total, at) == 6_738_415_616  # published Llama-2-7B count
    assert _zero(s.model.inference.cache_elements_per_sequence - 2 * L * S * G * E)
    # bf16: 2 x 32 x 4096 x 128 x 2 bytes per token = 524,288; x 4096 tokens = 2 GiB
    assert evaluate(s.model.inference.cache_bytes_per_sequence, at) == 2 * 1024 ** 3


def test_grouped_query_cache_shrinks_with_kv_heads():
    s = _summary("llama")
    assert _zero(sympy.diff(s.model.inference.cache_elements_per_sequence, G) - 2 * L * S * E)
    assert _zero(_summary("transformer").model.inference.cache_elements_per_sequence
                 - 2 * L * S * N * E)


def test_full_recomputation_executes_8n_for_a_dense_block(tmp_path):
    (tmp_path / "mlp.yaml").write_text(
        "dims: {T: tokens, D: width, F: hidden}\ntokens: T\n"
        "tensors:\n  X: {shape: [T, D], role: input}\n  W1: {shape: [D, F], role: param}\n"
        "  W2: {shape: [F, D], role: param}\n"
        "ops:\n  - H[t,f] = X[t,d] W1[d,f]\n  - Y[t,e] = H[t,f] W2[f,e]\n")
    (tmp_path / "net.yaml").write_text(
        "dims: {T: tokens, D: width, F: hidden, L: layers}\ntokens: T\n"
        "tensors:\n  X0: {shape: [T, D], role: input}\n"
        "ops:\n  - include: mlp.yaml\n    repeat: L\n    tensors: {X: X0, Y: Z}\n")
    d = derive(load(tmp_path / "net.yaml"))
    s = summary(d, costs(d))
    T = sympy.Symbol("T", positive=True, integer=True)
    n = 2 * D * F * L
    assert _zero(s.model.parameters.dense - n)
    assert _zero(s.model.per_token.flops.total - 6 * n)
    full = s.model.recompute.policies["full"]
    assert _zero(full.flops_executed / T - 8 * n)
    # each copy keeps its input only: L x T x D, against T(D + F) per copy without recomputation
    assert _zero(full.activations - L * T * D)
    assert _zero(s.model.recompute.policies["none"].activations - L * T * (D + F))


def test_block_activation_bytes_match_korthikanti():
    """Korthikanti et al. (2022), eq. 1: s b h (34 + 5 a s / h) bytes per layer with
    16-bit activations and 1-byte masks; h = N E = D, F = 4D.  Our count adds the
    two LayerNorms' saved reciprocal standard deviations (2 x 2 B S bytes), which
    they leave out."""
    block = _summary("transformer").model.blocks[0]
    got = block.activation_bytes.subs({F: 4 * D, E: D / N})
    assert _zero(got - (34 * S * B * D + 5 * N * S ** 2 * B + 4 * B * S))
    assert {"P", "mask_Pd", "Pd"} <= {t.tensor for t in block.saved}


def test_selective_recomputation_drops_the_quadratic_terms():
    s = _summary("transformer")
    sel = s.model.recompute.policies["selective"]
    assert sympy.degree(sympy.expand(sel.activation_bytes), S) == 1
    none = s.model.recompute.policies["none"]
    assert _zero(none.activation_bytes - sel.activation_bytes - 5 * B * L * N * S ** 2)


def test_moe_flops_scale_with_k_and_parameters_with_experts():
    s = _summary("moe")
    per = s.model.per_token.flops.total
    # expert work: 3 matrices x 6 FLOPs x D F per routed copy, times the capacity factor;
    # the combine Y = sum_j Gt[j] Ye[...]: 2D forward and 2D for dGt (sums over d); its
    # dYe = Gt dY is a scatter of products (no sum), elementwise work, not counted here.
    assert _zero(sympy.diff(per, k) - L * (18 * D * F * c + 4 * D))
    assert _zero(sympy.diff(per, M) - 6 * D * L)  # only the router grows with the experts
    assert _zero(sympy.diff(s.model.parameters.total, M) - L * (3 * D * F + D))
    assert _zero(s.model.parameters.active_dense.subs(c, 1)
                 - (L * (2 * D * E * G + 2 * D * E * N + 3 * D * F * k + D * M) + D * V))


def test_lora_frozen_weight_has_no_gradient_rule_and_no_optimizer_state():
    d = derive(load(os.path.join(DERIVATIONS, "lora.yaml")))
    assert "W0" not in {r.wrt for r in d.rules}
    assert "X" in {r.wrt for r in d.rules}  # the input gradient still flows through W0
    s = summary(d, costs(d))
    assert _zero(s.memory.optimizer - 2 * R * (I + O))
    # by hand: forward 2IO + 2R(I+O); backward dX through W0 2IO, adapters 4R(I+O)
    assert _zero(s.model.per_token.flops.total - (4 * I * O + 6 * R * (I + O)))
    assert _zero(s.model.per_token.beyond_six_n + 2 * I * O)


def test_repeat_counts_the_first_copy_input_gradient_once_less(tmp_path):
    (tmp_path / "blk.yaml").write_text(
        "dims: {T: tokens, D: width}\n"
        "tensors:\n  X: {shape: [T, D], role: input}\n  W: {shape: [D, D], role: param}\n"
        "ops:\n  - Y[t,e] = X[t,d] W[d,e]\n")
    (tmp_path / "net.yaml").write_text(
        "dims: {T: tokens, D: width, L: layers}\n"
        "tensors:\n  X0: {shape: [T, D], role: input, requires_grad: false}\n"
        "ops:\n  - include: blk.yaml\n    repeat: L\n    tensors: {X: X0, Y: Z}\n")
    d = derive(load(tmp_path / "net.yaml"))
    T = sympy.Symbol("T", positive=True, integer=True)
    # forward 2TD^2 L; dW in every copy, dX in all but the first: (2L + 2(L - 1)) T D^2
    assert _zero(costs(d).flops_total - (2 * L + 2 * L + 2 * (L - 1)) * T * D ** 2)


@pytest.mark.parametrize("extra, ops, fragment", [
    ("", "  - include: nowhere.yaml\n", "cannot include"),
    ("", "  - include: net.yaml\n", "include each other"),
    ("", "  - include: blk.yaml\n    tensor: {X: X0}\n", "unknown key 'tensor'"),
    ("", "  - include: blk.yaml\n    tensors: {Q: X0}\n", "has no tensor 'Q'"),
    ("", "  - include: blk.yaml\n    tensors: {X: X0, W: X0}\n", "to two of the block's"),
    ("  W: {shape: [D, D], role: param}\n", "  - include: blk.yaml\n    tensors: {X: X0}\n",
     "clashes"),
    ("", "  - include: blk.yaml\n    dims: {T: 2*T}\n    tensors: {X: X0}\n", "shape"),
    ("", "  - include: blk.yaml\n    repeat: L\n    dims: {D: 2*D}\n    tensors: {X: X0}\n",
     "shape"),
])
def test_composition_errors_point_at_the_include(tmp_path, capsys, extra, ops, fragment):
    (tmp_path / "blk.yaml").write_text(
        "dims: {T: tokens, D: width}\n"
        "tensors:\n  X: {shape: [T, D], role: input}\n  W: {shape: [D, D], role: param}\n"
        "ops:\n  - Y[t,e] = X[t,d] W[d,e]\n")
    (tmp_path / "net.yaml").write_text(
        "dims: {T: tokens, D: width, L: layers}\n"
        "tensors:\n  X0: {shape: [T, D], role: input}\n" + extra + "ops:\n" + ops)
    assert main(["derive", str(tmp_path / "net.yaml")]) == 2
    err = capsys.readouterr().err
    assert fragment in err and "Traceback" not in err
    assert re.search(r"net\.yaml:\d+:\d+: error", err)


# --- issue 14 item 4: active parameters and the bytes a decoded token reads ----------

MIXTRAL = {"L": 32, "D": 4096, "F": 14336, "M": 8, "k": 2, "V": 32000, "N": 32, "G": 8,
           "E": 128, "B": 1, "S": 4096}


def _mixtral_by_hand() -> dict[str, int]:
    """Mixtral-8x7B counted by hand. Per layer: attention q and o (D x N E each), k and v
    (D x G E each), the router (D x M), each expert's three SwiGLU matrices (3 D F), two
    RMSNorm gains (2 D); then the final gain, the untied unembedding (D x V) and the
    embedding table (V x D)."""
    L, D, F, M, k, V, N, G, E = (MIXTRAL[x] for x in "LDFMkVNGE")
    attention, router, expert, gains = 2 * D * N * E + 2 * D * G * E, D * M, 3 * D * F, 2 * D
    total = L * (attention + router + M * expert + gains) + D + D * V + V * D
    # a token's products read the attention weights, the router, its k experts and the
    # unembedding once each: the N of 6N
    dense = L * (attention + router + k * expert) + D * V
    # the gains are read whole; the lookup reads one row (D) of the embedding table
    read = dense + L * gains + D + D
    return {"total": total, "active_dense": dense, "active": dense + L * gains + D + V * D,
            "read": read}


def test_mixtral_active_parameters_leave_out_the_capacity_factor():
    hand = _mixtral_by_hand()
    assert hand["total"] == 46_702_792_704               # published: 46.7e9
    assert round(hand["active"], -8) == 12_900_000_000   # published: 12.9e9 active
    s = _summary("moe")
    for capacity in (1, 2, 3):                           # padding slots are not parameters
        par = evaluate(s.model.parameters, {**MIXTRAL, "c": capacity})
        assert (par.total, par.active_dense, par.active, par.read_per_token) == \
            (hand["total"], hand["active_dense"], hand["active"], hand["read"])
    assert c not in s.model.parameters.active_dense.free_symbols
    assert c not in s.model.parameters.read_per_token.free_symbols


def test_mixtral_decode_bytes_read_k_experts_and_one_embedding_row():
    hand = _mixtral_by_hand()
    # bf16: 2 bytes per weight read; the cache: K and V of every layer, G E values each,
    # at 4096 positions, 2 bytes: 2 x 32 x 1024 x 4096 x 2 = 536,870,912 bytes
    cache = 2 * 32 * 8 * 128 * 4096 * 2
    s = _summary("moe")
    inf = evaluate(s.model.inference, {**MIXTRAL, "c": 2})
    assert inf.weights_bytes == 2 * hand["total"]      # stored: every expert
    assert inf.weights_bytes_read == 2 * hand["read"]  # read: the k active experts
    assert inf.bytes_per_decoded_token == 2 * hand["read"] + cache == 26_034_585_600


def test_dense_models_read_one_row_of_each_table_per_token():
    # Llama-2-7B: every weight once, but one row (D) of the V x D embedding table
    s = _summary("llama")
    at = {"L": 32, "D": 4096, "N": 32, "G": 32, "E": 128, "F": 11008, "V": 32000, "S": 4096,
          "B": 1}
    par = evaluate(s.model.parameters, at)
    assert par.active == par.total == 6_738_415_616
    assert par.read_per_token == 6_738_415_616 - 32000 * 4096 + 4096
    # GPT-2 small: the tied table is read whole by the unembedding and one row of it by the
    # lookup; one row of the 1024 x 768 position table
    s = _summary("transformer")
    at = {"L": 12, "D": 768, "N": 12, "E": 64, "F": 3072, "V": 50257, "S": 1024, "B": 1}
    par = evaluate(s.model.parameters, at)
    assert par.active == par.total == 124_439_808
    assert par.read_per_token == 124_439_808 - 1024 * 768 + 768 + 768


DORA_LIKE = """
name: dora_like
title: a DoRA-like layer (weight-decomposed low-rank adaptation)
dims: {B: tokens, I: input width, O: output width, R: adapter rank}
tokens: B
tensors:
  X: {shape: [B, I], role: input}
  W0: {shape: [I, O], role: frozen, description: pretrained weight}
  A: {shape: [I, R], role: param}
  Bu: {shape: [R, O], role: param}
  m: {shape: [O], role: param, description: magnitude of each column}
ops:
  - Wd[i,o] = W0[i,o] + A[i,r] Bu[r,o]
  - Wn[i,o] = rmsnorm_i(Wd[i,o]) * m[o]
  - Y[b,o] = X[b,i] Wn[i,o]
"""


def test_dora_like_active_dense_is_a_parameter_count():
    """The direction of W0 + A Bu is normalised over the input dim i, then scaled by the
    magnitudes m: A and Bu take part in a product over I, R, O that does not scale with
    the tokens. It is computed once per pass and every token's row Y[b,:] reads all of
    the merged weight Wn, so a token uses each parameter once. By hand: the dense
    parameters (operands of a product that sums over an index with another tensor) are
    A and Bu, I R + R O; the total adds W0 (I O) and m (O)."""
    d = derive(loads(DORA_LIKE, "dora_like.yaml"))
    par = summary(d, costs(d)).model.parameters
    assert _zero(par.active_dense - (I * R + R * O))
    assert _zero(par.active - (I * O + I * R + R * O + O))
    assert _zero(par.read_per_token - (I * O + I * R + R * O + O))
    assert B not in par.active_dense.free_symbols
