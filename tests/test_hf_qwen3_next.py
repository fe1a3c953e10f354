"""Qwen3-Next (``qwen3_next``) and Qwen3.5 (``qwen3_5_text``): refused by name, and
their oracle pinned down.

Both families interleave gated DeltaNet layers (linear attention; Yang, Kautz and
Hatamizadeh 2024) with a gated full-attention layer every ``full_attention_interval``
layers.  transformers 5.24 computes the DeltaNet layer with
``torch_chunk_gated_delta_rule`` (chunks of ``Qc = 64``): per chunk two products
over the chunk's pairs (``k_beta k^T`` and ``q k^T``), a unit lower-triangular solve
(``torch.linalg.solve_triangular``, twice), and a loop over the chunks whose step
multiplies the state by a matrix (``v_new = u - w S``, ``S = decay S + k^T v_new``).
The declaration language has the triangular solve (``tests/test_solve.py``) but no
recurrence through a product, so ``import-hf`` refuses both families, naming that
construct, rather than count an approximation
(``test_refused_naming_the_missing_construct``).

What the oracle counts is derived here by hand, matrix product by matrix product,
and asserted exactly against FlopCounterMode on the meta device at two layers (one
DeltaNet layer, one full-attention layer) with every other size as published
(``deltanet_oracle``), so that a declaration of the layer can later be checked
against it with its differences named.  Letters: ``B`` the batch, ``S`` the
positions, ``D`` the width, ``Hk``/``Dk`` the key heads and their width, ``Hv``/``Dv``
the value heads and theirs, ``K`` the convolution's taps, ``Qc`` the chunk length,
``Nk = S / Qc`` the chunks, ``C = 2 Hk Dk + Hv Dv`` the convolution's channels (q, k
and v).  Each product of m x n by n x p is ``2 m n p`` FLOPs.
"""

import pytest

from symflops.core.errors import SymflopsError

from hf_oracle import at_layers, imported, meta_model

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


@pytest.mark.parametrize("config", [QWEN3_NEXT_80B, QWEN3_5_27B,
                                    {**QWEN3_5_27B, "model_type": "qwen3_5"}],
                         ids=["qwen3_next", "qwen3_5_text", "qwen3_5"])
def test_refused_naming_the_missing_construct(config):
    with pytest.raises(SymflopsError) as caught:
        imported(config)
    text = str(caught.value)
    assert f'model_type "{config["model_type"]}" is not a family symflops reads' in text
    assert "recurrence through a product" in text
    assert "docs/huggingface.md" in text


def test_another_unknown_family_has_no_reason_attached():
    with pytest.raises(SymflopsError) as caught:
        imported({**QWEN3_NEXT_80B, "model_type": "bert"})
    assert str(caught.value).split(";")[0].endswith('is not a family symflops reads')
