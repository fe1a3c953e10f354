"""Qwen mixtures of experts: ``qwen2_moe`` (Qwen1.5-MoE, Qwen2-57B-A14B) and
``qwen3_moe`` (Qwen3-30B-A3B, Qwen3-235B-A22B).

Each block: RMSNorm, causal attention with grouped key/value heads and
rotary positions, residual; RMSNorm, then either routed experts (a sparse
layer) or one gated MLP of ``intermediate_size`` (a dense layer), residual.
What changes a count:

* the sizes; ``head_dim`` (Qwen3-MoE: 128 while hidden_size / heads is 64);
* which layers are sparse: layer i is sparse when it is not in
  ``mlp_only_layers``, ``num_experts`` > 0 and (i + 1) is a multiple of
  ``decoder_sparse_step``; the dense layers (their own block, of
  ``intermediate_size``) are written first, then the sparse ones: every
  count is a sum over layers, so the order changes none;
* routed experts: ``num_experts`` (Qwen3-MoE also ``num_local_experts``),
  ``num_experts_per_tok``, ``moe_intermediate_size``; ``norm_topk_prob``
  (the top-k weights divided by their sum, elementwise);
* ``qwen2_moe``: a shared expert of ``shared_expert_intermediate_size`` on
  every token, scaled by ``sigmoid(shared_expert_gate(x))``, a D x 1 linear;
  biases on q, k and v when ``qkv_bias`` (default true);
* ``qwen3_moe``: q_norm and k_norm (RMSNorm of each head); biases on q, k, v
  and o when ``attention_bias``; ``use_sliding_window`` windows every layer
  (``sliding_window``, default 4096);
* ``attention_dropout``; ``tie_word_embeddings``; ``hidden_act``.

Experts are counted as transformers' batched_mm runs them: each token-expert
pair's products once (:func:`symflops.hf.experts.moe`).  Each token is repeated k times (a
lookup), each pair multiplied by its expert's weights, over a unit axis ``o``
(``O = 1``: the row axis of batched_mm's ``(pairs, 1, D) @ (pairs, D, F)``)
so that the weight gradient sums over it, as PyTorch's bmm of inner size 1
is counted; no capacity, so exact at every B and S (the dispatch form of
``parts.moe`` needs ``k B S / M`` whole, which Qwen1.5-MoE's 60 experts and
top-4 make false at S = 4096).  It counts what the dispatch form counts at
capacity factor 1.  The shared gate is written with the same axis ``O``:
its input gradient is then a product over it, as PyTorch's mm (inner size
1) is, and counted with the matrix products.

Refused: Qwen2-MoE's ``use_sliding_window`` (alternating windowed layers)
and ``layer_types`` with a windowed layer, ``output_router_logits`` (the
load-balancing loss is not counted), ``mlp_only_layers`` naming a layer the
model does not have.
"""

from __future__ import annotations


from ..attention import Attention, attention
from ..config import BY_HAND, Config
from ..emit import Block, Declaration
from ..experts import Moe, moe, moe_dims
from ..parts import Mlp, Norm, mlp, model_head, norm, rotary_embedding
from .common import Family, Options, decoder_dims, dropout, include_block, model_base, rope_keys

_BASE = ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
         "head_dim", "intermediate_size", "vocab_size", "max_position_embeddings",
         "tie_word_embeddings", "hidden_act", "attention_dropout", "moe_intermediate_size",
         "num_experts", "num_experts_per_tok", "decoder_sparse_step", "mlp_only_layers",
         "norm_topk_prob", "output_router_logits", "use_sliding_window", "sliding_window")
READ = {
    "qwen2_moe": frozenset(_BASE + ("shared_expert_intermediate_size", "qkv_bias",
                                    "max_window_layers", "layer_types")),
    "qwen3_moe": frozenset(_BASE + ("num_local_experts", "attention_bias")),
}
IGNORED = {
    # router_aux_loss_coef weighs the load-balancing loss, which is only computed when
    # output_router_logits is true (refused)
    "qwen2_moe": frozenset(rope_keys("rms_norm_eps", "router_aux_loss_coef")),
    # max_window_layers is not read by transformers' Qwen3-MoE (a window, when
    # use_sliding_window is true, applies to every layer)
    "qwen3_moe": frozenset(rope_keys("rms_norm_eps", "router_aux_loss_coef",
                                     "max_window_layers")),
}
TITLES = {"qwen2_moe": "Qwen2-MoE", "qwen3_moe": "Qwen3-MoE"}
LM = {"qwen2_moe": ("Qwen2MoeForCausalLM",), "qwen3_moe": ("Qwen3MoeForCausalLM",)}


