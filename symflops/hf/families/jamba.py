"""Jamba (``jamba``, transformers 5.24): Mamba layers (the selective SSM of
:func:`symflops.hf.mamba.mamba1`, with RMSNorms of dt's rank, B and C) and,
every ``attn_layer_period`` layers from ``attn_layer_offset``, attention layers
(no positional signal); every ``expert_layer_period`` layers from
``expert_layer_offset`` the feed-forward is ``num_experts`` routed experts (a
softmax over every expert's logit, the top ``num_experts_per_tok`` kept, not
renormalised), else a gated MLP.  Up to four blocks (mixer x feed-forward).

Where transformers' torch path (without the ``mamba_ssm`` and ``causal_conv1d``
kernels: the scan a loop over the positions) runs other matrix products than
the declaration counts, the differences are tested exactly in
``tests/test_hf_hybrids.py``: the convolution over ``S + Kc - 1`` outputs and
FlopCounterMode's ungrouped count of its weight gradient; the output ``C h``
a matmul per position whose state gradient (an outer product) it counts; and,
the other way, the gradients of the broadcast products ``A dt`` and ``dt B``,
matrix-vector products in symflops's buckets, elementwise in torch's.
"""

from __future__ import annotations

from ..attention import Attention, attention
from ..config import Config
from ..emit import Block, Declaration
from ..experts import Moe, moe, moe_dims
from ..layers import kinds_as_blocks
from ..mamba import Mamba1, mamba1
from ..parts import Mlp, Norm, mlp, model_head, norm, rotary_embedding
from .common import Family, Options, dropout, routed_experts, sized_decoder

READ = frozenset((
    "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
    "num_attention_heads", "num_key_value_heads", "hidden_act", "max_position_embeddings",
    "tie_word_embeddings", "attention_dropout", "num_experts", "num_local_experts",
    "num_experts_per_tok", "output_router_logits", "expert_layer_period",
    "expert_layer_offset", "attn_layer_period", "attn_layer_offset", "mamba_d_state",
    "mamba_d_conv", "mamba_expand", "mamba_dt_rank", "mamba_conv_bias", "mamba_proj_bias",
    "use_mambapy", "use_associative_scan"))
# rms_norm_eps: a value; router_aux_loss_coef: the load-balancing loss's weight
# (output_router_logits refused); use_mamba_kernels: deprecated, no effect;
# num_logits_to_keep: generation keeps the last logits only (training computes all);
# sliding_window: transformers' Jamba reads no window
IGNORED = frozenset(("rms_norm_eps", "router_aux_loss_coef", "use_mamba_kernels",
                     "num_logits_to_keep", "sliding_window"))
DEFAULTS = dict(vocab_size=65536, hidden_size=4096, intermediate_size=14336,
                num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8,
                max_position_embeddings=262144)
TITLE = "Jamba"


