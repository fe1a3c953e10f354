"""symflops import-hf for Qwen3-Next (``qwen3_next``) and Qwen3.5's text model
(``qwen3_5_text``): gated DeltaNet layers and gated full-attention layers, with
routed experts and a gated shared expert (Qwen3-Next) or a gated MLP (Qwen3.5).

Both families interleave gated DeltaNet layers (linear attention; Yang, Kautz and
Hatamizadeh 2024) with a gated full-attention layer every ``full_attention_interval``
layers.  transformers 5.24 computes the DeltaNet layer with
``torch_chunk_gated_delta_rule`` (chunks of ``Qc = 64``): per chunk two products
over the chunk's pairs (``k_beta k^T`` and ``q k^T``), a unit lower-triangular solve
(``torch.linalg.solve_triangular``, twice), and a loop over the chunks whose step
multiplies the state by a matrix (``v_new = u - w S``, ``S = decay S + k^T v_new``),
declared as one loop op (``symflops/hf/deltanet.py``).

What the oracle counts is derived here by hand, matrix product by matrix product,
and asserted exactly against FlopCounterMode on the meta device at two layers (one
DeltaNet layer, one full-attention layer) with every other size as published
(``deltanet_oracle``); the declaration's counts are then checked against the whole
model with its differences named and derived (``deltanet_difference``).  Letters:
``B`` the batch, ``S`` the positions, ``D`` the width, ``Hk``/``Dk`` the key heads and
their width, ``Hv``/``Dv`` the value heads and theirs, ``K`` the convolution's taps,
``Qc`` the chunk length, ``Nk = S / Qc`` the chunks, ``C = 2 Hk Dk + Hv Dv`` the
convolution's channels (q, k and v).  Each product of m x n by n x p is ``2 m n p``
FLOPs.
"""

import json

import pytest

import symflops
from symflops.core.errors import SymflopsError

from hf_oracle import at_layers, imported, meta_model, symflops_counts
from test_hf_hybrids import hf_parts, symflops_conv

# Qwen/Qwen3-Next-80B-A3B-Instruct config.json (its 48 layers: layer_types unset,
# full_attention_interval 4: three DeltaNet layers, then a full-attention layer)
QWEN3_NEXT_80B = {
    "architectures": ["Qwen3NextForCausalLM"], "attention_bias": False,
    "attention_dropout": 0.0, "bos_token_id": 151643, "decoder_sparse_step": 1,
    "eos_token_id": 151645, "full_attention_interval": 4, "head_dim": 256,
    "hidden_act": "silu", "hidden_size": 2048, "initializer_range": 0.02,
    "intermediate_size": 5120, "linear_conv_kernel_dim": 4, "linear_key_head_dim": 128,
    "linear_num_key_heads": 16, "linear_num_value_heads": 32, "linear_value_head_dim": 128,
    "max_position_embeddings": 262144, "mlp_only_layers": [], "model_type": "qwen3_next",
    "moe_intermediate_size": 512, "norm_topk_prob": True, "num_attention_heads": 16,
    "num_experts": 512, "num_experts_per_tok": 10, "num_hidden_layers": 48,
    "num_key_value_heads": 2, "output_router_logits": False, "partial_rotary_factor": 0.25,
    "rms_norm_eps": 1e-06, "rope_scaling": None, "rope_theta": 10000000,
    "router_aux_loss_coef": 0.001, "shared_expert_intermediate_size": 512,
    "tie_word_embeddings": False, "torch_dtype": "bfloat16",
    "transformers_version": "4.57.0.dev0", "use_cache": True, "use_sliding_window": False,
    "vocab_size": 151936}
# Qwen/Qwen3.5-27B config.json, its text_config (as transcribed in NVIDIA
# Megatron-Bridge's tests of its Qwen3.5 bridge), with the text model's type and class
QWEN3_5_27B = {
    "architectures": ["Qwen3_5ForCausalLM"], "attention_bias": False,
    "attention_dropout": 0.0, "bos_token_id": 248045, "eos_token_id": 248046,
    "full_attention_interval": 4, "hidden_act": "silu", "hidden_size": 5120,
    "initializer_range": 0.02, "intermediate_size": 17408, "linear_conv_kernel_dim": 4,
    "linear_key_head_dim": 128, "linear_num_key_heads": 16, "linear_num_value_heads": 48,
    "linear_value_head_dim": 128, "max_position_embeddings": 262144,
    "model_type": "qwen3_5_text", "num_attention_heads": 24, "num_hidden_layers": 64,
    "num_key_value_heads": 4, "rms_norm_eps": 1e-06,
    "rope_parameters": {"rope_type": "default", "partial_rotary_factor": 0.25,
                        "rope_theta": 10000000},
    "tie_word_embeddings": False, "torch_dtype": "bfloat16", "use_cache": True,
    "vocab_size": 248320}