def _shared_expert(d: Declaration, blk: Block, activation: str, xn: str) -> list[str]:
    """Qwen2-MoE's shared expert and its sigmoid gate (outputs Ys, Gsh)."""
    blk.uses("Fs", "O")
    blk.tensor("W_sgate", ["D", "Fs"], "param", "shared expert gate projection "
                                                "(shared_expert.gate_proj)")
    blk.tensor("W_sup", ["D", "Fs"], "param", "shared expert up-projection "
                                              "(shared_expert.up_proj)")
    blk.tensor("W_sdown", ["Fs", "D"], "param", "shared expert down-projection "
                                                "(shared_expert.down_proj)")
    blk.tensor("W_sg", ["D", "O"], "param", "shared expert gate (shared_expert_gate, a D x 1 "
                                            "linear)")
    blk.op(f"Us[b,s,j] = {xn}[b,s,d] W_sgate[d,j]", "the shared expert: a gated MLP of width "
                                                    "Fs on every token")
    blk.op(f"Hs[b,s,j] = {xn}[b,s,d] W_sup[d,j]")
    blk.op(f"Ms[b,s,j] = {activation}(Us[b,s,j]) * Hs[b,s,j]")
    blk.op("Ys[b,s,d] = Ms[b,s,j] W_sdown[j,d]")
    blk.op(f"Sg[b,s,o] = {xn}[b,s,d] W_sg[d,o]",
           "its gate, sigmoid(shared_expert_gate(x)): the output axis o (O = 1) makes the "
           "input gradient\na product over o, as PyTorch's mm of inner size 1 is")
    blk.op("Sgs[b,s] = Sg[b,s,o]")
    blk.op("Gsh[b,s] = sigmoid(Sgs[b,s])")
    return ["Us", "Hs", "Ms", "Ys", "Sg", "Sgs", "Gsh"]


def _sparse_layers(c: Config, layers: int, experts: int) -> int:
    """How many layers are sparse (transformers' Qwen2/3-MoE decoder layer rule)."""
    only = c.integers("mlp_only_layers")
    if any(i >= layers for i in only) or len(set(only)) != len(only):
        raise c.error("mlp_only_layers", f"mlp_only_layers must name distinct layers among "
                                         f"0 .. {layers - 1}",
                      "list each dense layer's index once, or remove the key")
    step = c.integer("decoder_sparse_step", 1)
    return sum(1 for i in range(layers)
               if i not in only and experts > 0 and (i + 1) % step == 0)


