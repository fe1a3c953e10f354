"""Granite 4.0's hybrid (``granitemoehybrid``, transformers 5.24): Mamba-2
layers (:mod:`symflops.hf.mamba`) and attention layers, as ``layer_types``
lays them out (``mamba`` / ``linear_attention``, ``attention`` /
``full_attention``), each followed by routed experts (``num_local_experts``,
the top ``num_experts_per_tok`` logits' softmax) and a shared MLP
(``shared_intermediate_size``; alone when there are no experts); Granite's four
multipliers (embedding, attention scores, residual branches, logits); rotary
positions only with ``position_embedding_type: rope`` (Granite 4.0 publishes
``nope``).

Where transformers' torch path (its reference implementation, without the
``mamba_ssm`` and ``causal_conv1d`` kernels) runs more matrix products than
the model defines, the declaration counts the model's; the differences,
tested exactly in ``tests/test_hf_hybrids.py``:

* the convolution runs over ``S + Kc - 1`` outputs (padding on both sides, the
  last ``Kc - 1`` cut off), and torch 2.13's FlopCounterMode counts a grouped
  convolution's weight gradient as if it were ungrouped;
* the product ``C B`` is computed once per head (B and C repeated over the
  ``Rm`` heads of a group) where the model computes it once per group;
* the recurrence over chunks runs over ``Nk + 1`` chunks, a zero initial state
  before them (whose last output is the final state, for the cache).
"""

from __future__ import annotations

from fractions import Fraction

from ..attention import Attention, attention
from ..config import Config
from ..emit import Block, Declaration
from ..experts import Moe, moe, moe_dims, shared_mlp
from ..mamba import Mamba2, mamba2
from ..parts import Norm, model_head, norm, rotary_embedding
from .common import Family, Options, number_text, routed_experts, sized_decoder

READ = frozenset((
    "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
    "num_attention_heads", "num_key_value_heads", "hidden_act", "max_position_embeddings",
    "tie_word_embeddings", "attention_bias", "attention_dropout", "embedding_multiplier",
    "logits_scaling", "residual_multiplier", "attention_multiplier", "num_local_experts",
    "num_experts_per_tok", "output_router_logits", "shared_intermediate_size",
    "position_embedding_type", "layer_types", "layers_block_type", "mamba_n_heads",
    "mamba_n_groups", "mamba_d_state", "mamba_d_head", "mamba_d_conv", "mamba_expand",
    "mamba_chunk_size", "mamba_conv_bias", "mamba_proj_bias", "time_step_limit",
    "normalization_function"))
# rms_norm_eps: a value; router_aux_loss_coef: the weight of the load-balancing loss
# (output_router_logits refused); rope_theta, rope_parameters, rope_scaling: the rotary
# tables' values (shapes S x E); init_method: the initialisation
IGNORED = frozenset(("rms_norm_eps", "router_aux_loss_coef", "rope_theta", "rope_parameters",
                     "rope_scaling", "init_method"))
DEFAULTS = dict(vocab_size=32000, hidden_size=4096, intermediate_size=11008,
                num_hidden_layers=32, num_attention_heads=32, max_position_embeddings=2048)
TITLE = "Granite 4.0 hybrid"
_MAMBA = ("mamba", "linear_attention")
_ATTN = ("attention", "full_attention")


