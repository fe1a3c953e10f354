"""Gemma decoders: ``gemma`` (Gemma 1), ``gemma2`` (Gemma 2), ``gemma3_text`` (the text
model of Gemma 3).  The multimodal ``gemma3`` is refused, with advice (:func:`refuse_multimodal`).

Each block: a Gemma RMSNorm (``x * rsqrt(mean(x^2) + eps) * (1 + weight)``), causal
attention with grouped key/value heads and rotary positions, residual; a Gemma RMSNorm,
a GeGLU MLP (``gelu_pytorch_tanh(gate) * up``), residual.  What changes a count:

* every family: ``head_dim`` (its own dim E, default 256, not ``hidden_size /
  num_attention_heads``); the token embedding scaled by sqrt(``hidden_size``)
  (elementwise); the norms' gain ``1 + weight``, written as an op ``c[d] = 1 + g[d]``
  (D adds a call, as transformers computes it); ``tie_word_embeddings`` (default true);
  ``attention_bias`` (biases on q, k, v and o); ``attention_dropout`` (a dropout of the
  probabilities in training); the class defaults of ``num_key_value_heads`` (16 / 4 / 4)
  and ``head_dim`` (256) when the keys are absent;
* ``gemma``: the scores scaled by ``head_dim ** -0.5``; ``hidden_act`` (the legacy
  ``gelu`` is ``gelu_pytorch_tanh``, as transformers rewrites it);
* ``gemma2``: the attention output and the MLP output each normalised again
  (``post_attention_layernorm``, ``post_feedforward_layernorm``) before their residual,
  the MLP's input by ``pre_feedforward_layernorm``; the scores scaled by
  ``query_pre_attn_scalar ** -0.5``; ``attn_logit_softcapping`` and
  ``final_logit_softcapping`` (``c tanh(x / c)`` on the scores and on the logits, three
  elementwise ops each; an explicit ``null`` turns one off); ``layer_types`` (default:
  sliding and full layers alternating from a sliding one) with ``sliding_window``: two
  blocks, local and global, each with its repeat count (``L_sliding``, ``L_full``; no count
  depends on their order);
* ``gemma3_text``: as ``gemma2``, plus ``q_norm`` and ``k_norm`` (Gemma RMSNorms over each
  head's width, before the rotary embedding), ``layer_types`` by default from
  ``sliding_window_pattern`` (layer i is global when (i + 1) % pattern == 0, pattern 6),
  one pair of rotary tables per layer type (``rope_local_base_freq`` for the local
  layers), no attention soft-capping (transformers 5.24 stores ``attn_logit_softcapping``
  but never applies it: a value is refused), ``final_logit_softcapping`` default null.

Under ``--attention full-square`` the two attention products of every layer, local or
global, are written over the whole S x S square (eager attention's ``bmm``), the softmax
keeping the causal or windowed mask; under ``exact`` a local layer's products count
``m(m + 1)/2 + (S - m) W`` pairs, ``m = min(S, W)``.
"""

from __future__ import annotations

from fractions import Fraction

from ..attention import Attention, attention
from ..config import BY_HAND, Config
from ..emit import Block, Declaration
from ..parts import Mlp, Norm, mlp, norm, softcap_op, token_inputs
from .common import Family, Options, include_block, model_base, number_text, rope_keys

_BASE = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
         "num_attention_heads", "num_key_value_heads", "head_dim", "max_position_embeddings",
         "tie_word_embeddings", "attention_bias", "attention_dropout",
         "use_bidirectional_attention")
_LATER = ("hidden_activation", "query_pre_attn_scalar", "sliding_window", "layer_types",
          "final_logit_softcapping", "attn_logit_softcapping")