MIXED = ["linear_attention", "full_attention"]      # two layers, one of each kind
SEQ = 128                                           # two chunks of 64
CHUNK = 64                                          # torch_chunk_gated_delta_rule's


def _sizes(config, seq):
    hk, dk = config["linear_num_key_heads"], config["linear_key_head_dim"]
    hv, dv = config["linear_num_value_heads"], config["linear_value_head_dim"]
    return dict(B=1, S=seq, D=config["hidden_size"], Hk=hk, Dk=dk, Hv=hv, Dv=dv,
                K=config["linear_conv_kernel_dim"], Qc=CHUNK, Nk=seq // CHUNK,
                C=2 * hk * dk + hv * dv)


def deltanet_parameters(config):
    """One DeltaNet layer's parameters (``linear_attn``): the input projections (q, k,
    v, the gate z; beta's b and the decay's a, one per value head), the depthwise
    convolution without bias (C kernels of K taps), dt_bias and A_log (one per value
    head), the gated RMSNorm's gain (Dv, shared by the heads), out_proj."""
    z = _sizes(config, 0)
    d, hv, dv = z["D"], z["Hv"], z["Dv"]
    return (d * (z["C"] + hv * dv) + d * 2 * hv + z["C"] * z["K"] + 2 * hv + dv
            + hv * dv * d)


def deltanet_oracle(config, seq):
    """FlopCounterMode's FLOPs of one DeltaNet layer in a training step (forward and
    backward), by kind of aten op, derived from transformers 5.24's torch path:

    * ``mm``: the projections (``in_proj_qkvz`` and ``in_proj_ba``, or Qwen3.5's four
      slices: the same products; ``out_proj``), each forward, input and weight gradient;
    * ``bmm``: q and k repeated over the ``Hv / Hk`` value heads of a key head, so every
      product runs per value head.  Forward: ``k_beta k^T`` and ``q k^T`` over each
      chunk's Qc x Qc pairs; per chunk of the loop ``w S`` and ``q S`` (Qc x Dk by
      Dk x Dv), ``A v_new`` (Qc x Qc by Qc x Dv), ``k^T v_new`` (Dk x Qc by Qc x Dv;
      the last chunk's is the final state, for the cache).  Backward: both gradients
      of ``A v_new`` in every chunk; of ``q S`` and ``w S`` the operand's gradient in
      every chunk and the state's in all but the first (its state is a constant zero);
      both gradients of ``k^T v_new`` in all but the last (the final state reaches no
      loss); of each triangular solve the matrix's gradient ``-dB X^T`` (Qc x width by
      width x Qc: the solve itself, forward and for ``dB``, is no op FlopCounterMode
      counts); both gradients of ``k_beta k^T`` and ``q k^T``;
    * ``convolution``: ``F.conv1d(padding=K - 1)`` over ``P = S + K - 1`` outputs, C
      groups of one channel: ``2 B C K P``;
    * ``convolution_backward``: the input gradient, grouped, ``2 B C K P``, and the
      weight gradient counted as if ungrouped, ``2 B K P C^2`` (torch 2.13's phantom,
      ``2 B K P (C^2 - C)`` more than the grouped ``2 B K P C``)."""
    z = _sizes(config, seq)
    b, s, d, hv, dk, dv = z["B"], z["S"], z["D"], z["Hv"], z["Dk"], z["Dv"]
    q, nk, c, k = z["Qc"], z["Nk"], z["C"], z["K"]
    mm = 3 * 2 * b * s * d * (c + hv * dv + 2 * hv + hv * dv)
    pairs_k = 2 * b * hv * nk * q * q * dk          # one Qc x Qc product over Dk, all chunks
    state = 2 * b * hv * q * dk * dv                # one chunk's product with the state
    mix = 2 * b * hv * q * q * dv                   # one chunk's A v_new
    forward = 2 * pairs_k + nk * (3 * state + mix)
    loop = nk * 2 * mix + 2 * (nk + nk - 1) * state + (nk - 1) * 2 * state
    solves = 2 * b * hv * nk * q * q * (dk + dv)
    bmm = forward + loop + solves + 2 * 2 * pairs_k
    p = s + k - 1
    conv = 2 * b * c * k * p
    conv_backward = 2 * b * c * k * p + 2 * b * k * p * c * c
    return {"aten.mm": mm, "aten.bmm": bmm, "aten.convolution": conv,
            "aten.convolution_backward": conv_backward}


