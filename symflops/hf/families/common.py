"""What the family modules share: the options of an import, a family's
record, and the dims every decoder has."""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Callable, Literal

from ..config import BY_HAND, Config
from ..emit import Block, Declaration, Dim
from ..parts import AttentionCount


#: how routed experts are counted: as the model defines them (each token's k
#: experts) or as transformers 5.24 runs them in eager mode where that differs
#: (Llama 4: every expert on every token)
ExpertsCount = Literal["model", "executed"]


@dataclass(frozen=True)
class Options:
    attention: AttentionCount = "exact"
    name: str = "config"          # the configuration's name in ``examples:``
    source: str = "config.json"   # the config file, for the title and comments
    experts: ExpertsCount = "model"


@dataclass(frozen=True)
class Family:
    model_type: str
    lm_classes: tuple[str, ...]   # what ``architectures`` may name
    read: frozenset[str]          # keys the family reads
    ignored: frozenset[str]       # keys that change no count, beyond config.IGNORED
    build: Callable[[Config, Options], Declaration]


#: rotary settings: the frequencies and their scaling change no parameter, no
#: FLOP count (the tables' values) and no memory count (their shape is S x E).
ROPE = ("rope_theta", "rope_scaling", "rope_parameters")


def rope_keys(*more: str) -> tuple[str, ...]:
    return ROPE + more


def model_base(c: Config, o: Options, title: str) -> Declaration:
    """A declaration named after the config, with B and S."""
    d = Declaration(name=f"{c.model_type}", title=title, example=o.name)
    d.header = [f"A whole-model declaration written by `symflops import-hf {o.source}`",
                f"(model_type {c.model_type}). Each dim's config key is in the comment beside "
                "it; the values", "are under examples: at the end. Edit it and run it as "
                "any declaration:", "symflops derive/eval/render/plan FILE."
                + ("" if o.attention == "exact" else
                   "  Attention products are counted over the full S x S square "
                   "(--attention full-square)."), ""]
    d.dim("B", "sequences in the micro-batch", 1, "1 (chosen)")
    return d


def decoder_dims(d: Declaration, c: Config, *, heads: str, kv: str | None, width: str,
                 head_dim: str | None, vocab: str = "vocab_size",
                 context: str = "max_position_embeddings",
                 defaults: dict[str, int] | None = None) -> bool:
    """V, S, D, N (and G, R when key/value heads are grouped), E; whether grouped.
    ``defaults``: the config class's defaults of absent keys (a ``head_dim``
    default is used instead of ``hidden_size / num_attention_heads``)."""
    dflt = defaults or {}
    d.dim("V", "vocabulary size", c.integer(vocab, dflt.get(vocab)), vocab)
    d.dim("S", "sequence length (the context)", c.integer(context, dflt.get(context)), context)
    w = c.integer(width, dflt.get(width))
    d.dim("D", "model width (d_model)", w, width)
    n = c.integer(heads, dflt.get(heads))
    g = c.integer(kv, dflt.get(kv, n)) if kv is not None else n
    if n % g:
        raise c.error(kv or heads, f"{heads} = {n} is not a multiple of {kv} = {g}",
                      "each key/value head serves a whole group of query heads")
    if head_dim is not None and (c.has(head_dim) or head_dim in dflt):
        e = c.integer(head_dim, dflt.get(head_dim))
        key = head_dim
    else:
        e = c.divide(width, w, heads, n, f"give {head_dim or 'head_dim'} explicitly, or "
                                         f"check {heads}")
        key = f"{width} / {heads}"
    grouped = g != n
    if grouped:
        d.dim("N", "query heads", n, heads)
        d.dim("G", "key/value heads (groups of query heads sharing one key and value)", g, kv)
        d.dim("R", "query heads per key/value head", equals="N / G")
    else:
        d.dim("N", "attention heads (each with its own key and value)", n,
              heads + (f" (= {kv})" if kv and c.has(kv) else ""))
    d.dim("E", "head width", e, key)
    return grouped


def sized_decoder(c: Config, o: Options, title: str, defaults: dict[str, int],
                  head_dim: bool) -> tuple[Declaration, str, int]:
    """A decoder's declaration with its usual sizes (``hidden_size``,
    ``num_attention_heads``, ``num_key_value_heads``, ``head_dim`` when the family
    reads it, ``vocab_size``, ``max_position_embeddings``; absent keys take the
    config class's ``defaults``): the declaration, the query heads' letters
    (``"n"`` or ``"g,r"``) and the number of layers."""
    d = model_base(c, o, f"{title} decoder (from {o.source})")
    grouped = decoder_dims(d, c, heads="num_attention_heads", kv="num_key_value_heads",
                           width="hidden_size", head_dim="head_dim" if head_dim else None,
                           defaults=defaults)
    return d, "g,r" if grouped else "n", c.integer("num_hidden_layers",
                                                    defaults["num_hidden_layers"])