READ = {
    # hidden_activation: not a GemmaConfig field in transformers 5.24 (older versions
    # preferred it to hidden_act); accepted only when it agrees with hidden_act.
    "gemma": frozenset(_BASE + ("hidden_act", "hidden_activation")),
    # sliding_window_size: published by gemma-2-9b and -27b, not a Gemma2Config field;
    # accepted only when it equals sliding_window.
    "gemma2": frozenset(_BASE + _LATER + ("sliding_window_size",)),
    # _sliding_window_pattern: what transformers 5.x's to_dict writes beside layer_types.
    "gemma3_text": frozenset(_BASE + _LATER + ("sliding_window_pattern",
                                               "_sliding_window_pattern")),
}
IGNORED = {
    # rms_norm_eps: the eps add is counted per row whatever its value; rope keys: the
    # tables' values, not their shape (rope_theta, rope_scaling, rope_parameters).
    "gemma": frozenset(rope_keys("rms_norm_eps")),
    # hidden_act: Gemma2MLP reads hidden_activation only (the published configs carry both,
    # equal); cache_implementation ("hybrid"): the generation cache, not a training count.
    "gemma2": frozenset(rope_keys("rms_norm_eps", "hidden_act", "cache_implementation")),
    # rope_local_base_freq: the local layers' rotary theta (a table's values, not its shape).
    "gemma3_text": frozenset(rope_keys("rms_norm_eps", "rope_local_base_freq",
                                       "cache_implementation")),
}
TITLES = {"gemma": "Gemma", "gemma2": "Gemma 2", "gemma3_text": "Gemma 3 (text)"}
LM = {"gemma": ("GemmaForCausalLM",), "gemma2": ("Gemma2ForCausalLM",),
      "gemma3_text": ("Gemma3ForCausalLM",)}

#: transformers 5.24's class defaults, used when a key is absent (Gemma 3's published
#: multimodal configs give only the text keys that differ from these).
DEFAULTS = {
    "gemma": dict(vocab_size=256000, hidden_size=3072, intermediate_size=24576,
                  num_hidden_layers=28, num_attention_heads=16, num_key_value_heads=16,
                  head_dim=256, max_position_embeddings=8192),
    "gemma2": dict(vocab_size=256000, hidden_size=2304, intermediate_size=9216,
                   num_hidden_layers=26, num_attention_heads=8, num_key_value_heads=4,
                   head_dim=256, max_position_embeddings=8192, query_pre_attn_scalar=256,
                   sliding_window=4096),
    "gemma3_text": dict(vocab_size=262208, hidden_size=2304, intermediate_size=9216,
                        num_hidden_layers=26, num_attention_heads=8, num_key_value_heads=4,
                        head_dim=256, max_position_embeddings=131072,
                        query_pre_attn_scalar=256, sliding_window=4096),
}
#: the soft-capping defaults (None: none), (attention, final logits).
SOFTCAPS = {"gemma": (None, None), "gemma2": (Fraction(50), Fraction(30)),
            "gemma3_text": (None, None)}

#: keys transformers' strict config refuses as null (a whole number or a text is required).
_NOT_NULL = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
             "num_attention_heads", "num_key_value_heads", "head_dim",
             "max_position_embeddings", "query_pre_attn_scalar", "hidden_act",
             "hidden_activation", "tie_word_embeddings", "attention_bias")


def _explicit_null(c: Config, key: str) -> bool:
    return key in c.data and c.data[key] is None


def _cap(c: Config, key: str) -> str | None:
    """A soft-capping value as text, None when off (an explicit null turns it off)."""
    if _explicit_null(c, key):
        return None
    default = SOFTCAPS[c.model_type][0 if key.startswith("attn") else 1]
    value = c.number(key, default)
    return None if value is None else number_text(value)


# -- parts (Gemma's forms of the shared ones; see the module docstring) ---------------

def _norm(blk: Block, out: str, x: str, gain: str, letters: str, over: str, dim: str,
          module: str, comment: str | None = None) -> list[str]:
    """A Gemma RMSNorm: ``rmsnorm_over(x) * (1 + g)``."""
    return norm(blk, Norm("rmsnorm", unit_offset=True, module=module), out, x, gain, letters,
                over, comment)


# -- reading ---------------------------------------------------------------------------

def _layer_types(c: Config, layers: int) -> list[str]:
    """Each layer's attention, ``"full_attention"`` or ``"sliding_attention"``."""
    t = c.model_type
    if t == "gemma":
        return ["full_attention"] * layers
    given = c.strings("layer_types", ("full_attention", "sliding_attention"), layers)
    if t == "gemma2":
        if given is not None:
            return list(given)
        return ["sliding_attention" if (i + 1) % 2 else "full_attention" for i in range(layers)]
    pattern = c.integer("sliding_window_pattern", 6)
    if c.has("_sliding_window_pattern") and given is None:
        written = c.integer("_sliding_window_pattern")
        if written != pattern:
            raise c.error("_sliding_window_pattern",
                          f"_sliding_window_pattern = {written} differs from the pattern "
                          f"transformers uses, sliding_window_pattern = {pattern} (it reads "
                          "only the latter back)",
                          "give layer_types, or make sliding_window_pattern the pattern meant")
    if given is not None:
        return list(given)
    return ["sliding_attention" if (i + 1) % pattern else "full_attention"
            for i in range(layers)]