def hf_deltanet(config, seq):
    """transformers' parameters of layer 0's DeltaNet and FlopCounterMode's FLOPs of
    its training step, by aten op."""
    torch, model = meta_model(config)
    from torch.utils.flop_counter import FlopCounterMode

    params = sum(p.numel() for n, p in model.named_parameters()
                 if n.startswith("model.layers.0.linear_attn."))
    ids = torch.zeros((1, seq), dtype=torch.long, device="meta")
    with FlopCounterMode(display=False) as counter:
        model(input_ids=ids, labels=ids, use_cache=True).loss.backward()
    (layer,) = [v for k, v in counter.get_flop_counts().items()
                if k.endswith("model.layers.0.linear_attn")]
    return params, {str(k): v for k, v in layer.items()}


ORACLE = {
    "Qwen3-Next-80B-A3B-Instruct": at_layers(QWEN3_NEXT_80B, layer_types=MIXED),
    "Qwen3.5-27B": at_layers(QWEN3_5_27B, layer_types=MIXED),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(ORACLE))
def test_the_oracle_counts_the_deltanet_layer_as_derived(name):
    params, flops = hf_deltanet(ORACLE[name], SEQ)
    assert params == deltanet_parameters(ORACLE[name])
    assert flops == deltanet_oracle(ORACLE[name], SEQ)


def test_the_oracle_by_hand_at_qwen3_next():
    """Qwen3-Next-80B-A3B's DeltaNet layer at S = 128 (two chunks of 64): D = 2048,
    16 key heads and 32 value heads of 128, C = 2 x 2048 + 4096 = 8192 channels, 4 taps."""
    got = deltanet_oracle(QWEN3_NEXT_80B, 128)
    # projections: 6 x 128 x 2048 x (12,288 + 64 + 4,096)
    assert got["aten.mm"] == 6 * 128 * 2048 * 16448 == 25_870_467_072
    # forward 134,217,728 + 469,762,048; loop backward 671,088,640; the solves' matrix
    # gradients 134,217,728; the pair products' gradients 268,435,456
    assert got["aten.bmm"] == 1_677_721_600
    assert got["aten.convolution"] == 2 * 8192 * 4 * 131 == 8_585_216
    assert got["aten.convolution_backward"] == 8_585_216 + 2 * 4 * 131 * 8192 ** 2 \
        == 70_338_674_688
    assert deltanet_parameters(QWEN3_NEXT_80B) == \
        2048 * 12288 + 2048 * 64 + 8192 * 4 + 64 + 128 + 4096 * 2048 == 33_718_464


def test_the_grouped_convolution_phantom_of_the_issue():
    """Issue 31's figure: a conv1d of 64 groups (one channel each), 4 taps, over 100
    positions padded by 3 (103 outputs) has 2 x 64 x 4 x 103 = 52,736 forward FLOPs;
    FlopCounterMode in torch 2.13 counts its backward as 3,427,840: the input gradient
    52,736 (grouped) and the weight gradient 2 x 4 x 103 x 64^2 = 3,375,104, as if
    ungrouped, where the grouped one is 52,736: a phantom of 2 x 4 x 103 x (64^2 - 64)."""
    torch = pytest.importorskip("torch")
    from torch.utils.flop_counter import FlopCounterMode

    x = torch.zeros((1, 64, 100), requires_grad=True)
    w = torch.zeros((64, 1, 4), requires_grad=True)
    with FlopCounterMode(display=False) as counter:
        torch.nn.functional.conv1d(x, w, padding=3, groups=64).sum().backward()
    ops = {str(k): v for k, v in counter.get_flop_counts()["Global"].items()}
    assert ops["aten.convolution"] == 2 * 64 * 4 * 103 == 52_736
    assert ops["aten.convolution_backward"] == 52_736 + 2 * 4 * 103 * 64 ** 2 == 3_427_840
    grouped = 2 * 52_736
    assert ops["aten.convolution_backward"] - grouped == 2 * 4 * 103 * (64 ** 2 - 64)


