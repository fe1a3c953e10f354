"""symflops import-hf for the hybrids: Granite 4.0 (``granitemoehybrid``: Mamba-2
layers and attention layers, with routed experts and a shared MLP) and Jamba
(``jamba``: Mamba layers and attention layers, routed experts every other layer;
its differences at ``jamba_difference``).

The oracle is transformers 5.24 on the meta device (its torch path: no
``mamba_ssm`` or ``causal_conv1d`` kernel is installed), parameters to the
integer and FlopCounterMode's training FLOPs at two layers (one Mamba-2, one
attention) with every other size as published.  symflops counts the model's
definition; the torch path runs four things otherwise, each derived here by
hand and asserted exactly (``_torch_minus_model``):

1. the convolution: ``F.conv1d(..., padding=Kc - 1)`` pads both sides and keeps
   the first S of its ``S + Kc - 1`` outputs, so it runs ``Kc - 1`` outputs more
   (forward, input gradient and weight gradient each); and torch 2.13's
   FlopCounterMode counts the weight gradient of a grouped convolution as if it
   were ungrouped (``test_buckets.py``'s phantom, ``2 B Cin Cout K P (G^2 - G)``
   with one channel in and out per group: ``2 B K P (C^2 - C)`` for the ``C``
   channels of x, B and C, ``P = S + Kc - 1``);
2. ``C B``: B and C are repeated over the ``Rm`` heads of a group
   (``repeat_interleave``) before the einsum, so the product (and its two
   gradients) runs once per head where the model has one per group:
   ``3 x 2 B Nk Qc^2 Nm (Hm - Gm)`` (full square);
3. the recurrence over chunks runs over ``Nk + 1`` chunks (a zero initial
   state first; the last output is the final state, for the cache):
   ``3 x 2 B Hm Ph Nm ((Nk + 1)^2 - Nk^2)``;
4. the other way: ``B decay`` multiplies the group's B by each head's decay;
   torch repeats B first, so the product and its gradients are elementwise
   there, where symflops counts the gradients of the shared B (a sum over the
   heads) and of the decay (a sum over the state) as matrix-vector products,
   ``2 x 2 B S Hm Nm``, in ``flops`` (README *Conventions*, *Which bucket*).
"""

import json

import pytest

from symflops.core.errors import SymflopsError

from hf_oracle import at_layers, imported, meta_model, symflops_counts

# ibm-granite/granite-4.0-h-tiny config.json (its 40 layer types: 5 Mamba, attention, 9
# Mamba, attention, 9 Mamba, attention, 9 Mamba, attention, 4 Mamba).
TINY_TYPES = (["mamba"] * 5 + ["attention"] + ["mamba"] * 9 + ["attention"] + ["mamba"] * 9
              + ["attention"] + ["mamba"] * 9 + ["attention"] + ["mamba"] * 4)
GRANITE_H_TINY = {
    "architectures": ["GraniteMoeHybridForCausalLM"], "attention_bias": False,
    "attention_dropout": 0.0, "attention_multiplier": 0.0078125, "bos_token_id": 100257,
    "embedding_multiplier": 12, "eos_token_id": 100257, "hidden_act": "silu",
    "hidden_size": 1536, "init_method": "mup", "initializer_range": 0.1,
    "intermediate_size": 512, "layer_types": TINY_TYPES, "logits_scaling": 6,
    "mamba_chunk_size": 256, "mamba_conv_bias": True, "mamba_d_conv": 4, "mamba_d_head": 64,
    "mamba_d_state": 128, "mamba_expand": 2, "mamba_n_groups": 1, "mamba_n_heads": 48,
    "mamba_proj_bias": False, "max_position_embeddings": 131072,
    "model_type": "granitemoehybrid", "normalization_function": "rmsnorm",
    "num_attention_heads": 12, "num_experts_per_tok": 6, "num_hidden_layers": 40,
    "num_key_value_heads": 4, "num_local_experts": 64, "output_router_logits": False,
    "pad_token_id": 100256, "position_embedding_type": "nope", "residual_multiplier": 0.22,
    "rms_norm_eps": 1e-05, "rope_scaling": None, "rope_theta": 10000,
    "router_aux_loss_coef": 0.0, "shared_intermediate_size": 1024,
    "tie_word_embeddings": True, "torch_dtype": "bfloat16", "transformers_version": "4.56.0",
    "use_cache": True, "vocab_size": 100352}