def _window(c: Config) -> int:
    if _explicit_null(c, "sliding_window"):
        raise c.error("sliding_window", "key 'sliding_window' is null but some layers are "
                                        "sliding_attention layers (transformers fails on it)",
                      "give sliding_window, the window's length in positions")
    w = c.integer("sliding_window", DEFAULTS[c.model_type]["sliding_window"])
    if c.has("sliding_window_size") and c.integer("sliding_window_size") != w:
        raise c.error("sliding_window_size",
                      f"sliding_window_size = {c.data['sliding_window_size']} differs from "
                      f"sliding_window = {w}; transformers reads only sliding_window",
                      "remove sliding_window_size or make the two agree")
    return w


def build(c: Config, o: Options) -> Declaration:
    t = c.model_type
    dflt = DEFAULTS[t]
    # (Gemma 1's hidden_activation may be null: GemmaConfig has no such field; Gemma 2 and
    # 3 ignore hidden_act)
    skip = ("hidden_activation",) if t == "gemma" else ("hidden_act",)
    for key in _NOT_NULL:
        if key not in skip and _explicit_null(c, key):
            raise c.error(key, f"key {key!r} is null; transformers' {TITLES[t]} config "
                               "requires a value", f"give {key}, or remove it for its default")
    c.must_be("use_bidirectional_attention", False, False,
              "a bidirectional encoder (EmbeddingGemma), not a causal language model")
    d = model_base(c, o, f"{TITLES[t]} decoder (from {o.source})")
    d.dim("V", "vocabulary size", c.integer("vocab_size", dflt["vocab_size"]), "vocab_size")
    d.dim("S", "sequence length (the context)",
          c.integer("max_position_embeddings", dflt["max_position_embeddings"]),
          "max_position_embeddings")
    width = c.integer("hidden_size", dflt["hidden_size"])
    d.dim("D", "model width (d_model)", width, "hidden_size")
    n = c.integer("num_attention_heads", dflt["num_attention_heads"])
    g = c.integer("num_key_value_heads", dflt["num_key_value_heads"])
    if n % g:
        raise c.error("num_key_value_heads", f"num_attention_heads = {n} is not a multiple "
                                             f"of num_key_value_heads = {g}",
                      "each key/value head serves a whole group of query heads")
    if t != "gemma" and width % n:
        raise c.error("num_attention_heads", f"hidden_size = {width} is not a multiple of "
                                             f"num_attention_heads = {n} (transformers' "
                                             f"{TITLES[t]} config refuses it)",
                      "check hidden_size and num_attention_heads")
    e = c.integer("head_dim", dflt["head_dim"])
    if e % 2:
        raise c.error("head_dim", f"head_dim = {e} is odd: rotate-half rotary positions pair "
                                  "the two halves of a head", "check head_dim")
    grouped = g != n
    if grouped:
        d.dim("N", "query heads", n, "num_attention_heads")
        d.dim("G", "key/value heads (groups of query heads sharing one key and value)", g,
              "num_key_value_heads")
        d.dim("R", "query heads per key/value head", equals="N / G")
    else:
        d.dim("N", "attention heads (each with its own key and value)", n,
              "num_attention_heads (= num_key_value_heads)")
    d.dim("E", "head width (head_dim, not hidden_size / num_attention_heads)", e, "head_dim")
    d.dim("F", "MLP hidden width", c.integer("intermediate_size", dflt["intermediate_size"]),
          "intermediate_size")
    layers = c.integer("num_hidden_layers", dflt["num_hidden_layers"])

    if t == "gemma":
        # transformers rewrites the legacy "gelu" of the Gemma 1 releases to
        # gelu_pytorch_tanh (GemmaConfig.__post_init__), which it was meant to be
        activation = "gelu_tanh" if c.data.get("hidden_act") == "gelu" else \
            c.activation("hidden_act", "gelu_pytorch_tanh")
        if c.has("hidden_activation") and activation != (
                "gelu_tanh" if c.data["hidden_activation"] == "gelu" else
                c.activation("hidden_activation", "gelu_pytorch_tanh")):
            raise c.error("hidden_activation",
                          f"hidden_activation = {c.data['hidden_activation']!r} differs from "
                          f"hidden_act = {c.data.get('hidden_act', 'gelu_pytorch_tanh')!r}; "
                          "transformers 5.24 reads only hidden_act (older versions preferred "
                          "hidden_activation)", "make the two agree, or remove hidden_activation")
        scale = "sqrt(E)"
    else:
        activation = c.activation("hidden_activation", "gelu_pytorch_tanh")
        scale = f"sqrt({c.integer('query_pre_attn_scalar', dflt['query_pre_attn_scalar'])})"
    attn_cap = _cap(c, "attn_logit_softcapping") if t == "gemma2" else None
    if t == "gemma3_text" and c.has("attn_logit_softcapping"):
        raise c.error("attn_logit_softcapping",
                      "transformers 5.24's Gemma 3 stores attn_logit_softcapping but never "
                      "applies it, so neither counting the soft-capping nor leaving it out is "
                      "safe", f"set attn_logit_softcapping to null, {BY_HAND}")
    final_cap = _cap(c, "final_logit_softcapping") if t != "gemma" else None
    p = c.fraction("attention_dropout", Fraction(0))
    dropout = None if p == 0 else number_text(p)
    bias = c.flag("attention_bias", False)
    tied = c.flag("tie_word_embeddings", True)

    types = _layer_types(c, layers)
    order = list(dict.fromkeys(types))      # the kinds, in the order they first appear
    if "sliding_attention" in types:
        d.dim("W", "attention window of the sliding-window layers (positions a query sees, "
                   "itself included)", _window(c), "sliding_window")

    token_inputs(d)
    m = d.model
    m.tensor("W_E", ["V", "D"], "param", "token embedding (embed_tokens)"
             + (", tied with lm_head" if tied else ""))
    m.op("X0[b,s,d] = W_E[tok[b,s], d] * sqrt(D)",
         "token embedding times sqrt(hidden_size) (the scaled embedding, elementwise; rotary "
         "positions add no parameter)")
    m.component("embedding", ["X0"])
    previous = "X0"
    sandwich = t != "gemma"
    for i, kind in enumerate(order):
        window = kind == "sliding_attention"
        count = types.count(kind)
        name = "layer" if len(order) == 1 else ("layer_sliding" if window else "layer_full")
        blk = d.block(name, f"{TITLES[t]} decoder block"
                      + (" (sliding window)" if window else
                         " (global attention)" if len(order) > 1 else ""))
        blk.tensor("X", ["B", "S", "D"], "input", "the block's input (the residual stream)")
        norms = _norm(blk, "Xn", "X", "g1", "b,s,d", "d", "D", "input_layernorm",
                      "attention sub-block: Gemma RMSNorm, causal attention"
                      + (", post_attention_layernorm" if sandwich else "") + ", residual")
        if t == "gemma3_text" and len(order) > 1:
            cos, sin = ("cos_l", "sin_l") if window else ("cos_g", "sin_g")
        else:
            cos, sin = "cos", "sin"
        qk = Norm("rmsnorm", unit_offset=True, module="q_norm / k_norm") \
            if t == "gemma3_text" else None
        outs = attention(d, blk, Attention("g,r" if grouped else "n", (bias,) * 4, qk,
                                           scale=scale, window=window, softcap=attn_cap,
                                           count=o.attention, dropout=dropout,
                                           tables=(cos, sin)),
                         "" if sandwich else "X", "Xn", "Ao" if sandwich else "Y1")
        if sandwich:
            norms += _norm(blk, "An", "Ao", "g2", "b,s,d", "d", "D", "post_attention_layernorm",
                           "the attention output normalised (post_attention_layernorm), then "
                           "the residual")
            blk.op("Y1[b,s,d] = X[b,s,d] + An[b,s,d]")
            norms += _norm(blk, "Yn", "Y1", "g3", "b,s,d", "d", "D",
                           "pre_feedforward_layernorm", "MLP sub-block: Gemma RMSNorm, GeGLU "
                           "MLP, post_feedforward_layernorm, residual")
            mouts = mlp(blk, Mlp(True, activation), "", "Yn", "Mo")
            norms += _norm(blk, "Mn", "Mo", "g4", "b,s,d", "d", "D",
                           "post_feedforward_layernorm")
            blk.op("Y[b,s,d] = Y1[b,s,d] + Mn[b,s,d]")
            norms += ["Y1", "Y"]
        else:
            norms += _norm(blk, "Yn", "Y1", "g2", "b,s,d", "d", "D", "post_attention_layernorm",
                           "MLP sub-block: Gemma RMSNorm, GeGLU MLP, residual")
            mouts = mlp(blk, Mlp(True, activation), "Y1", "Yn", "Y")
        blk.component("attention", outs)
        blk.component("MLP", mouts)
        blk.component("norms and residuals" if sandwich else "norms", norms)
        nxt = "XL" if i == len(order) - 1 else f"X{i + 1}"
        if len(order) == 1:
            repeat = d.dim("L", "layers (decoder blocks)", count, "num_hidden_layers")
        else:
            label = "sliding" if window else "full"
            repeat = d.dim(f"L_{label}", f"layers with {'sliding-window' if window else 'global'}"
                                         " attention (in layer_types' order; no count depends "
                                         "on it)", count, "layer_types" if c.has("layer_types")
                           else "num_hidden_layers, sliding_window_pattern"
                           if t == "gemma3_text" else "num_hidden_layers (alternating)")
        # a second block's own tensors (parameters, op outputs) would take the names the
        # first block's already have: its include gives each a suffix of its kind
        include_block(d, blk, repeat, previous, nxt, ("_s" if window else "_f") if i else "",
                      None if len(order) == 1 else
                  f"{count} layers of {'sliding-window' if window else 'global'} attention"
                  + ("" if i == 0 else f"; the block's parameters and activations renamed "
                     f"with {'_s' if window else '_f'}, apart from the first block's"))
        previous = nxt

    # the head: Gemma's final norm, the logits (tied or not), soft-capped, the loss
    _norm(m, "Xf", "XL", "g_f", "b,s,d", "d", "D", "final norm (norm)", "the final norm")
    if tied:
        m.op("Z[b,s,v] = Xf[b,s,d] W_E[v,d]", "logits; the unembedding is the token embedding "
                                              "(tie_word_embeddings: true)")
    else:
        m.tensor("W_U", ["D", "V"], "param", "unembedding (lm_head; tie_word_embeddings: false)")
        m.op("Z[b,s,v] = Xf[b,s,d] W_U[d,v]", "logits")
    logits = "Z"
    if final_cap is not None:
        logits = softcap_op(m, "Z", "b,s,v", final_cap, ("Zd", "Zt", "Zc"), "",
                          f"soft-capping of the logits at {final_cap} (final_logit_softcapping)"
                          ": divide, tanh, multiply")
    m.op(f"Loss[] = cross_entropy_mean_v({logits}[b,s,v], y[b,s])",
         "mean cross-entropy of the next token at every position")
    m.component("final norm", ["c_f", "Xf"])
    m.component("output head", ["Z", *(["Zd", "Zt", "Zc"] if final_cap else [])])
    m.component("loss", ["Loss"])
    return d


#: the multimodal wrapper's keys, read only to refuse it with its advice.
_MULTIMODAL = frozenset({"text_config", "vision_config", "mm_tokens_per_image",
                         "boi_token_index", "eoi_token_index", "image_token_index"})


def refuse_multimodal(c: Config, o: Options) -> Declaration:
    """``gemma3`` (Gemma3ForConditionalGeneration: a SigLIP vision tower, its projector
    and the text model) is refused, with what to import instead."""
    raise c.error("model_type", "model_type 'gemma3' is Gemma 3's multimodal model (vision "
                                "tower, projector and text model); symflops imports its text "
                                "model",
                  "write the object under \"text_config\" to a config.json of its own with "
                  "\"model_type\": \"gemma3_text\" and import that (its absent keys take "
                  f"Gemma3TextConfig's defaults, as transformers does); {BY_HAND}")


FAMILIES = (*(Family(t, LM[t], READ[t], IGNORED[t], build) for t in READ),
            Family("gemma3", ("Gemma3ForConditionalGeneration",), _MULTIMODAL, frozenset(),
                   refuse_multimodal))