def layer_kinds(c: Config, layers: int, windowed_family: bool) -> list[tuple[str, int]]:
    """The layers' attention kinds, ``[("full" | "sliding", count), ...]``, from
    ``layer_types``, ``use_sliding_window`` with ``max_window_layers``, or (a
    family whose every layer is windowed when ``sliding_window`` is set)
    ``sliding_window``; declares ``W`` when a layer is windowed."""
    types = c.strings("layer_types", ("full_attention", "sliding_attention"), layers)
    window = c.optional_integer("sliding_window")
    if types is None:
        if windowed_family:
            types = ("sliding_attention" if window else "full_attention",) * layers
        elif c.flag("use_sliding_window", False):
            first = c.integer("max_window_layers", layers, minimum=0)
            types = tuple("sliding_attention" if i >= first else "full_attention"
                          for i in range(layers))
        else:
            types = ("full_attention",) * layers
    elif not windowed_family and not c.flag("use_sliding_window", True) \
            and "sliding_attention" in types:
        raise c.error("layer_types", "layer_types lists sliding_attention layers but "
                                     "use_sliding_window is false",
                      "make the two agree")
    sliding = types.count("sliding_attention")
    if sliding and window is None:
        raise c.error("layer_types", "some layers attend within a sliding window but "
                                     "'sliding_window' is not given",
                      "give sliding_window, the window's length in positions")
    return [(k, n) for k, n in (("full", layers - sliding), ("sliding", sliding)) if n]


def window_dim(d: Declaration, c: Config) -> None:
    d.dim("W", "attention window (positions a query sees, itself included)",
          c.integer("sliding_window"), "sliding_window")


def layer_count(d: Declaration, kind: str, count: int, kinds: int,
                key: str = "num_hidden_layers") -> str:
    """The dim repeating the blocks of one kind: L, or L_full / L_sliding;
    ``key``: the config key (or keys) that give the count."""
    if kinds == 1:
        return d.dim("L", "layers (decoder blocks)", count, key)
    return d.dim(f"L_{kind}", f"layers with {'sliding-window' if kind == 'sliding' else 'full causal'}"
                              " attention (counts do not depend on the layers' order)", count, key)


def dropout(c: Config, key: str, default: str = "0") -> str | None:
    """A dropout probability as the config writes it (``default``, transformers'
    default, when absent); None when it is 0: no dropout op."""
    if c.fraction(key, Fraction(default)) == 0:
        return None
    if not c.has(key):
        return default
    value = c.data[key]
    return repr(float(value)) if isinstance(value, float) else str(value)


def include_block(d: Declaration, blk: Block, repeat: str, x: str, y: str, suffix: str = "",
                  comment: str | None = None) -> None:
    """``blk`` included ``repeat`` times from ``x`` to ``y``; with a ``suffix``
    its own tensors renamed (two blocks of one model may not share a name)."""
    binding = {"X": x, "Y": y}
    if suffix:
        binding.update({n: n + suffix for n in blk.own() if n not in ("X", "Y")})
    d.model.include(blk.name, repeat, binding, comment)


def rotary_fraction(c: Config, default: Fraction = Fraction(1)) -> tuple[Fraction, str]:
    """``partial_rotary_factor``, at the top level or inside ``rope_parameters`` /
    ``rope_scaling`` (``default`` when absent), and the key that gives it."""
    found: tuple[str, object] | None = None
    for key in ("partial_rotary_factor", "rope_parameters", "rope_scaling"):
        value = c.data.get(key)
        if isinstance(value, dict):
            value = value.get("partial_rotary_factor")
        if value is not None and found is None:
            found = (key, value)
    if found is None:
        return default, "partial_rotary_factor"
    key, value = found
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
        where = "" if key == "partial_rotary_factor" else f" (in key {key!r})"
        raise c.error(key, f"partial_rotary_factor{where} must be a number in (0, 1], found "
                           f"{value!r}", "write it as e.g. 0.75")
    return (Fraction(repr(value)) if isinstance(value, float) else Fraction(value)), key