# ibm-granite/granite-4.0-h-350m config.json: no routed experts, the shared MLP alone
H350M_TYPES = (["mamba"] * 10 + ["attention"] + ["mamba"] * 2 + ["attention"] + ["mamba"] * 3
               + ["attention"] + ["mamba"] * 9 + ["attention"] + ["mamba"] * 4)
GRANITE_H_350M = {
    "architectures": ["GraniteMoeHybridForCausalLM"], "attention_bias": False,
    "attention_multiplier": 0.015625, "embedding_multiplier": 12, "eos_token_id": 100257,
    "hidden_size": 768, "intermediate_size": 2048, "logits_scaling": 3,
    "layer_types": H350M_TYPES, "mamba_conv_bias": True, "mamba_d_conv": 4, "mamba_d_head": 32,
    "mamba_d_state": 128, "mamba_n_groups": 1, "mamba_n_heads": 48, "mamba_proj_bias": False,
    "max_position_embeddings": 32768, "model_type": "granitemoehybrid",
    "num_attention_heads": 12, "num_experts_per_tok": 0, "num_hidden_layers": 32,
    "num_key_value_heads": 4, "num_local_experts": 0, "position_embedding_type": "nope",
    "residual_multiplier": 0.246, "rms_norm_eps": 1e-05, "rope_theta": 10000,
    "shared_intermediate_size": 2048, "tie_word_embeddings": True, "vocab_size": 100352}

MIXED = ["mamba", "attention"]       # two layers, one of each kind
SEQ = 512                            # two chunks of 256
ORACLE = {
    "granite-4.0-h-tiny": at_layers(GRANITE_H_TINY, layer_types=MIXED),
    "granite-4.0-h-350m": at_layers(GRANITE_H_350M, layer_types=MIXED),
    # two groups, 8 taps, chunks of 128 (four), biases on the projections but not the
    # convolution, rotary attention with biases
    "granite-4.0-h-tiny varied": at_layers(
        GRANITE_H_TINY, layer_types=MIXED, mamba_n_groups=2, mamba_d_conv=8,
        mamba_chunk_size=128, mamba_conv_bias=False, mamba_proj_bias=True,
        position_embedding_type="rope", attention_bias=True),
}


def hf_parts(config, seq):
    """transformers' parameters and FlopCounterMode's training FLOPs, split into the
    convolutions' (forward and backward) and the rest (the matrix products)."""
    torch, model = meta_model(config)
    from torch.utils.flop_counter import FlopCounterMode

    ids = torch.zeros((1, seq), dtype=torch.long, device="meta")
    with FlopCounterMode(display=False) as counter:
        model(input_ids=ids, labels=ids, use_cache=True).loss.backward()
    ops = {str(k): v for k, v in counter.get_flop_counts()["Global"].items()}
    conv = sum(v for k, v in ops.items() if "convolution" in k)
    return (sum(p.numel() for p in model.parameters()), conv,
            counter.get_total_flops() - conv)


def symflops_conv(config, seq, convs=("Xcv", "Bcv", "Ccv")):
    """symflops's FLOPs of the Mamba layers' convolutions (forward and both
    gradients), grouped: each output of each channel reads Kp + 1 taps."""
    import sympy
    from symflops.count.cost import costs
    from symflops.count.evaluate import number
    from symflops.derive.backward import derive
    from symflops.planner.model import imported_layer

    im = imported(config)
    d = derive(imported_layer(im))
    c = costs(d, choice="minimum")
    # the second block's tensors are renamed with a suffix (Xcv_1, Xcv_a)
    ops = [i for i, op in enumerate(d.layer.ops) if op.output.split("_")[0] in convs]
    total = sum(c.forward[i].flops for i in ops) + sum(
        oc.flops for r, oc in zip(d.rules, c.backward) if r.op in ops)
    at = {k: sympy.Integer(v) for k, v in {**im.dims, "B": 1, "S": seq}.items()}
    return number(total, at)