def build(c: Config, o: Options) -> Declaration:
    d, heads, n = sized_decoder(c, o, TITLE, DEFAULTS, False)
    activation = c.activation("hidden_act", "silu")
    c.choice("normalization_function", "rmsnorm", ("rmsnorm",),
             "transformers' GraniteMoeHybrid always uses RMSNorm")
    c.zero("attention_dropout", "the declaration has no dropout of the attention weights")
    _check_limit(c)

    def scale(key: str) -> str:
        value = c.number(key, Fraction(1))
        assert value is not None
        return number_text(value, c.data.get(key))

    residual = scale("residual_multiplier")
    types = _types(c, n)
    mixers = [k for k in ("mamba", "attention") if k in types]
    if "mamba" in mixers:
        _mamba_dims(d, c)
    experts = c.integer("num_local_experts", 8, minimum=0)
    if experts:
        experts, active, key = routed_experts(c, ("num_local_experts",), 8, 2)
        moe_dims(d, experts, active, key, "num_experts_per_tok")
        d.dim("F", "hidden width of one routed expert", c.integer("intermediate_size", 11008),
              "intermediate_size")
    else:
        c.must_be("output_router_logits", False, False, "symflops counts no load-balancing loss")
    d.dim("Fs", "hidden width of the shared MLP (shared_mlp)",
          c.integer("shared_intermediate_size", 1024), "shared_intermediate_size")
    position = c.choice("position_embedding_type", "nope", ("nope", "rope"),
                        "GraniteMoeHybrid rotates the queries and keys with 'rope', else none")
    if not c.has("position_embedding_type") or c.data["position_embedding_type"] is None:
        position = "nope"
    attn = Attention(heads, (c.flag("attention_bias", False),) * 4, count=o.attention,
                     rotary=position == "rope", multiplier=scale("attention_multiplier"),
                     residual_scale=residual)
    mixer = Mamba2(activation, c.flag("mamba_conv_bias", True), c.flag("mamba_proj_bias", False),
                   o.attention, residual)
    ffn = Moe(activation, renormalize=False, scores="topk-softmax",
              routing="the top num_experts_per_tok logits",
              modules=("router.weight", "experts.gate_up_proj", "experts.down_proj")) \
        if experts else None
    rotary_embedding(d, note="Granite 4.0's attention layers have none"
                     if position == "nope" else "", scale=scale("embedding_multiplier"))
    previous = "X0"
    for i, kind in enumerate(mixers):
        label = "Mamba-2 layers" if kind == "mamba" else "attention layers"
        name = "layer" if len(mixers) == 1 else f"layer_{kind}"
        blk = d.block(name, f"{TITLE} layer ({'Mamba-2 mixer' if kind == 'mamba' else 'attention'}"
                            f"{', routed experts' if experts else ''}, shared MLP)")
        blk.label = label
        blk.tensor("X", ["B", "S", "D"], "input", "the layer's input (the residual stream)")
        _layer(d, blk, kind, attn, mixer, ffn, activation, residual)
        count = types.count(kind)
        repeat = d.dim("L" if len(mixers) == 1 else f"L_{kind}",
                       "layers (decoder blocks)" if len(mixers) == 1 else
                       f"{label} (no count depends on the layers' order)", count,
                       "layer_types" if c.has("layer_types") else "num_hidden_layers")
        nxt = "XL" if i == len(mixers) - 1 else f"X{i + 1}"
        binding = {"X": previous, "Y": nxt}
        if i:
            binding.update({t: t + "_a" for t in blk.own() if t not in ("X", "Y")})
        d.model.include(blk.name, repeat, binding, None if len(mixers) == 1 else
                        f"the {count} {label}" + (" (their tensors renamed _a)" if i else ""))
        previous = nxt
    model_head(d, Norm("rmsnorm", module="norm"), c.flag("tie_word_embeddings", False),
               "tie_word_embeddings", scale=("/", scale("logits_scaling"), "logits_scaling"))
    if "mamba" in mixers:
        d.multiple = (d.dims["Qc"].value or 1, "mamba_chunk_size")
    return d


def _types(c: Config, n: int) -> list[str]:
    """Each layer's mixer, "mamba" or "attention"."""
    key = "layer_types" if c.has("layer_types") or not c.has("layers_block_type") \
        else "layers_block_type"
    if c.has("layer_types") and c.has("layers_block_type") \
            and c.data["layer_types"] != c.data["layers_block_type"]:
        raise c.error("layers_block_type", "layer_types and layers_block_type (the same "
                                           "setting) disagree", "give the layers' types once")
    given = c.strings(key, _MAMBA + _ATTN, n)
    if given is None:
        return ["mamba"] * n       # GraniteMoeHybridConfig: every layer a Mamba layer
    return ["mamba" if t in _MAMBA else "attention" for t in given]


def _check_limit(c: Config) -> None:
    """time_step_limit clamps the step sizes; only (0, inf), no clamp, is read."""
    if not c.has("time_step_limit"):
        return
    value = c.data["time_step_limit"]
    if not (isinstance(value, list) and len(value) == 2 and value[0] == 0
            and not isinstance(value[0], bool) and value[1] == float("inf")):
        raise c.error("time_step_limit", "key 'time_step_limit' clamps the step sizes, an op "
                                         "the declaration does not have",
                      "remove time_step_limit (or give [0.0, Infinity], no clamp), or write "
                      "the declaration by hand")


