"""Llama-like decoders of 2024-2026, as transformers 5.24 builds them:
``smollm3``, ``granite``, ``glm4``, ``exaone4``, ``ernie4_5``.

Each layer: attention with grouped key/value heads and rotary positions, a gated
MLP, RMSNorms.  What each family changes:

* ``smollm3``: layers without rotary positions (``no_rope_layers``, 1 = rotary,
  default every ``no_rope_layer_interval``-th layer NoPE); ``layer_types`` with
  ``sliding_window`` (by default sliding only where ``use_sliding_window`` and the
  layer is NoPE); ``attention_bias`` (q, k, v, o), ``mlp_bias``; tied by default;
* ``granite``: the four multipliers: the embedding times ``embedding_multiplier``,
  the scores times ``attention_multiplier`` (instead of 1/sqrt(head_dim)), each
  branch times ``residual_multiplier`` before its residual, the logits divided by
  ``logits_scaling``; ``attention_bias``, ``mlp_bias``;
* ``glm4``: four norms a layer (``post_self_attn_layernorm`` and
  ``post_mlp_layernorm`` on the branches' outputs); ``partial_rotary_factor``
  (default 0.5) of interleaved pairs; biases on q, k and v (``attention_bias``,
  default true; o_proj has none); ``head_dim`` (default 128); the fused
  ``gate_up_proj`` written as its halves;
* ``exaone4``: norms after the sub-layers (OLMo 2's placement), q_norm and k_norm
  per head; ``layer_types`` (or an integer ``sliding_window_pattern``) with
  ``sliding_window``: in a model with sliding-window layers only they rotate, the
  global ones have no position signal;
* ``ernie4_5``: ``use_bias`` (q, k, v, o and the MLP), interleaved rotary pairs,
  ``head_dim`` (default 128); tied by default.
"""

from __future__ import annotations

from dataclasses import replace
from fractions import Fraction

from ..attention import Attention
from ..config import BY_HAND, Config
from ..emit import Declaration
from ..layers import Kind, Layout, layers
from ..parts import Mlp, Norm, model_head, rotary_embedding
from .common import Family, Options, dropout, number_text, partial_rotary, rope_keys, \
    rotary_fraction, sized_decoder, types_of

_BASE = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
         "num_attention_heads", "num_key_value_heads", "hidden_act", "max_position_embeddings",
         "tie_word_embeddings")
_TYPES = ("full_attention", "sliding_attention")
READ = {
    "smollm3": frozenset(_BASE + ("attention_bias", "mlp_bias", "attention_dropout",
                                  "no_rope_layers", "no_rope_layer_interval", "layer_types",
                                  "use_sliding_window", "sliding_window")),
    "granite": frozenset(_BASE + ("attention_bias", "mlp_bias", "attention_dropout",
                                  "embedding_multiplier", "attention_multiplier",
                                  "residual_multiplier", "logits_scaling")),
    "glm4": frozenset(_BASE + ("head_dim", "attention_bias", "attention_dropout",
                               "partial_rotary_factor", "rope_parameters", "rope_scaling")),
    "exaone4": frozenset(_BASE + ("head_dim", "attention_dropout", "sliding_window",
                                  "sliding_window_pattern", "layer_types")),
    "ernie4_5": frozenset(_BASE + ("head_dim", "use_bias")),
}
IGNORED = {
    # pretraining_tp and max_window_layers: published by SmolLM3-3B, not read by
    # transformers' SmolLM3 (layer_types and no_rope_layers decide)
    "smollm3": frozenset(rope_keys("rms_norm_eps", "pretraining_tp", "max_window_layers")),
    "granite": frozenset(rope_keys("rms_norm_eps")),
    "glm4": frozenset(("rope_theta", "rms_norm_eps")),
    "exaone4": frozenset(rope_keys("rms_norm_eps")),
    "ernie4_5": frozenset(rope_keys("rms_norm_eps")),
}
TITLES = {"smollm3": "SmolLM3", "granite": "Granite", "glm4": "GLM-4", "exaone4": "EXAONE 4",
          "ernie4_5": "ERNIE 4.5"}
