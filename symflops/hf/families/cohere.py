"""Cohere Command R (``cohere``) and Command R7B / A (``cohere2``), as transformers
5.24 builds them.

A layer is parallel: one LayerNorm without bias (``input_layernorm``) feeds the
attention and the gated MLP, and both are added to the input; the final norm is
such a LayerNorm too; the logits are multiplied by ``logit_scale``; the rotary
embedding rotates interleaved pairs (GPT-J style).  What changes a count:

* ``cohere``: ``use_qk_norm`` (a LayerNorm without bias of each query and key head,
  with a gain per head: ``N x E`` and ``G x E``);
* ``cohere2``: ``layer_types`` (default from ``sliding_window_pattern``, 4: layer i
  is global when (i + 1) % 4 == 0) with ``sliding_window``; the sliding-window
  layers rotate their queries and keys, the global ones have no position signal
  (NoPE): two blocks;
* both: ``attention_bias`` (q, k, v and o), ``attention_dropout``,
  ``tie_word_embeddings`` (default true), ``hidden_act``.

Command R7B's config also carries keys of Cohere's own code that transformers
does not read; each is accepted only where it says what transformers builds.
"""

from __future__ import annotations

from fractions import Fraction

from ..attention import Attention
from ..config import BY_HAND, Config
from ..emit import Declaration
from ..layers import Kind, Layout, layers
from ..parts import Mlp, Norm, model_head, rotary_embedding
from .common import Family, Options, dropout, number_text, rope_keys, sized_decoder, types_of

_BASE = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
         "num_attention_heads", "num_key_value_heads", "hidden_act", "max_position_embeddings",
         "tie_word_embeddings", "attention_bias", "attention_dropout", "logit_scale")
#: keys of Cohere's own code in Command R7B's config (transformers does not read them):
#: accepted only when they agree with what transformers builds
_LEGACY = {"order_of_interleaved_layers": "local_attn_first",
           "position_embedding_type": "rope_gptj", "rotary_pct": 1.0,
           "use_gated_activation": True}
READ = {
    "cohere": frozenset(_BASE + ("use_qk_norm",)),
    "cohere2": frozenset(_BASE + ("sliding_window", "layer_types", "sliding_window_pattern",
                                  "layer_switch", "use_embedding_sharing", *_LEGACY)),
}
IGNORED = {
    "cohere": frozenset(rope_keys("layer_norm_eps")),
    # head_dim: overwritten with hidden_size / num_attention_heads by Cohere2Config;
    # cache_implementation: the generation cache
    "cohere2": frozenset(rope_keys("layer_norm_eps", "head_dim", "cache_implementation")),
}
TITLES = {"cohere": "Cohere", "cohere2": "Cohere 2"}
LM = {"cohere": ("CohereForCausalLM",), "cohere2": ("Cohere2ForCausalLM",)}
DEFAULTS = dict(vocab_size=256000, hidden_size=8192, intermediate_size=22528,
                num_hidden_layers=40, num_attention_heads=64, max_position_embeddings=8192)


def _legacy(c: Config, pattern: int) -> None:
    for key, wanted in _LEGACY.items():
        c.must_be(key, wanted, wanted, "a key of Cohere's own code that transformers does not "
                                       "read; another value describes a model it does not build")
    if c.has("layer_switch") and c.integer("layer_switch") != pattern:
        raise c.error("layer_switch", f"layer_switch = {c.data['layer_switch']} differs from "
                                      f"the pattern transformers uses ({pattern}); it reads "
                                      "only sliding_window_pattern and layer_types",
                      "make the two agree, or remove layer_switch")
    if c.has("use_embedding_sharing") and \
            c.flag("use_embedding_sharing", True) != c.flag("tie_word_embeddings", True):
        raise c.error("use_embedding_sharing", "use_embedding_sharing disagrees with "
                                               "tie_word_embeddings, which transformers reads",
                      "make the two agree, or remove use_embedding_sharing")


def build(c: Config, o: Options) -> Declaration:
    t = c.model_type
    d, heads, n = sized_decoder(c, o, TITLES[t], DEFAULTS, False)
    d.dim("F", "MLP hidden width", c.integer("intermediate_size",
                                             DEFAULTS["intermediate_size"]), "intermediate_size")
    if "logit_scale" in c.data and c.data["logit_scale"] is None:
        raise c.error("logit_scale", "key 'logit_scale' is null: transformers multiplies the "
                                     "logits by it and fails", "give logit_scale, e.g. 0.0625")
    scale = number_text(c.number("logit_scale", Fraction(1, 16)),  # type: ignore[arg-type]
                        c.data.get("logit_scale"))
    bias = (c.flag("attention_bias", False),) * 4
    attn_p = dropout(c, "attention_dropout")
    ffn = Mlp(True, c.activation("hidden_act", "silu"))
    ln = Norm("layernorm", module="q_norm / k_norm")
    if t == "cohere":
        qk = ln if c.flag("use_qk_norm", False) else None
        kinds = [Kind("layer", "layers", n, Attention(
            heads, bias, qk, qk_norm_gain="per-head", interleaved=True, count=o.attention,
            dropout=attn_p), ffn)]
    else:
        pattern = c.integer("sliding_window_pattern", 4)
        _legacy(c, pattern)
        types = types_of(c, n, ("full_attention", "sliding_attention"),
                         ["sliding_attention" if (i + 1) % pattern else "full_attention"
                          for i in range(n)])
        if "sliding_attention" in types:
            if "sliding_window" in c.data and c.data["sliding_window"] is None:
                raise c.error("sliding_window", "key 'sliding_window' is null but some layers "
                                                "are sliding_attention layers",
                              "give sliding_window, the window's length in positions; "
                              + BY_HAND)
            d.dim("W", "attention window of the sliding-window layers (positions a query sees, "
                       "itself included)", c.integer("sliding_window", 4096), "sliding_window")
        both = len(set(types)) > 1
        kinds = [Kind("sliding" if kind == "sliding_attention" else "full",
                      "sliding-window layers" if kind == "sliding_attention" else
                      "global layers (no rotary positions)", types.count(kind),
                      Attention(heads, bias, rotary=kind == "sliding_attention",
                                interleaved=True, window=kind == "sliding_attention",
                                count=o.attention, dropout=attn_p), ffn,
                      suffix="_sw" if kind == "sliding_attention" else "_g",
                      count_key="layer_types" if c.has("layer_types") else
                      "num_hidden_layers, sliding_window_pattern",
                      title=("sliding window, rotary" if kind == "sliding_attention" else
                             "global attention, no rotary positions") if both else "")
                 for kind in dict.fromkeys(types)]
    rotary_embedding(d)
    layers(d, kinds, Layout(Norm("layernorm"), "parallel", ("input_layernorm",)), TITLES[t])
    model_head(d, Norm("layernorm", module="norm"), c.flag("tie_word_embeddings", True),
               "tie_word_embeddings", scale=("*", scale, "logit_scale"))
    return d


FAMILIES = tuple(Family(t, LM[t], READ[t], IGNORED[t], build) for t in READ)