def _sizes(config, seq, batch=1):
    h, p, n = config["mamba_n_heads"], config["mamba_d_head"], config["mamba_d_state"]
    g, k, q = config["mamba_n_groups"], config["mamba_d_conv"], config["mamba_chunk_size"]
    return dict(B=batch, S=seq, H=h, P=p, N=n, G=g, K=k, Q=q, Nk=seq // q,
                C=h * p + 2 * g * n)     # the convolution's channels: x, B and C


def conv_difference(config, seq):
    """Torch's convolution FLOPs minus the model's, per Mamba layer: the Kc - 1 outputs
    more (forward, dX, dW), and the phantom of the grouped weight gradient."""
    z = _sizes(config, seq)
    border = 3 * 2 * z["B"] * z["C"] * z["K"] * (z["K"] - 1)
    outputs = z["S"] + z["K"] - 1
    phantom = 2 * z["B"] * z["K"] * outputs * (z["C"] ** 2 - z["C"])
    return border, phantom


def ssd_difference(config, seq):
    """Torch's SSD products minus the model's (full square), per Mamba layer."""
    z = _sizes(config, seq)
    per_head_cb = 3 * 2 * z["B"] * z["Nk"] * z["Q"] ** 2 * z["N"] * (z["H"] - z["G"])
    initial_chunk = 3 * 2 * z["B"] * z["H"] * z["P"] * z["N"] * ((z["Nk"] + 1) ** 2
                                                                 - z["Nk"] ** 2)
    decay_matvec = 2 * 2 * z["B"] * z["S"] * z["H"] * z["N"]
    return per_head_cb + initial_chunk - decay_matvec


@pytest.mark.slow
@pytest.mark.parametrize("name", list(ORACLE))
def test_counts_equal_transformers_but_the_named_differences(name):
    config = {"mamba_chunk_size": 256, **ORACLE[name]}
    params, conv, rest = hf_parts(config, SEQ)
    mine_params, mine_flops = symflops_counts(config, SEQ)
    assert mine_params == params
    grouped = symflops_conv(config, SEQ)
    # the grouped count: 3 x 2 B C Kc S (forward, dX, dW), C channels of Kc taps
    z = _sizes(config, SEQ)
    assert grouped == 3 * 2 * z["C"] * z["K"] * SEQ
    border, phantom = conv_difference(config, SEQ)
    ungrouped = conv - border          # FlopCounterMode's, at the model's S outputs
    assert ungrouped - grouped == phantom
    assert rest == mine_flops - grouped + ssd_difference(config, SEQ)


def test_the_phantom_by_hand_at_granite_h_tiny():
    """One Mamba layer of granite-4.0-h-tiny at S = 512: 3,328 channels (3,072 of x,
    128 each of B and C) of 4 taps, 515 outputs in torch's padded convolution."""
    border, phantom = conv_difference({**GRANITE_H_TINY}, 512)
    assert border == 3 * 2 * 3328 * 4 * 3 == 239_616
    assert phantom == 2 * 4 * 515 * (3328 * 3328 - 3328) == 45_617_694_720


def test_published_parameter_count():
    # granite-4.0-h-tiny (7B total): 36 Mamba-2 layers: in_proj 1536 x (2 x 3072 + 2 x 128
    # + 48), conv1d 3328 x 4 and its bias, dt_bias, A_log, D (48 each), the gated norm
    # (3072), out_proj 3072 x 1536; 4 attention layers: q and o 1536 x 1536, k and v
    # 1536 x 512; every layer: 64 experts of 3 x 1536 x 512, the router (64 x 1536), the
    # shared MLP 3 x 1536 x 1024, two norms; the tied embedding and the final norm
    d = 1536
    mamba = d * (2 * 3072 + 2 * 128 + 48) + 3328 * 4 + 3328 + 3 * 48 + 3072 + 3072 * d
    attention = 2 * d * d + 2 * d * 512
    ffn = 64 * 3 * d * 512 + 64 * d + 3 * d * 1024 + 2 * d
    total = 36 * (mamba + ffn) + 4 * (attention + ffn) + 100352 * d + d
    assert symflops_counts(GRANITE_H_TINY)[0] == total == 6_939_037_248