# --- the declaration against the model -----------------------------------------------

MODELS = {
    **ORACLE,
    # layer 0 a DeltaNet layer with the dense MLP (mlp_only_layers), layer 1 attention with
    # the experts; one value head per key head (q k^T the same in both), 2 taps, biases on
    # the attention, half the head rotated, the k weights not renormalised
    "Qwen3-Next varied": at_layers(
        QWEN3_NEXT_80B, layer_types=MIXED, mlp_only_layers=[0], linear_num_value_heads=16,
        linear_conv_kernel_dim=2, attention_bias=True, partial_rotary_factor=0.5,
        norm_topk_prob=False),
    # attention first, a tied head, three value heads per key head
    "Qwen3.5 varied": at_layers(
        QWEN3_5_27B, layer_types=["full_attention", "linear_attention"],
        tie_word_embeddings=True, linear_num_key_heads=8, linear_num_value_heads=24),
    # two DeltaNet layers, the first with the MLP and the second with the experts
    # (decoder_sparse_step 2), then attention with the MLP: two blocks with a chunk loop
    # each, the loop renamed into each (its state and the state one step back with it);
    # this config was refused before the loop was renamed with its block
    "Qwen3-Next two DeltaNet blocks": at_layers(
        QWEN3_NEXT_80B, layers=3, layer_types=["linear_attention"] * 2 + ["full_attention"],
        decoder_sparse_step=2),
}


def deltanet_difference(config, seq):
    """FlopCounterMode's matrix FLOPs minus symflops's, per DeltaNet layer (full square),
    each named:

    * ``qk``: q and k repeated over the Hv / Hk value heads of a key head, so ``q k^T``
      and its two gradients run per value head where the model has them per key head,
      ``3 x 2 B Nk Qc^2 Dk (Hv - Hk)``;
    * ``solves``: the two triangular solves of a chunk (widths Dv and Dk) are no op
      FlopCounterMode counts, but for their matrix's gradient ``-dB X^T`` over the full
      square, ``2 B Hv Nk Qc^2 (Dk + Dv)``, where symflops counts each solve's forward, its
      back substitution and its matrix's gradient over the ``Qc (Qc - 1) / 2`` pairs below
      the diagonal, ``3 B Hv Nk Qc (Qc - 1) (Dk + Dv)``;
    * ``broadcast``: the other way, ``k beta``, ``q exp(cum_decay)`` and ``k exp(g_last -
      cum_decay)`` multiply a key head's q or k by a value head's factor; each gradient
      sums over the letter the other operand lacks (the value heads of a key head, a key
      head's width), a matrix-vector product in symflops's buckets, elementwise in torch
      (after its repeat): ``3 x 2 x 2 B S Hv Dk``;
    * ``loop``: the loop over chunks, as transformers runs it, multiplies the first chunk's
      zero state (``w S`` and ``q S`` forward, the gradients of ``w`` and ``q`` backward)
      and makes the final state (``k^T v_new`` of the last chunk, for the cache), which
      symflops does not count: ``5 x 2 B Hv Qc Dk Dv``."""
    z = _sizes(config, seq)
    b, s, hk, hv, dk, dv = z["B"], z["S"], z["Hk"], z["Hv"], z["Dk"], z["Dv"]
    q, nk = z["Qc"], z["Nk"]
    return {"qk": 3 * 2 * b * nk * q * q * dk * (hv - hk),
            "solves": 2 * b * hv * nk * q * q * (dk + dv) - 3 * b * hv * nk * q * (q - 1)
            * (dk + dv),
            "broadcast": -3 * 2 * 2 * b * s * hv * dk,
            "loop": 5 * 2 * b * hv * q * dk * dv}