def build(c: Config, o: Options) -> Declaration:
    t = c.model_type
    d = model_base(c, o, f"{TITLES[t]} decoder (from {o.source})")
    grouped = decoder_dims(d, c, heads="num_attention_heads", kv="num_key_value_heads",
                           width="hidden_size", head_dim="head_dim")
    layers = c.integer("num_hidden_layers")
    activation = c.activation("hidden_act", "silu")
    c.must_be("output_router_logits", False, False, "symflops counts no load-balancing loss")
    # the attention
    window = False
    if t == "qwen2_moe":
        c.must_be("use_sliding_window", False, False,
                  "Qwen2-MoE windows alternate layers below max_window_layers, which the "
                  "importer does not lay out")
        types = c.strings("layer_types", ("full_attention", "sliding_attention"), layers)
        if types is not None and "sliding_attention" in types:
            raise c.error("layer_types", "layer_types lists sliding_attention layers, which "
                                         "the importer does not lay out for qwen2_moe",
                          "list full_attention for every layer, " + BY_HAND)
        bias = (c.flag("qkv_bias", True),) * 3 + (False,)
        qk = None
    else:
        if c.flag("use_sliding_window", False):
            window = True
            d.dim("W", "attention window (positions a query sees, itself included)",
                  c.integer("sliding_window", 4096), "sliding_window (every layer: "
                                                     "use_sliding_window)")
        bias = (c.flag("attention_bias", False),) * 4
        qk = Norm("rmsnorm", module="q_norm / k_norm")
    attn_p = dropout(c, "attention_dropout")
    # the experts
    if t == "qwen3_moe" and c.has("num_experts") and c.has("num_local_experts") \
            and c.data["num_experts"] != c.data["num_local_experts"]:
        raise c.error("num_local_experts", "num_experts and num_local_experts (the same "
                                           "setting) differ", "give one of them")
    experts_key = "num_experts" if t == "qwen2_moe" or c.has("num_experts") \
        else "num_local_experts"
    experts = c.integer(experts_key, minimum=0)
    sparse = _sparse_layers(c, layers, experts)
    dense = layers - sparse
    if sparse:
        active = c.integer("num_experts_per_tok")
        if active > experts:
            raise c.error("num_experts_per_tok", f"num_experts_per_tok = {active} exceeds "
                                                 f"{experts_key} = {experts}",
                          "a token is routed to at most every expert")
        moe_dims(d, experts, active, experts_key, "num_experts_per_tok",
                 " and the one output of the shared expert gate" if t == "qwen2_moe" else "")
        d.dim("F", "hidden width of one routed expert", c.integer("moe_intermediate_size"),
              "moe_intermediate_size")
        if t == "qwen2_moe":
            d.dim("Fs", "hidden width of the shared expert",
                  c.integer("shared_expert_intermediate_size"), "shared_expert_intermediate_size")
    if dense:
        d.dim("Fd", "MLP hidden width of a dense layer", c.integer("intermediate_size"),
              "intermediate_size")
    renormalize = c.flag("norm_topk_prob", False)
    rotary_embedding(d)
    kinds = [(k, n) for k, n in (("dense", dense), ("sparse", sparse)) if n]
    previous = "X0"
    for i, (kind, count) in enumerate(kinds):
        name = "layer" if len(kinds) == 1 else f"layer_{kind}"
        blk = d.block(name, f"{TITLES[t]} decoder block ({kind}: "
                      + ("routed experts" if kind == "sparse" else "one gated MLP") + ")")
        blk.tensor("X", ["B", "S", "D"], "input", "the block's input (the residual stream)")
        norm(blk, Norm("rmsnorm", module="input_layernorm"), "Xn", "X", "g1", "b,s,d", "d",
             "attention sub-block: RMSNorm, causal attention, residual")
        outs = attention(d, blk, Attention("g,r" if grouped else "n", bias, qk, window=window,
                                           count=o.attention, dropout=attn_p), "X", "Xn", "Y1")
        norm(blk, Norm("rmsnorm", module="post_attention_layernorm"), "Yn", "Y1", "g2",
             "b,s,d", "d", "MLP sub-block: RMSNorm, " + ("routed experts" if kind == "sparse"
                                                         else "gated MLP") + ", residual")
        if kind == "dense":
            mouts = mlp(blk, Mlp(True, activation, width="Fd"), "Y1", "Yn", "Y")
        elif t == "qwen3_moe":
            mouts, routed = moe(blk, Moe(activation, renormalize=renormalize), "Yn")
            blk.op(f"Y[b,s,d] = Y1[b,s,d] + {routed}", "the k experts' sum, the residual")
            mouts.append("Y")
        else:
            mouts, routed = moe(blk, Moe(activation, renormalize=renormalize), "Yn")
            mouts += _shared_expert(d, blk, activation, "Yn")
            blk.op(f"Y[b,s,d] = Y1[b,s,d] + {routed} + Gsh[b,s] Ys[b,s,d]",
                   "the routed experts' sum, the gated shared expert, the residual")
            mouts.append("Y")
        blk.component("attention", outs)
        blk.component("experts" if kind == "sparse" else "MLP", mouts)
        blk.component("norms", ["Xn", "Yn"])
        nxt = "XL" if i == len(kinds) - 1 else f"X{i + 1}"
        repeat = d.dim("L" if len(kinds) == 1 else f"L_{kind}",
                       "layers (decoder blocks)" if len(kinds) == 1 else
                       f"{kind} layers (the dense ones are written first; counts do not "
                       "depend on the order)", count,
                       "num_hidden_layers" if len(kinds) == 1 else
                       "num_hidden_layers, mlp_only_layers, decoder_sparse_step")
        include_block(d, blk, repeat, previous, nxt,
                      "_d" if kind == "dense" and len(kinds) == 2 else "",
                      None if len(kinds) == 1 else f"{count} {kind} layers" +
                      (" (their tensors renamed with _d: the sparse layers' have the same "
                       "names)" if kind == "dense" and len(kinds) == 2 else ""))
        previous = nxt
    model_head(d, Norm("rmsnorm", module="norm"), c.flag("tie_word_embeddings", False),
               "tie_word_embeddings")
    return d


FAMILIES = tuple(Family(t, LM[t], READ[t], IGNORED[t], build) for t in READ)