LM = {"smollm3": ("SmolLM3ForCausalLM",), "granite": ("GraniteForCausalLM",),
      "glm4": ("Glm4ForCausalLM",), "exaone4": ("Exaone4ForCausalLM",),
      "ernie4_5": ("Ernie4_5ForCausalLM",)}
#: the config classes' defaults (transformers 5.24) for absent keys, and whether tied
DEFAULTS = {
    "smollm3": dict(vocab_size=128256, hidden_size=2048, intermediate_size=11008,
                    num_hidden_layers=36, num_attention_heads=16, num_key_value_heads=4,
                    max_position_embeddings=32768),
    "granite": dict(vocab_size=32000, hidden_size=4096, intermediate_size=11008,
                    num_hidden_layers=32, num_attention_heads=32,
                    max_position_embeddings=2048),
    "glm4": dict(vocab_size=151552, hidden_size=4096, intermediate_size=13696,
                 num_hidden_layers=40, num_attention_heads=32, num_key_value_heads=2,
                 head_dim=128, max_position_embeddings=131072),
    "exaone4": dict(vocab_size=102400, hidden_size=4096, intermediate_size=16384,
                    num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=32,
                    max_position_embeddings=2048),
    "ernie4_5": dict(vocab_size=103424, hidden_size=1024, intermediate_size=3072,
                     num_hidden_layers=18, num_attention_heads=16, num_key_value_heads=2,
                     head_dim=128, max_position_embeddings=131072),
}
TIED = {"smollm3": True, "granite": False, "glm4": False, "exaone4": False, "ernie4_5": True}


def _flags(c: Config, key: str, layers: int) -> list[int]:
    """A list of 0/1 per layer (transformers reads the first ``layers``)."""
    values = c.integers(key)
    if len(values) < layers or any(v not in (0, 1) for v in values):
        raise c.error(key, f"key {key!r} must list 0 or 1 for each of the {layers} layers",
                      f"give {layers} entries (1: rotary positions, 0: none), or remove {key}")
    return list(values[:layers])


def _smollm3(c: Config, n: int) -> list[tuple[bool, bool]]:
    """(rotary, sliding) of each SmolLM3 layer, as SmolLM3Config lays them out."""
    interval = c.integer("no_rope_layer_interval", 4)
    rope = _flags(c, "no_rope_layers", n) if c.integers("no_rope_layers") else \
        [int((i + 1) % interval != 0) for i in range(n)]
    windowed = c.flag("use_sliding_window", False) and c.has("sliding_window")
    types = types_of(c, n, _TYPES, ["sliding_attention" if windowed and not r else
                                    "full_attention" for r in rope])
    return [(bool(r), t == "sliding_attention") for r, t in zip(rope, types)]


def _exaone4(c: Config, n: int) -> list[tuple[bool, bool]]:
    """(rotary, sliding) of each EXAONE 4 layer."""
    windowed = c.has("sliding_window") or "sliding_window" not in c.data
    pattern = c.data.get("sliding_window_pattern", 4) if windowed else 0
    if c.has("layer_types"):
        types = types_of(c, n, _TYPES, [])
    elif isinstance(pattern, bool) or not isinstance(pattern, int) or pattern < 1:
        raise c.error("sliding_window_pattern" if windowed else "sliding_window",
                      "without layer_types, Exaone4Config lays the layers out by an integer "
                      "sliding_window_pattern with a sliding_window (transformers fails on "
                      f"{pattern!r})", "give layer_types, one entry per layer")
    else:
        types = ["sliding_attention" if (i + 1) % pattern else "full_attention"
                 for i in range(n)]
    # a model with a window rotates only its sliding-window layers (global NoPE)
    return [(not windowed or t == "sliding_attention", t == "sliding_attention")
            for t in types]