def conv_difference(config, seq):
    """Torch's convolution FLOPs minus the model's, per DeltaNet layer: the ``K - 1``
    outputs more of ``F.conv1d(padding=K - 1)`` (forward, dX and dW), and torch 2.13's
    ungrouped count of the grouped weight gradient, ``2 B K (S + K - 1)(C^2 - C)``."""
    z = _sizes(config, seq)
    border = 3 * 2 * z["B"] * z["C"] * z["K"] * (z["K"] - 1)
    phantom = 2 * z["B"] * z["K"] * (seq + z["K"] - 1) * (z["C"] ** 2 - z["C"])
    return border, phantom


@pytest.mark.slow
@pytest.mark.parametrize("name", list(MODELS))
def test_counts_equal_transformers_but_the_named_differences(name):
    config = MODELS[name]
    params, conv, rest = hf_parts(config, SEQ)
    mine_params, mine_flops = symflops_counts(config, SEQ)
    assert mine_params == params
    grouped = symflops_conv(config, SEQ, ("Qcv", "Kcv", "Vcv"))
    z = _sizes(config, SEQ)
    n = config["layer_types"].count("linear_attention")     # DeltaNet layers
    assert grouped == n * 3 * 2 * z["C"] * z["K"] * SEQ      # C channels of K taps, S outputs
    border, phantom = conv_difference(config, SEQ)
    assert conv - n * border - grouped == n * phantom
    assert rest == mine_flops - grouped + n * sum(deltanet_difference(config, SEQ).values())


def test_the_differences_by_hand_at_qwen3_next():
    """Qwen3-Next-80B-A3B's DeltaNet layer at S = 128: two chunks of 64, 16 key heads and
    32 value heads of 128."""
    got = deltanet_difference(QWEN3_NEXT_80B, 128)
    assert got["qk"] == 6 * 2 * 64 * 64 * 128 * 16 == 100_663_296
    # torch 2 x 32 x 2 x 4,096 x 256 = 134,217,728; symflops 3 x 32 x 2 x 64 x 63 x 256
    assert got["solves"] == 134_217_728 - 198_180_864
    assert got["broadcast"] == -6 * 2 * 128 * 32 * 128 == -6_291_456
    assert got["loop"] == 5 * 2 * 32 * 64 * 128 * 128 == 335_544_320
    border, phantom = conv_difference(QWEN3_NEXT_80B, 128)
    assert (border, phantom) == (6 * 8192 * 4 * 3, 2 * 4 * 131 * (8192 ** 2 - 8192))


def test_published_parameter_counts():
    # Qwen3-Next-80B-A3B: 36 DeltaNet layers and 12 attention layers, every one with the
    # experts.  Attention: q_proj 2048 x (2 x 16 x 256) (query and gate), k and v 2048 x
    # 512, o 4096 x 2048, q_norm and k_norm 256 each; experts 512 x 3 x 2048 x 512, the
    # router 512 x 2048, the shared expert 3 x 2048 x 512 and its gate 2048; two norms a
    # layer; the untied embedding and head, the final norm
    d = 2048
    attention = d * 8192 + 2 * d * 512 + 4096 * d + 512
    ffn = 512 * 3 * d * 512 + 512 * d + 3 * d * 512 + d
    total = 36 * (deltanet_parameters(QWEN3_NEXT_80B) + ffn + 2 * d) \
        + 12 * (attention + ffn + 2 * d) + 2 * 151936 * d + d
    assert symflops_counts(QWEN3_NEXT_80B, SEQ)[0] == total == 79_674_391_296
    # Qwen3.5-27B: 48 DeltaNet and 16 attention layers, each with a gated MLP of 17,408
    d = 5120
    attention = d * 2 * 24 * 256 + 2 * d * 1024 + 6144 * d + 512
    total = 48 * (deltanet_parameters(QWEN3_5_27B) + 3 * d * 17408 + 2 * d) \
        + 16 * (attention + 3 * d * 17408 + 2 * d) + 2 * 248320 * d + d
    assert symflops_counts(QWEN3_5_27B, SEQ)[0] == total == 26_895_998_464