def test_layers_as_written():
    tiny = imported(GRANITE_H_TINY)
    assert (tiny.dims["L_mamba"], tiny.dims["L_attention"], tiny.dims["M"], tiny.dims["k"],
            tiny.dims["Gm"], tiny.dims["Rm"], tiny.dims["Ph"], tiny.dims["Nm"],
            tiny.dims["Kp"], tiny.dims["Qc"]) == (36, 4, 64, 6, 1, 48, 64, 128, 3, 256)
    assert tiny.multiple == (256, "mamba_chunk_size")
    assert "Xv[b,c,l,g,r,p] = Xd[b,Qc*c+l,g,r,p]" in tiny.text
    assert "CB[b,c,l,m,g] = Cv[b,c,l,g,n] Bv[b,c,m,g,n]\n" in tiny.text     # full square
    exact = imported(GRANITE_H_TINY, attention="exact")
    assert "CB[b,c,l,m,g] = Cv[b,c,l,g,n] Bv[b,c,m,g,n] where m <= l" in exact.text
    assert "Hin[b,z,g,r,p,n] = Dc[b,g,r,z,c] St[b,c,g,r,p,n] where c < z" in exact.text
    dense = imported(GRANITE_H_350M)
    assert "M" not in dense.dims and "W_r" not in dense.text
    assert (dense.dims["L_mamba"], dense.dims["L_attention"]) == (28, 4)


def test_exact_minus_full_square_is_the_masked_pairs():
    """One Mamba layer, S = 512 (Nk = 2 chunks of Qc = 256): the exact count drops the
    pairs m > l of each chunk from C B (over Nm) and from CBL (x dt) (over Ph), and
    the pairs c >= z of chunks from the recurrence (over Ph Nm), each a product and its
    two gradients (3 x 2 per multiply-add)."""
    one = at_layers(GRANITE_H_TINY, layers=1, layer_types=["mamba"])
    b, s, h, p, n, q, nk = 1, 512, 48, 64, 128, 256, 2
    above = nk * q * (q - 1) // 2            # pairs m > l, in all chunks
    later = nk * (nk + 1) // 2               # pairs c >= z
    cb = 6 * b * above * 1 * n               # C B: once per group (Gm = 1)
    yd = 6 * b * above * h * p
    hin = 6 * b * later * h * p * n
    full = symflops_counts(one, s)[1]
    exact = symflops_counts(one, s, attention="exact")[1]
    assert full - exact == cb + yd + hin


@pytest.mark.slow
def test_a_sequence_not_a_multiple_of_the_chunk_is_refused(tmp_path, capsys):
    from symflops.cli import main

    config = at_layers(GRANITE_H_TINY, layer_types=MIXED)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    out = tmp_path / "tiny.yaml"
    assert main(["import-hf", str(path), "-o", str(out)]) == 0
    dims = [f"{k}={v}" for k, v in imported(config).dims.items() if k != "S"]
    assert main(["eval", str(out), *dims, "S=512"]) == 0
    capsys.readouterr()
    assert main(["eval", str(out), *dims, "S=500"]) == 2
    assert "Nk = S/Qc is 125/64" in capsys.readouterr().err


@pytest.mark.slow
def test_plan_refuses_a_length_not_a_multiple_of_the_chunk_with_the_right_hint(tmp_path, capsys):
    """The SSD's chunks are there under both attention counts, so the refusal points to a
    multiple of the chunk only (it once also suggested --attention full-square, which
    helps Llama 4's chunked attention, not Mamba-2)."""
    from symflops.cli import main

    path = tmp_path / "config.json"
    path.write_text(json.dumps(at_layers(GRANITE_H_TINY, layer_types=MIXED)))
    for attention in ("exact", "full-square"):
        assert main(["plan", "--hf-config", str(path), "--seq", "500", "--tokens", "1e9",
                     "--attention", attention]) == 2
        err = capsys.readouterr().err
        assert "a sequence of 500 tokens is not a whole number of the model's chunks of 256 " \
               "positions (mamba_chunk_size)" in err
        assert "a multiple of 256" in err and "full-square" not in err