def build(c: Config, o: Options) -> Declaration:
    d, heads, n = sized_decoder(c, o, TITLE, DEFAULTS, False)
    activation = c.activation("hidden_act", "silu")
    attn_p = dropout(c, "attention_dropout")
    c.must_be("use_mambapy", False, False, "the mamba.py parallel scan (pscan) is not the "
                                           "recurrence the declaration counts")
    c.flag("use_associative_scan", True)   # only under torch.compile: the same recurrence
    a_period = c.integer("attn_layer_period", 8)
    a_offset = c.integer("attn_layer_offset", 4, minimum=0)
    e_period = c.integer("expert_layer_period", 2)
    e_offset = c.integer("expert_layer_offset", 1, minimum=0)
    experts, active, key = routed_experts(c, ("num_experts", "num_local_experts"), 16, 2)
    plan = [("attention" if i % a_period == a_offset else "mamba",
             "moe" if experts > 1 and i % e_period == e_offset else "mlp") for i in range(n)]
    width = d.dims["D"].value
    assert width is not None
    if any(m == "mamba" for m, _ in plan):
        d.dim("Im", "inner width of the Mamba mixer (mamba_expand x hidden_size)",
              c.integer("mamba_expand", 2) * width, "mamba_expand * hidden_size")
        d.dim("Nm", "state size per channel", c.integer("mamba_d_state", 16), "mamba_d_state")
        rank = c.data.get("mamba_dt_rank", "auto")
        d.dim("Rk", "rank of the step sizes' projection",
              -(-width // 16) if rank == "auto" else c.integer("mamba_dt_rank"),
              "mamba_dt_rank" if rank != "auto" else "ceil(hidden_size / 16)")
        taps = c.integer("mamba_d_conv", 4)
        if taps < 2:
            raise c.error("mamba_d_conv", f"mamba_d_conv = {taps}: a convolution of one tap "
                                          "has no padding, which the declaration writes as "
                                          "Kp = taps - 1 >= 1 zeros",
                          "use mamba_d_conv >= 2, or write the declaration by hand")
        d.dim("Kp", "zeros in front of the causal depthwise convolution's input (its taps "
                    "less one: the kernel has Kp + 1 taps)", taps - 1, "mamba_d_conv - 1")
    if any(f == "moe" for _, f in plan):
        moe_dims(d, experts, active, key, "num_experts_per_tok")
    d.dim("F", "hidden width of the MLP and of each expert",
          c.integer("intermediate_size", 14336), "intermediate_size")
    attn = Attention(heads, rotary=False, count=o.attention, dropout=attn_p)
    mixer = Mamba1(activation, c.flag("mamba_conv_bias", True), c.flag("mamba_proj_bias", False))
    ffn = Moe(activation, renormalize=False, scores="softmax",
              routing="the top num_experts_per_tok probabilities",
              modules=("router.weight", "experts.gate_up_proj", "experts.down_proj"))
    rotary_embedding(d, note="Jamba has no positional signal")
    kinds = list(dict.fromkeys(plan))
    kinds_as_blocks(
        d, kinds, plan, TITLE,
        lambda mix, ff: ("Mamba" if mix == "mamba" else "attention") + " layers with "
        + ("routed experts" if ff == "moe" else "an MLP"),
        lambda blk, mix, ff: _layer(d, blk, mix, ff, attn, mixer, ffn, activation),
        "attn_layer_period/offset, expert_layer_period/offset")
    model_head(d, Norm("rmsnorm", module="final_layernorm"),
               c.flag("tie_word_embeddings", False), "tie_word_embeddings")
    return d


def _layer(d: Declaration, blk: Block, mix: str, ff: str, attn: Attention, mixer: Mamba1,
           ffn: Moe, activation: str) -> None:
    blk.uses("B", "S", "D", "F")
    n1 = norm(blk, Norm("rmsnorm", module="input_layernorm"), "Xn", "X", "g1", "b,s,d", "d",
              "mixer sub-layer: norm, " + ("Mamba mixer" if mix == "mamba" else
                                           "causal attention") + ", residual")
    if mix == "mamba":
        outs = mamba1(blk, mixer, "X", "Xn", "Y1")
    else:
        outs = attention(d, blk, attn, "X", "Xn", "Y1")
    n2 = norm(blk, Norm("rmsnorm", module="pre_ff_layernorm"), "Yn2", "Y1", "g2", "b,s,d", "d",
              "feed-forward sub-layer: norm, " + ("routed experts" if ff == "moe" else "MLP")
              + ", residual")
    if ff == "moe":
        fouts, term = moe(blk, ffn, "Yn2")
        blk.op(f"Y[b,s,d] = Y1[b,s,d] + {term}", "the k experts' sum, the residual")
        fouts.append("Y")
    else:
        fouts = mlp(blk, Mlp(True, activation), "Y1", "Yn2", "Y")
    blk.component("Mamba mixer" if mix == "mamba" else "attention", outs)
    blk.component("experts" if ff == "moe" else "MLP", fouts)
    blk.component("norms", [*n1, *n2])


FAMILIES = (Family("jamba", ("JambaForCausalLM",), READ, IGNORED, build),)