def test_layers_as_written():
    nxt = imported(QWEN3_NEXT_80B)
    assert (nxt.dims["L_linear_moe"], nxt.dims["L_full_moe"], nxt.dims["Hk"], nxt.dims["Rv"],
            nxt.dims["Dk"], nxt.dims["Dv"], nxt.dims["Kp"], nxt.dims["Qc"], nxt.dims["E_r"],
            nxt.dims["E_p"], nxt.dims["M"], nxt.dims["k"]) == \
        (36, 12, 16, 2, 128, 128, 3, 64, 64, 192, 512, 10)
    assert nxt.multiple[0] == 64
    text = nxt.text
    # the loop over chunks, one op of three statements
    assert "Nv[b,g,r,c,l,p] = Un[b,g,r,c,l,p] - W[b,g,r,c,l,e] St[b,g,r,c-1,e,p]" in text
    assert ("Oc[b,g,r,c,l,p] = Qd[b,g,r,c,l,e] St[b,g,r,c-1,e,p] + A[b,g,r,c,l,m] "
            "Nv[b,g,r,c,m,p]") in text
    assert ("St[b,g,r,c,e,p] = Gd[b,g,r,c] St[b,g,r,c-1,e,p] + Kd[b,g,r,c,l,e] "
            "Nv[b,g,r,c,l,p]") in text
    # the UT transform's solves; q k^T once per key head, over the whole square here
    assert "Un[b,g,r,c,l,p] = Vb[b,g,r,c,l,p] - T[b,g,r,c,l,m] Un[b,g,r,c,m,p] where m < l" \
        in text
    assert "QK[b,g,c,l,m] = Qv[b,c,l,g,e] Kv[b,c,m,g,e]\n" in text
    # the gated attention and the gated shared expert
    assert "Og[b,s,g,r,e] = sigmoid(Qg[b,s,g,r,e]) * O[b,s,g,r,e]" in text
    assert "Gsh[b,s] Ys[b,s,d]" in text
    exact = imported(QWEN3_NEXT_80B, attention="exact").text
    assert "QK[b,g,c,l,m] = Qv[b,c,l,g,e] Kv[b,c,m,g,e] where m <= l" in exact
    assert "Kk[b,g,r,c,l,m] = Kb[b,g,r,c,l,e] Kv[b,c,m,g,e] where m < l" in exact
    assert "+ A[b,g,r,c,l,m] Nv[b,g,r,c,m,p] where m <= l\n" in exact
    dense = imported(QWEN3_5_27B)
    assert (dense.dims["L_linear_mlp"], dense.dims["L_full_mlp"], dense.dims["Rv"]) == \
        (48, 16, 3)
    assert "M" not in dense.dims and "W_r" not in dense.text


def test_layer_kinds_follow_the_config():
    # full_attention_interval 2: layers 1 and 3 attention; decoder_sparse_step 2 and
    # mlp_only_layers [3]: only layer 1 sparse
    four = imported(at_layers(QWEN3_NEXT_80B, layers=4, full_attention_interval=2,
                              decoder_sparse_step=2, mlp_only_layers=[3]))
    assert {k: v for k, v in four.dims.items() if k.startswith("L_")} == \
        {"L_linear_mlp": 2, "L_full_moe": 1, "L_full_mlp": 1}
    # layer_types wins over the interval, as in transformers
    given = imported(at_layers(QWEN3_NEXT_80B, layers=3, layer_types=["full_attention"] * 3))
    assert given.dims["L"] == 3 and "Hk" not in given.dims and given.multiple is None
    # no experts: every layer dense
    none = imported(at_layers(QWEN3_NEXT_80B, layer_types=MIXED, num_experts=0))
    assert "M" not in none.dims and none.dims["L_linear_mlp"] == 1


def test_two_kinds_of_deltanet_layers_derive():
    """DeltaNet layers with the MLP and with the experts are two blocks with a chunk loop
    each; the loop is renamed into each block with its state (it was an internal error,
    exit 70, before: the state's name was kept apart from its statements).  Their counts
    against transformers: MODELS' "Qwen3-Next two DeltaNet blocks"."""
    from symflops.derive.backward import derive

    for changes in ({"decoder_sparse_step": 2}, {"mlp_only_layers": [0]}):
        config = at_layers(QWEN3_NEXT_80B, layers=3,
                           layer_types=["linear_attention"] * 2 + ["full_attention"], **changes)
        model = imported(config)
        assert {k for k in model.dims if k.startswith("L_linear")} == \
            {"L_linear_mlp", "L_linear_moe"}
        layer = symflops.loads(model.text)
        loops = [k for k, op in enumerate(layer.ops) if op.kind == "loop"]
        states = {layer.ops[k].state for k in loops}
        assert len(loops) == len(states) == 2                 # one state per block
        rules = derive(layer).rules                           # an internal error before
        assert {r.op for r in rules} >= set(loops)            # each loop sends gradients