@pytest.mark.parametrize("changes, key", [
    ({"time_step_limit": [0.0, 10.0]}, "time_step_limit"),
    ({"normalization_function": "layernorm"}, "normalization_function"),
    ({"attention_dropout": 0.1}, "attention_dropout"),
    ({"mamba_d_head": 32}, "mamba_d_head"),
    ({"mamba_n_groups": 5}, "mamba_n_groups"),
    ({"mamba_d_conv": 1}, "mamba_d_conv"),
    ({"output_router_logits": True}, "output_router_logits"),
    ({"position_embedding_type": "alibi"}, "position_embedding_type"),
    ({"layer_types": ["mamba", "moe"]}, "layer_types"),
    ({"layer_types": ["mamba", "attention"], "layers_block_type": ["mamba", "mamba"]},
     "layers_block_type"),
    ({"num_experts_per_tok": 65}, "num_experts_per_tok"),
])
def test_refused_naming_the_key(changes, key):
    with pytest.raises(SymflopsError, match=key):
        imported(at_layers(GRANITE_H_TINY, **{"layer_types": MIXED, **changes}))


def test_infinite_time_step_limit_and_absent_keys_are_read():
    base = symflops_counts(at_layers(GRANITE_H_TINY, layer_types=MIXED), 256)
    same = at_layers(GRANITE_H_TINY, layer_types=MIXED, time_step_limit=[0.0, float("inf")])
    assert symflops_counts(same, 256) == base


@pytest.mark.slow
def test_the_sheet_states_the_crossing_length(tmp_path):
    """The sheet of granite-4.0-h-tiny (--attention exact) gives each kind of layer's
    mixer's training FLOPs per token, linear in S, and the S from which attention costs
    more than the Mamba-2 mixer.  Checked against the counts of two one-layer models (one
    attention layer, one Mamba-2 layer; the experts, shared MLP, norms, embedding and head
    the same in both, and the norms have no matrix FLOPs), per
    token at S = 6,144 and 6,400: both lines are straight in S, so the crossing is where
    the interpolated difference of the two is zero."""
    from fractions import Fraction

    from symflops.cli import main

    folder = tmp_path / "granite-4.0-h-tiny"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(GRANITE_H_TINY))
    out = tmp_path / "tiny.md"
    assert main(["render", "--hf-config", str(folder / "config.json"), "-o", str(out)]) == 0
    text = out.read_text()
    assert "### Layers with a state and attention layers against the sequence length" in text
    # each kind of layer in the reader's words (its title), never its name in the declaration
    assert ("- With a state: the Mamba-2 mixer of Granite 4.0 hybrid layer (Mamba-2 mixer, "
            "routed experts, shared MLP), $") in text
    assert ("- Attention: the attention of Granite 4.0 hybrid layer (attention, routed "
            "experts, shared MLP), $") in text
    section = text[text.index("### Layers with a state"):text.index("## A worked example")]
    assert "layer\\_mamba" not in section and "layer\\_attention" not in section

    def per_token_gap(seq):
        one = {kind: symflops_counts(at_layers(GRANITE_H_TINY, layers=1, layer_types=[kind]),
                                     seq, attention="exact")[1] for kind in MIXED}
        return Fraction(one["attention"] - one["mamba"], seq)

    low, high = per_token_gap(6144), per_token_gap(6400)
    assert low < 0 < high
    crossing = 6144 + (6400 - 6144) * (-low) / (high - low)
    assert f"the crossing is ${float(crossing):,.6g}$".replace(",", "{,}") in text
    assert f"so from $S = {int(crossing) + 1:,}$".replace(",", "{,}") in text


# ai21labs/Jamba-v0.1 config.json
JAMBA_V01 = {
    "architectures": ["JambaForCausalLM"], "attn_layer_offset": 4, "attn_layer_period": 8,
    "bos_token_id": 1, "eos_token_id": 2, "expert_layer_offset": 1, "expert_layer_period": 2,
    "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02,
    "intermediate_size": 14336, "mamba_conv_bias": True, "mamba_d_conv": 4,
    "mamba_d_state": 16, "mamba_dt_rank": 256, "mamba_expand": 2, "mamba_proj_bias": False,
    "model_type": "jamba", "num_attention_heads": 32, "num_experts": 16,
    "num_experts_per_tok": 2, "num_hidden_layers": 32, "num_key_value_heads": 8,
    "num_logits_to_keep": 1, "output_router_logits": False, "pad_token_id": 0,
    "rms_norm_eps": 1e-06, "router_aux_loss_coef": 0.001, "sliding_window": None,
    "tie_word_embeddings": False, "torch_dtype": "bfloat16",
    "transformers_version": "4.40.0.dev0", "use_cache": True, "use_mamba_kernels": True,
    "vocab_size": 65536}
