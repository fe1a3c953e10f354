"""Llama 4's text model (``llama4_text``, Llama4ForCausalLM), as transformers 5.24
builds it; the multimodal ``llama4`` is refused with advice (import its
``text_config``).

Each layer: RMSNorm, attention, residual; RMSNorm, a feed-forward, residual.
Layers differ in two ways, each kind a block of its own:

* attention: the layers with rotary positions (``no_rope_layers`` 1, by default
  all but every ``no_rope_layer_interval``-th) attend within chunks of
  ``attention_chunk_size`` positions (``layer_types`` "chunked_attention"), their
  queries and keys L2-normalised after the rotation (``use_qk_norm``, no gain);
  the others (NoPE) attend to every earlier position, their queries scaled per
  position when ``attn_temperature_tuning`` (``1 + attn_scale log1p(floor((s + 1)
  / floor_scale))``, a buffer);
* feed-forward: the ``moe_layers`` (default every ``interleave_moe_layer_step``-th)
  have ``num_local_experts`` experts of ``intermediate_size``, the router's top-k
  logits through a sigmoid scaling each token *before* its expert, and a shared
  expert of the same width on every token; the others a gated MLP of
  ``intermediate_size_mlp``.

**Experts as defined and as run.**  The model routes each token to k experts;
that is what the declaration counts (``--experts model``, the default).
transformers 5.24's ``Llama4TextExperts`` runs every expert on every token (the
tokens repeated for all M experts, scaled by scores that are zero outside the k
chosen, one bmm per weight over the M experts): ``--experts executed`` writes
that form, the figure FlopCounterMode gives (M / k times the routed pairs'
products).

**Chunked attention counted exactly** (``--attention exact``) views the positions
as (chunk, offset) pairs, ``S = Nc C``: ``Nc = S / C`` must be whole (a sequence
shorter than a chunk, or not a multiple of it, is refused at evaluation: its
count is not a polynomial); ``--attention full-square`` writes the chunk mask as
the buffer eager attention adds to the scores, valid at every S.
"""

from __future__ import annotations

from fractions import Fraction

from ..attention import Attention
from ..config import BY_HAND, Config
from ..emit import Declaration
from ..experts import Moe, moe_dims
from ..layers import Kind, Layout, Shared, layers
from ..parts import Mlp, Norm, model_head, rotary_embedding
from .common import Family, Options, dropout, rope_keys, routed_experts, sized_decoder

READ = frozenset(("vocab_size", "hidden_size", "intermediate_size", "intermediate_size_mlp",
                  "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
                  "head_dim", "hidden_act", "max_position_embeddings", "tie_word_embeddings",
                  "attention_bias", "attention_dropout", "num_experts_per_tok",
                  "num_local_experts", "moe_layers", "interleave_moe_layer_step",
                  "use_qk_norm", "output_router_logits", "router_jitter_noise",
                  "no_rope_layers", "no_rope_layer_interval", "attention_chunk_size",
                  "layer_types", "attn_temperature_tuning", "floor_scale", "attn_scale"))
#: for_llm_compressor: a flag of quantization tooling; cache_implementation: the
#: generation cache; router_aux_loss_coef: the load-balancing loss's weight (refused
#: through output_router_logits)
IGNORED = frozenset(rope_keys("rms_norm_eps", "router_aux_loss_coef", "for_llm_compressor",
                              "cache_implementation"))
DEFAULTS = dict(vocab_size=202048, hidden_size=5120, intermediate_size=8192,
                num_hidden_layers=48, num_attention_heads=40, num_key_value_heads=8,
                head_dim=128, max_position_embeddings=131072)
_TYPES = ("full_attention", "chunked_attention")


def _per_layer(c: Config, n: int) -> list[tuple[bool, bool, bool]]:
    """(rotary, chunked, MoE) of each layer, as Llama4TextConfig lays them out."""
    flags = c.integers("no_rope_layers")
    if flags:
        if len(flags) < n or any(f not in (0, 1) for f in flags[:n]):
            raise c.error("no_rope_layers", f"key 'no_rope_layers' must list 0 or 1 for each "
                                            f"of the {n} layers",
                          "give 1 (rotary positions) or 0 (none) per layer, or remove it")
        rope = [bool(f) for f in flags[:n]]
    else:
        interval = c.integer("no_rope_layer_interval", 4)
        rope = [(i + 1) % interval != 0 for i in range(n)]
    chunk = c.has("attention_chunk_size") or "attention_chunk_size" not in c.data
    types = c.strings("layer_types", _TYPES, n) or [
        "chunked_attention" if r and chunk else "full_attention" for r in rope]
    if "chunked_attention" in types and not chunk:
        raise c.error("layer_types", "layer_types lists chunked_attention layers but "
                                     "attention_chunk_size is null",
                      "give attention_chunk_size, or list full_attention layers")
    if c.has("moe_layers"):
        moe = set(c.integers("moe_layers"))
        if any(i >= n for i in moe):
            raise c.error("moe_layers", f"moe_layers names a layer beyond the last ({n - 1})",
                          "list layers 0 .. num_hidden_layers - 1")
    else:
        step = c.integer("interleave_moe_layer_step", 1)
        moe = set(range(step - 1, n, step))
    return [(r, t == "chunked_attention", i in moe) for i, (r, t) in enumerate(zip(rope, types))]