@pytest.mark.parametrize("config, changes, key", [
    (QWEN3_NEXT_80B, {"output_router_logits": True}, "output_router_logits"),
    (QWEN3_NEXT_80B, {"use_sliding_window": True}, "use_sliding_window"),
    (QWEN3_NEXT_80B, {"num_experts_per_tok": 513}, "num_experts_per_tok"),
    (QWEN3_NEXT_80B, {"mlp_only_layers": [48]}, "mlp_only_layers"),
    (QWEN3_NEXT_80B, {"linear_num_value_heads": 24}, "linear_num_key_heads"),
    (QWEN3_NEXT_80B, {"linear_conv_kernel_dim": 1}, "linear_conv_kernel_dim"),
    (QWEN3_NEXT_80B, {"layer_types": ["linear_attention"] * 47 + ["sliding_attention"]},
     "layer_types"),
    (QWEN3_NEXT_80B, {"partial_rotary_factor": 0.001}, "partial_rotary_factor"),
    (QWEN3_NEXT_80B, {"attn_output_gate": True}, "attn_output_gate"),
    (QWEN3_5_27B, {"attn_output_gate": False}, "attn_output_gate"),
    (QWEN3_5_27B, {"num_experts": 8}, "num_experts"),
    (QWEN3_5_27B, {"hidden_act": "gelu_fast"}, "hidden_act"),
])
def test_refused_naming_the_key(config, changes, key):
    with pytest.raises(SymflopsError, match=key):
        imported({**config, **changes})


def test_published_keys_of_qwen3_5_are_read():
    """Qwen3.5's published text_config also carries the multi-token-prediction layers
    (not built by transformers), the state's dtype and the output gate's flag."""
    more = {**QWEN3_5_27B, "attn_output_gate": True, "mamba_ssm_dtype": "float32",
            "mtp_num_hidden_layers": 1, "mtp_use_dedicated_embeddings": False}
    assert imported(more).text == imported(QWEN3_5_27B).text


def test_the_multimodal_wrapper_is_refused_with_advice():
    wrapper = {"architectures": ["Qwen3_5ForConditionalGeneration"], "model_type": "qwen3_5",
               "text_config": {**QWEN3_5_27B}, "vision_config": {"depth": 27},
               "image_token_id": 248056, "video_token_id": 248057,
               "vision_start_token_id": 248053, "vision_end_token_id": 248054,
               "tie_word_embeddings": False}
    with pytest.raises(SymflopsError) as caught:
        imported(wrapper)
    text = str(caught.value)
    assert "Qwen3.5's multimodal model" in text and '"qwen3_5_text"' in text


@pytest.mark.parametrize("model_type", ["qwen3_5_moe", "qwen3_5_moe_text"])
def test_qwen3_5_moe_is_refused_with_its_reason(model_type):
    with pytest.raises(SymflopsError) as caught:
        imported({**QWEN3_5_27B, "model_type": model_type})
    text = str(caught.value)
    assert f'model_type "{model_type}" is not a family symflops reads' in text
    assert "not read yet" in text and "docs/huggingface.md" in text


def test_another_unknown_family_has_no_reason_attached():
    with pytest.raises(SymflopsError) as caught:
        imported({**QWEN3_NEXT_80B, "model_type": "bert"})
    assert str(caught.value).split(";")[0].endswith('is not a family symflops reads')


@pytest.mark.slow
def test_cli_imports_and_plans_the_published_configs(tmp_path, capsys):
    """import-hf and plan --hf-config on the published configs; a sequence that is not a
    whole number of chunks is refused by plan, naming the chunk, without suggesting
    --attention full-square (the DeltaNet's chunks are there under both counts)."""
    from symflops.cli import main

    for name, config in (("Qwen3-Next-80B-A3B-Instruct", QWEN3_NEXT_80B),
                         ("Qwen3.5-27B", QWEN3_5_27B)):
        folder = tmp_path / name
        folder.mkdir()
        (folder / "config.json").write_text(json.dumps(config))
        out = tmp_path / f"{name}.yaml"
        assert main(["import-hf", str(folder / "config.json"), "-o", str(out)]) == 0
        assert main(["plan", "--hf-config", str(folder / "config.json"), "--seq", "4096",
                     "--tokens", "1e12"]) == 0
        capsys.readouterr()
        assert main(["plan", "--hf-config", str(folder / "config.json"), "--seq", "4000",
                     "--tokens", "1e12"]) == 2
        err = capsys.readouterr().err
        assert "a sequence of 4,000 tokens is not a whole number of the model's chunks of 64" \
            in err
        assert "full-square" not in err