JAMBA_ORACLE = {
    # layer 0 Mamba with the MLP, layer 1 attention with the experts
    "Jamba-v0.1": at_layers(JAMBA_V01, attn_layer_offset=1, attn_layer_period=2),
    # layer 0 attention with the MLP, layer 1 Mamba with the experts; biases, 6 taps
    "Jamba-v0.1 varied": at_layers(JAMBA_V01, attn_layer_offset=0, attn_layer_period=2,
                                   mamba_proj_bias=True, mamba_d_conv=6, mamba_dt_rank="auto"),
}


def jamba_difference(config, seq, batch=1):
    """Torch's matrix FLOPs minus symflops's, per Mamba layer of Jamba: the convolution
    (I channels; the border and the phantom, as above); the output C h a matmul per
    position whose state gradient, an outer product (inner size 1), torch counts,
    2 B S I N; and the other way, the gradients of the broadcast products A dt (of A
    and of dt) and dt B (of dt and of B), each a sum over one letter that symflops books
    as a matrix-vector product, 4 x 2 B S I N."""
    width = config.get("mamba_expand", 2) * config["hidden_size"]
    n, k = config["mamba_d_state"], config["mamba_d_conv"]
    border = 3 * 2 * batch * width * k * (k - 1)
    phantom = 2 * batch * k * (seq + k - 1) * (width ** 2 - width)
    return border, phantom, 2 * batch * seq * width * n - 4 * 2 * batch * seq * width * n


@pytest.mark.slow
@pytest.mark.parametrize("name", list(JAMBA_ORACLE))
def test_jamba_counts_equal_transformers_but_the_named_differences(name):
    config = JAMBA_ORACLE[name]
    seq = 32
    params, conv, rest = hf_parts(config, seq)
    mine_params, mine_flops = symflops_counts(config, seq)
    assert mine_params == params
    grouped = symflops_conv(config, seq, ("Xcv",))
    width, k = 2 * config["hidden_size"], config["mamba_d_conv"]
    assert grouped == 3 * 2 * width * k * seq           # one Mamba layer, I channels
    border, phantom, ssm = jamba_difference(config, seq)
    ungrouped = conv - border
    assert ungrouped - grouped == phantom
    assert rest == mine_flops - grouped + ssm


def test_jamba_published_parameter_count():
    # Jamba-v0.1 (52B): 32 layers, attention at 4, 12, 20, 28 (with MLPs), experts at the
    # odd layers: 4 attention + MLP, 12 Mamba + MLP, 16 Mamba + 16 experts.  A Mamba mixer:
    # in_proj 4096 x 16384, conv1d 8192 x 4 and bias, x_proj 8192 x (256 + 2 x 16),
    # dt_proj 256 x 8192 and bias, A_log 8192 x 16, D, out_proj 8192 x 4096, the three
    # norms (256, 16, 16); attention q, o 4096 x 4096, k, v 4096 x 1024; MLP 3 x 4096 x
    # 14336; experts 16 of them and the router; two norms a layer; untied head
    d, i = 4096, 8192
    mamba = d * 2 * i + i * 4 + i + i * (256 + 32) + 256 * i + i + i * 16 + i + i * d + 288
    attn = 2 * d * d + 2 * d * 1024
    mlp_ = 3 * d * 14336
    moe_ = 16 * 3 * d * 14336 + 16 * d
    total = 4 * (attn + mlp_ + 2 * d) + 12 * (mamba + mlp_ + 2 * d) + 16 * (mamba + moe_ + 2 * d) \
        + 2 * 65536 * d + d
    assert symflops_counts(JAMBA_V01)[0] == total == 51_570_323_328
    jamba = imported(JAMBA_V01)
    assert (jamba.dims["L_mamba_mlp"], jamba.dims["L_mamba_moe"],
            jamba.dims["L_attention_mlp"]) == (12, 16, 4)
    assert "Hs[b,s,i,n] = Da[b,s,i,n] Hs[b,s-1,i,n] + Bu[b,s,i,n]" in jamba.text