def build(c: Config, o: Options) -> Declaration:
    t = c.model_type
    dflt = DEFAULTS[t]
    d, heads, n = sized_decoder(c, o, TITLES[t], dflt, "head_dim" in READ[t])
    d.dim("F", "MLP hidden width", c.integer("intermediate_size", dflt["intermediate_size"]),
          "intermediate_size")
    activation = c.activation("hidden_act", "silu")
    attn_p = dropout(c, "attention_dropout") if "attention_dropout" in READ[t] else None
    layout = Layout(Norm("rmsnorm"))
    base = Attention(heads, count=o.attention, dropout=attn_p)
    mlp = Mlp(True, activation)
    embed_scale = head_scale = None
    plan = [(True, False)] * n        # (rotary, sliding) of each layer
    if t == "smollm3":
        base = Attention(heads, (c.flag("attention_bias", False),) * 4, count=o.attention,
                         dropout=attn_p)
        mlp = Mlp(True, activation, c.flag("mlp_bias", False))
        plan = _smollm3(c, n)
    elif t == "granite":
        def scale(key: str) -> str:
            value = c.number(key, Fraction(1))
            assert value is not None
            return number_text(value, c.data.get(key))
        residual = scale("residual_multiplier")
        base = Attention(heads, (c.flag("attention_bias", False),) * 4, count=o.attention,
                         dropout=attn_p, multiplier=scale("attention_multiplier"),
                         residual_scale=residual)
        mlp = Mlp(True, activation, c.flag("mlp_bias", False), residual_scale=residual)
        embed_scale = scale("embedding_multiplier")
        head_scale = ("/", scale("logits_scaling"), "logits_scaling")
    elif t == "glm4":
        width = d.dims["E"].value
        assert width is not None
        fraction, key = rotary_fraction(c, Fraction(1, 2))
        partial = partial_rotary(d, c, key, width, int(width * float(fraction)))
        base = Attention(heads, (c.flag("attention_bias", True),) * 3 + (False,),
                         partial=partial, interleaved=True, count=o.attention, dropout=attn_p)
        layout = Layout(Norm("rmsnorm"), "sandwich",
                        ("input_layernorm", "post_self_attn_layernorm",
                         "post_attention_layernorm", "post_mlp_layernorm"),
                        mlp_names=("gate_up_proj, first half", "gate_up_proj, second half",
                                   "down_proj"))
    elif t == "exaone4":
        base = Attention(heads, qk_norm=Norm("rmsnorm", module="q_norm / k_norm"),
                         count=o.attention, dropout=attn_p)
        layout = Layout(Norm("rmsnorm"), "post",
                        ("post_attention_layernorm", "post_feedforward_layernorm"))
        plan = _exaone4(c, n)
    else:
        bias = c.flag("use_bias", False)
        base = Attention(heads, (bias,) * 4, interleaved=True, count=o.attention)
        mlp = Mlp(True, activation, bias)
    if any(sliding for _, sliding in plan):
        if "sliding_window" in c.data and c.data["sliding_window"] is None:
            raise c.error("sliding_window", "key 'sliding_window' is null but some layers are "
                                            "sliding_attention layers",
                          "give sliding_window, the window's length in positions; " + BY_HAND)
        d.dim("W", "attention window of the sliding-window layers (positions a query sees, "
                   "itself included)", c.integer("sliding_window", 4096), "sliding_window")
    rotary_embedding(d, scale=embed_scale)
    layers(d, _kinds(c, plan, base, mlp), layout, TITLES[t])
    model_head(d, Norm("rmsnorm", module="norm"), c.flag("tie_word_embeddings", TIED[t]),
               "tie_word_embeddings", scale=head_scale)
    return d


def _kinds(c: Config, plan: list[tuple[bool, bool]], base: Attention, mlp: Mlp) -> list[Kind]:
    """One kind per distinct (rotary, sliding) of the layers, in order of appearance."""
    kinds = []
    several = len(set(plan)) > 1
    for rope, sliding in dict.fromkeys(plan):
        name = ("rope" if rope else "nope") + ("_sliding" if sliding else "")
        label = ("sliding-window" if sliding else "full-attention") + " layers" + \
            ("" if rope else " without rotary positions (NoPE)")
        kinds.append(Kind(
            name if several else "layer", label, plan.count((rope, sliding)),
            replace(base, rotary=rope, window=sliding), mlp,
            suffix="_" + "".join(w[0] for w in name.split("_")),
            count_key=", ".join(k for k in ("layer_types", "no_rope_layers",
                                            "sliding_window_pattern", "num_hidden_layers")
                                if c.has(k)) or "num_hidden_layers",
            title=label if several else ""))
    return kinds


FAMILIES = tuple(Family(t, LM[t], READ[t], IGNORED[t], build) for t in READ)