def build(c: Config, o: Options) -> Declaration:
    d, heads, n = sized_decoder(c, o, "Llama 4 text", DEFAULTS, True)
    activation = c.activation("hidden_act", "silu")
    plan = _per_layer(c, n)
    c.zero("router_jitter_noise", "the declaration has no router jitter")
    executed = o.experts == "executed"
    if any(moe for *_, moe in plan):
        experts, active, key = routed_experts(c, ("num_local_experts",), 16, 1)
        moe_dims(d, experts, active, key, "num_experts_per_tok")
        if executed:
            del d.dims["O"]
        d.dim("F", "hidden width of one expert and of the shared expert",
              c.integer("intermediate_size", DEFAULTS["intermediate_size"]), "intermediate_size")
    if any(not moe for *_, moe in plan):
        d.dim("Fm", "MLP hidden width of a dense layer", c.integer("intermediate_size_mlp", 16384),
              "intermediate_size_mlp")
    if any(chunked for _, chunked, _ in plan):
        d.dim("C", "attention chunk length of the chunked layers",
              c.integer("attention_chunk_size", 8192), "attention_chunk_size")
        if o.attention == "exact":
            d.multiple = (c.integer("attention_chunk_size", 8192), "attention_chunk_size")
            d.multiple_alternative = ("or with --attention full-square (the chunk mask as "
                                      "eager attention applies it, at any length)")
            d.dim("Nc", "chunks of a sequence in the chunked layers (S / C: the sequence length "
                        "must be a multiple of attention_chunk_size)", equals="S / C")
    tuning = c.flag("attn_temperature_tuning", True)
    if tuning and any(not rope for rope, *_ in plan):
        c.integer("floor_scale", 8192)
        c.number("attn_scale", Fraction(1, 10))
    qk = Norm("rmsnorm", affine=False, module="qk_norm (L2 norm, no gain)") \
        if c.flag("use_qk_norm", True) else None
    bias = (c.flag("attention_bias", False),) * 4
    attn_p = dropout(c, "attention_dropout")
    expert_ffn = Moe(activation, renormalize=False, scores="topk-sigmoid",
                     routing="the k largest logits kept", weighting="input",
                     modules=("router.weight", "experts.gate_up_proj", "experts.down_proj"),
                     every_expert=executed)
    shared = Shared("F", comment="the shared expert: a gated MLP of intermediate_size on every "
                                 "token", module="shared_expert's")
    kinds = []
    for rope, chunked, moe in dict.fromkeys(plan):
        attn = ("chunked" if chunked else "full") + ("" if rope else "_nope")
        name = f"{attn}_{'moe' if moe else 'dense'}"
        label = (("chunked-attention" if chunked else "full-attention") + " layers"
                 + ("" if rope else " without rotary positions (NoPE)")
                 + (", MoE" if moe else ", dense MLP"))
        kinds.append(Kind(
            name, label, plan.count((rope, chunked, moe)),
            Attention(heads, bias, qk if rope else None, qk_norm_after_rotary=True,
                      rotary=rope, interleaved=True, chunked=chunked, count=o.attention,
                      dropout=attn_p,
                      query_scale="tau" if tuning and not rope else None),
            expert_ffn if moe else Mlp(True, activation, width="Fm"),
            shared if moe else None,
            suffix="_" + "".join(w[0] for w in name.split("_")),
            count_key="no_rope_layers, moe_layers, layer_types (or their defaults)",
            title=label))
    rotary_embedding(d)
    layers(d, kinds, Layout(Norm("rmsnorm"), mlp_names=("gate_proj", "up_proj", "down_proj")),
           "Llama 4")
    model_head(d, Norm("rmsnorm", module="norm"), c.flag("tie_word_embeddings", False),
               "tie_word_embeddings")
    if any(moe for *_, moe in plan):
        d.executed_differs = True
        d.header.insert(-1, "Experts as transformers 5.24 runs them in eager mode (--experts "
                            "executed): every expert on every token." if executed else
                        "Experts as the model defines them: each token's k experts "
                        "(transformers 5.24 runs every expert on every token: import-hf "
                        "--experts executed).")
    return d


#: the multimodal wrapper's keys, read only to refuse it with its advice.
_MULTIMODAL = frozenset({"text_config", "vision_config", "boi_token_index", "eoi_token_index",
                         "image_token_index", "tie_word_embeddings"})


def refuse_multimodal(c: Config, o: Options) -> Declaration:
    raise c.error("model_type", "model_type 'llama4' is Llama 4's multimodal model (vision "
                                "encoder, projector and text model); symflops imports its text "
                                "model",
                  "write the object under \"text_config\" to a config.json of its own (its "
                  "model_type is \"llama4_text\") and import that; " + BY_HAND)


FAMILIES = (Family("llama4_text", ("Llama4ForCausalLM",), READ, IGNORED, build),
            Family("llama4", ("Llama4ForConditionalGeneration",), _MULTIMODAL, frozenset(),
                   refuse_multimodal))