@pytest.mark.parametrize("changes, key", [
    ({"use_mambapy": True}, "use_mambapy"),
    ({"mamba_d_conv": 1}, "mamba_d_conv"),
    ({"output_router_logits": True}, "output_router_logits"),
    ({"num_experts_per_tok": 17}, "num_experts_per_tok"),
    ({"num_experts": 16, "num_local_experts": 8}, "num_local_experts"),
])
def test_jamba_refused_naming_the_key(changes, key):
    with pytest.raises(SymflopsError, match=key):
        imported(at_layers(JAMBA_V01, **changes))


def test_a_mixer_cost_with_a_term_in_the_inverse_length():
    """The sheet reads each mixer's cost per token as a + b S + c / S (a loop over chunks
    that counts neither its first chunk's products with the zero state nor its final state
    costs (Nk - 1) / (Nk Qc) = 1 / Qc - 1 / S of a chunk's work per token), and solves the
    crossing of two such costs from the quadratic their difference times S makes."""
    import sympy

    from symflops.sheets.hybrid import _largest_root, _linear

    s, a, b, c = sympy.symbols("S a b c")
    assert _linear(a + b * s + c / s, s) == (a, b, c)
    assert _linear(a + b * s, s) == (a, b, 0)
    assert _linear(a + s ** 2, s) is None and _linear(a + c / s ** 2, s) is None
    # 2 S^2 - 10 S + 8 = 2 (S - 1)(S - 4): the larger root; none when there is no real one
    assert _largest_root((sympy.Integer(2), sympy.Integer(-10), sympy.Integer(8))) == 4
    assert _largest_root((sympy.Integer(1), sympy.Integer(0), sympy.Integer(1))) is None


@pytest.mark.parametrize("types", [["mamba", "mamba"], MIXED])
def test_decoding_counts_no_cache_of_the_ssd_chunks(tmp_path, capsys, types):
    """A Mamba-2 layer decodes from its state (heads x head width x state size, the
    same at every context), not from keys of its chunks.  The SSD splits a sequence
    into Nk chunks of Qc and its products pair an offset m with a later l inside a
    chunk (and a chunk c with a later z), which the cache rule took for positions: at
    two Mamba layers it gave 18,944 bytes per token of context, per layer the
    elements of Bv (Gm Nm = 128), Xv (Rm Ph = 48 x 64 = 3,072) and the chunk states
    St (Rm Ph Nm / Qc = 393,216 / 256 = 1,536) per position, 4,736 x 2 layers x 2
    bytes.  The plan says the cache is not counted, and why, rather than give it; a
    model with an attention layer too is refused alike, since a figure for its
    attention layers alone would leave out the states."""
    from symflops.cli import main

    path = tmp_path / "config.json"
    path.write_text(json.dumps(at_layers(GRANITE_H_TINY, len(types), layer_types=types)))
    args = ["plan", "--hf-config", str(path), "--seq", "4096", "--accelerator", "h100-sxm",
            "--decode-batch", "1"]
    assert main([*args, "--json"]) == 0
    decoding = json.loads(capsys.readouterr().out)["inference"]
    assert decoding["kv_cache_bytes_per_token"] is None and decoding["kv_cache_bytes"] is None
    assert decoding["bytes_per_token"] == decoding["weights_bytes_read"]
    assert main(args) == 0
    line = next(l for l in capsys.readouterr().out.splitlines() if "KV cache" in l)
    assert "not counted: the layer splits a sequence's positions into Nk chunks of Qc" in line


def test_jambas_cache_is_its_attention_and_says_what_it_leaves_out(tmp_path, capsys):
    """Jamba v0.1's cache per token of context is its attention layers' keys and
    values: layers 4, 12, 20, 28 of 32 (offset 4, period 8), 2 x 8 key/value heads
    x 128 (4096 / 32) x 2 bytes each, 4 x 4,096 = 16,384 bytes.  Its Mamba layers
    decode from a state the same size at every context, which is not in that
    figure; the row says so, since the bytes per token then leave it out."""
    from symflops.cli import main

    path = tmp_path / "config.json"
    path.write_text(json.dumps(JAMBA_V01))
    args = ["plan", "--hf-config", str(path), "--seq", "4096", "--accelerator", "h100-sxm",
            "--decode-batch", "1"]
    assert main([*args, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["inference"]["kv_cache_bytes_per_token"] == 16_384
    assert main(args) == 0
    line = next(l for l in capsys.readouterr().out.splitlines() if "KV cache per token" in l)
    assert "the state each recurrence" in line and "not in the cache" in line