def _mamba_dims(d: Declaration, c: Config) -> None:
    width = d.dims["D"].value
    assert width is not None
    heads = c.integer("mamba_n_heads", 128)
    groups = c.integer("mamba_n_groups", 1)
    inner = c.integer("mamba_expand", 2) * width
    if c.has("mamba_d_head") and c.data["mamba_d_head"] != "auto":
        head = c.integer("mamba_d_head")
    else:
        head = c.divide("mamba_expand * hidden_size", inner, "mamba_n_heads", heads,
                        "mamba_n_heads must divide mamba_expand * hidden_size")
    if head * heads != inner:
        raise c.error("mamba_d_head", f"mamba_d_head = {head} times mamba_n_heads = {heads} is "
                                      f"not mamba_expand * hidden_size = {inner}",
                      "transformers refuses this config; make the three agree")
    c.divide("mamba_n_heads", heads, "mamba_n_groups", groups,
             "each group of heads shares one B and one C")
    d.dim("Gm", "groups of Mamba heads sharing B and C", groups, "mamba_n_groups")
    d.dim("Rm", "Mamba heads per group", heads // groups, "mamba_n_heads / mamba_n_groups")
    d.dim("Hm", "Mamba heads", equals="Gm * Rm")
    d.dim("Ph", "width of a Mamba head", head, "mamba_d_head")
    d.dim("Nm", "state size of a Mamba head", c.integer("mamba_d_state", 256), "mamba_d_state")
    taps = c.integer("mamba_d_conv", 4)
    if taps < 2:
        raise c.error("mamba_d_conv", f"mamba_d_conv = {taps}: a convolution of one tap has no "
                                      "padding, which the declaration writes as Kp = taps - 1 >= 1 "
                                      "zeros", "use mamba_d_conv >= 2, or write the declaration "
                                               "by hand")
    d.dim("Kp", "zeros in front of the causal depthwise convolution's input (its taps "
                "less one: the kernel has Kp + 1 taps)", taps - 1, "mamba_d_conv - 1")
    d.dim("Qc", "chunk length of the SSD (S must be a multiple of it)",
          c.integer("mamba_chunk_size", 256), "mamba_chunk_size")
    d.dim("Nk", "chunks of a sequence (S / Qc)", equals="S / Qc")


def _layer(d: Declaration, blk: Block, kind: str, attn: Attention, mixer: Mamba2,
           ffn: Moe | None, activation: str, residual: str) -> None:
    blk.uses("B", "S", "D", "Fs")
    n1 = norm(blk, Norm("rmsnorm", module="input_layernorm"), "Xn", "X", "g1", "b,s,d", "d",
              "mixer sub-layer: norm, " + ("Mamba-2 mixer" if kind == "mamba" else
                                           "causal attention") + ", residual")
    if kind == "mamba":
        outs = mamba2(blk, mixer, "X", "Xn", "Y1")
    else:
        outs = attention(d, blk, attn, "X", "Xn", "Y1")
    n2 = norm(blk, Norm("rmsnorm", module="post_attention_layernorm"), "Yn2", "Y1", "g2",
              "b,s,d", "d", "feed-forward sub-layer: norm, " +
              ("routed experts and " if ffn else "") + "the shared MLP, residual")
    fouts: list[str] = []
    terms: list[str] = []
    if ffn is not None:
        routed, term = moe(blk, ffn, "Yn2")
        fouts += routed
        terms.append(term)
    souts, sterm = shared_mlp(blk, activation, "Yn2", "Fs", comment="shared_mlp: one gated "
                              "MLP on every token (input_linear's halves, output_linear)",
                              module="shared_mlp's")
    fouts += souts
    terms.append(sterm)
    blk.op("Yf[b,s,d] = " + " + ".join(terms), "the k experts' sum and the shared MLP"
           if ffn else "the shared MLP's output projection")
    blk.op(f"Y[b,s,d] = Y1[b,s,d] + {residual} Yf[b,s,d]",
           f"times residual_multiplier ({residual}), then the residual")
    blk.component("Mamba-2 mixer" if kind == "mamba" else "attention", outs)
    blk.component("experts and shared MLP" if ffn else "shared MLP", [*fouts, "Yf", "Y"])
    blk.component("norms", [*n1, *n2])


FAMILIES = (Family("granitemoehybrid", ("GraniteMoeHybridForCausalLM",), READ, IGNORED, build),)