@pytest.mark.slow
def test_the_sheet_states_the_crossing_length(tmp_path):
    """The sheet of Qwen3-Next-80B-A3B (--attention exact) gives the gated DeltaNet's and
    the attention's training FLOPs per token, and the S from which attention costs more.
    Checked against the counts of two one-layer models (one DeltaNet layer, one attention
    layer; the experts, norms, embedding and head the same in both): the attention's cost
    per token is a + b S; the DeltaNet's is a constant and a term in 1/S (its loop does not
    count the first chunk's products with the zero state nor the last chunk's update), so
    their difference per token is x S + y + z / S, solved here from three lengths (multiples
    of the chunk), and the crossing is the positive root of x S^2 + y S + z."""
    from fractions import Fraction

    import sympy

    from symflops.cli import main

    folder = tmp_path / "Qwen3-Next-80B-A3B-Instruct"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(QWEN3_NEXT_80B))
    out = tmp_path / "next.md"
    assert main(["render", "--hf-config", str(folder / "config.json"), "-o", str(out)]) == 0
    text = out.read_text()
    assert "### Layers with a state and attention layers against the sequence length" in text
    assert ("- With a state: the gated DeltaNet of Qwen3-Next layer (gated DeltaNet layers "
            "with routed experts), $") in text
    assert "- Attention: the attention of Qwen3-Next layer (full-attention layers with routed " \
        "experts), $" in text
    assert "and of $1/S$, $" in text

    def per_token_gap(seq):
        one = {kind: symflops_counts(at_layers(QWEN3_NEXT_80B, layers=1, layer_types=[kind]),
                                     seq, attention="exact")[1] for kind in MIXED}
        return Fraction(one["full_attention"] - one["linear_attention"], seq)

    lengths = (1024, 2048, 4096)
    x, y, z = sympy.symbols("x y z")
    solved = sympy.solve([x * n + y + z / sympy.Integer(n) - sympy.Rational(per_token_gap(n))
                          for n in lengths], [x, y, z])
    assert solved[z] != 0 and solved[x] > 0
    s = sympy.Symbol("s", positive=True)
    # the larger root (the smaller, below one chunk, is where the 1/S term dominates)
    root = max(sympy.solve(solved[x] * s ** 2 + solved[y] * s + solved[z], s))
    assert f"the crossing is ${float(root):,.6g}$".replace(",", "{,}") in text
    assert f"so from $S = {int(sympy.floor(root)) + 1:,}$".replace(",", "{,}") in text


def test_decoding_gives_no_cache_of_the_chunks_keys(tmp_path, capsys):
    """A decoded token of a DeltaNet layer reads the layer's state (Hv x Dk x Dv, the
    same at every context), not the keys of its chunks: the causal pairs inside a chunk
    (m <= l) made the cache rule count every key, 147,456 of the 172,032 bytes per
    token it gave Qwen3-Next-80B (36 layers x 16 key heads x 128 x 2 bytes).  The plan
    says the cache is not counted, and why, rather than give that figure."""
    from symflops.cli import main

    path = tmp_path / "config.json"
    path.write_text(json.dumps(QWEN3_NEXT_80B))
    assert main(["plan", "--hf-config", str(path), "--seq", "4096", "--accelerator",
                 "h100-sxm", "--decode-batch", "1", "--json"]) == 0
    decoding = json.loads(capsys.readouterr().out)["inference"]
    assert decoding["kv_cache_bytes_per_token"] is None and decoding["kv_cache_bytes"] is None
    assert decoding["bytes_per_token"] == decoding["weights_bytes_read"]
    assert main(["plan", "--hf-config", str(path), "--seq", "4096", "--accelerator",
                 "h100-sxm", "--decode-batch", "1"]) == 0
    line = next(l for l in capsys.readouterr().out.splitlines() if "KV cache" in l)
    assert "not counted: a loop over chunks" in line and "state" in line