def partial_rotary(d: Declaration, c: Config, key: str, width: int, rotated: int) -> bool:
    """Whether only the first ``rotated`` of a head's ``width`` entries rotate (the
    rest pass through, as transformers' apply_rotary_pos_emb concatenates them);
    if so, the head width becomes ``E = E_r + E_p`` (the rotary tables ``S x E_r``,
    :func:`symflops.hf.attention.attention` with ``partial``)."""
    if rotated == width:
        return False
    if rotated < 2 or rotated % 2 or rotated > width:
        where = "" if key in ("partial_rotary_factor", "rotary_dim") else f" (in key {key!r})"
        raise c.error(key, f"{key if key == 'rotary_dim' else 'partial_rotary_factor'}{where} "
                           f"rotates {rotated} of a head's {width} entries: an even number "
                           "from 2 to the head width is needed",
                      f"check {key} and head_dim, " + BY_HAND)
    head = d.dims["E"]
    d.dims["E"] = Dim("E", head.description + " (E_r rotated + E_p passed through)",
                      equals="E_r + E_p")
    d.dim("E_r", "entries of a head the rotary embedding rotates", rotated,
          "int(head width * partial_rotary_factor)" if key != "rotary_dim" else "rotary_dim")
    d.dim("E_p", "entries of a head passed through unrotated", width - rotated,
          "head width - E_r")
    return True


def types_of(c: Config, layers: int, allowed: tuple[str, ...], default: list[str],
             key: str = "layer_types") -> list[str]:
    """Each layer's type: ``layer_types`` (one of ``allowed`` per layer) when the
    config gives it, else ``default`` (the config class's rule)."""
    given = c.strings(key, allowed, layers)
    return list(given) if given is not None else default


def routed_experts(c: Config, keys: tuple[str, ...], default: int | None,
                   active_default: int | None,
                   active_key: str = "num_experts_per_tok") -> tuple[int, int, str]:
    """The routed experts (the first of ``keys`` given; the others are aliases and
    must agree) and the experts a token is routed to; refuses the load-balancing
    loss (``output_router_logits``), which no count includes."""
    given = [k for k in keys if c.has(k)]
    values = {c.integer(k) for k in given}
    if len(values) > 1:
        raise c.error(given[1], f"{' and '.join(given)} (the same setting) disagree",
                      "give the number of routed experts once")
    key = given[0] if given else keys[0]
    experts = c.integer(key, default)
    active = c.integer(active_key, active_default)
    if active > experts:
        raise c.error(active_key, f"{active_key} = {active} exceeds {key} = {experts}",
                      "a token is routed to at most every expert")
    c.must_be("output_router_logits", False, False, "symflops counts no load-balancing loss")
    return experts, active, key


def number_text(value: Fraction, written: object = None) -> str:
    """A positive number as declaration text, exactly: as the config ``written``
    it when it is a float there (16.0), else 30, 30.5, or 61/3 in brackets."""
    if isinstance(written, float) and Fraction(repr(written)) == value:
        return repr(written)
    if value.denominator == 1:
        return str(value.numerator)
    as_float = float(value)
    if Fraction(repr(as_float)) == value:
        return repr(as_float)
    return f"({value.numerator}/{value.denominator})"


def check_expert_groups(c: Config, experts: int, active: int, limited: bool, v3: bool,
                        experts_key: str = "n_routed_experts",
                        defaults: tuple[int, int] = (8, 4)) -> None:
    """The group-limited routing (DeepSeek-V2's group_limited_greedy, DeepSeek-V3's
    and GLM-4.5's groups scored by their two best experts, ``v3``) must be able to
    run; it changes no count.  ``defaults``: n_group and topk_group when absent
    (``v3``: DeepSeek-V3's 8 and 4)."""
    if not limited:
        return
    groups = c.integer("n_group", defaults[0] if v3 else None)
    kept = c.integer("topk_group", defaults[1] if v3 else None)
    size = c.divide(experts_key, experts, "n_group", groups,
                    "the experts are split into n_group equal groups")
    if kept > groups:
        raise c.error("topk_group", f"topk_group = {kept} exceeds n_group = {groups}",
                      "keep at most n_group groups")
    if v3 and size < 2:
        raise c.error("n_group", f"n_group = {groups} leaves groups of {size} expert, and "
                                 "DeepSeek-V3 scores a group by its two best experts",
                      "use groups of at least two experts")
    if kept * size < active:
        raise c.error("topk_group", f"topk_group = {kept} groups of {size} experts hold fewer "
                                    f"than num_experts_per_tok = {active}",
                      "keep enough groups for the k experts of a token")
