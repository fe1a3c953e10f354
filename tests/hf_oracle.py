"""The real model as the oracle of ``symflops import-hf``.

:func:`hf_counts` builds a config's causal language model with
``transformers`` on the ``meta`` device (shapes only: no memory, no weights
fetched), counts its parameters (each tensor once: tied weights are one) and
runs ``torch.utils.flop_counter.FlopCounterMode`` over a forward and backward
pass of one sequence of ``seq`` tokens (``input_ids = labels``), with the
eager attention path (``Q K^T`` and ``P V`` over the full square, masked
after) and, for mixtures of experts, transformers' ``batched_mm`` experts
(each token-expert pair's products; the default loop needs the routing's
values, which the meta device has not).  FlopCounterMode counts matrix
products only (mm, addmm's product, bmm, baddbmm), so it is compared with
symflops's matrix-product FLOPs (``flops.total``).

:func:`symflops_counts` imports the same config with ``--attention
full-square`` and evaluates the declaration at B = 1, S = ``seq``.

Without transformers (or torch) the tests that use these are skipped; CI
installs both (``.ci/run``).
"""

from __future__ import annotations

import functools
import json
from typing import Any, Mapping

import pytest


def meta_model(config: Mapping[str, Any]) -> tuple[Any, Any]:
    """torch and the Hugging Face model of ``config`` on the meta device, eager
    attention, experts as batched products, in training mode."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    keys = {k: v for k, v in config.items() if k not in ("model_type", "architectures")}
    cfg = transformers.AutoConfig.for_model(config["model_type"], **keys)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(
            cfg, attn_implementation="eager", experts_implementation="batched_mm")
    model.train()
    return torch, model


def hf_counts(config: Mapping[str, Any], seq: int = 32) -> tuple[int, int]:
    """(parameters, FlopCounterMode's training FLOPs) of the Hugging Face model.

    A deep model whose layers repeat a pattern (:func:`layer_pattern`) is
    not built at its depth: both counts are affine in the number of
    repeats, so they are read off the model at the three depths of one,
    two and three repeats (after the layers that come first, such as
    DeepSeek's dense ones) and carried to the config's depth.  The three
    must grow by the same amount per repeat, or the pattern was misread and
    the test fails saying so; ``test_hf_oracle_depth`` holds the result to
    the model built at its full depth."""
    pattern = layer_pattern(config)
    layers = config.get("num_hidden_layers")
    if pattern is None or layers is None:
        return direct_hf_counts(config, seq)
    first, period = pattern
    depths = [first + k * period for k in (1, 2, 3)]
    if depths[-1] > layers // 2 or (layers - first) % period:
        return direct_hf_counts(config, seq)  # nothing to gain, or a partial repeat at the end
    counts = [direct_hf_counts(at_layers(config, n), seq) for n in depths]
    steps = [tuple(b - a for a, b in zip(x, y)) for x, y in zip(counts, counts[1:])]
    assert steps[0] == steps[1], (
        f"the layers after the first {first} do not repeat every {period} (the model of "
        f"{depths} layers counts {counts}): count this config at its full depth")
    repeats = (layers - depths[0]) // period
    params, flops = (c + repeats * d for c, d in zip(counts[0], steps[0]))
    return params, flops


def direct_hf_counts(config: Mapping[str, Any], seq: int = 32) -> tuple[int, int]:
    """:func:`hf_counts` of the model built at the config's own depth."""
    torch, model = meta_model(config)
    from torch.utils.flop_counter import FlopCounterMode

    params = sum(p.numel() for p in model.parameters())
    ids = torch.zeros((1, seq), dtype=torch.long, device="meta")
    with FlopCounterMode(display=False) as counter:
        # use_cache=True whatever the config says (SmolLM3-3B publishes false): without a
        # cache transformers looks for packed sequences in the position ids, a check of
        # their values the meta device cannot run; the cache adds no matrix product
        model(input_ids=ids, labels=ids, use_cache=True).loss.backward()
    return params, counter.get_total_flops()


#: Config keys that list layer numbers (a set of layers), not one entry per layer.
_LAYER_SETS = ("moe_layers", "mlp_only_layers")
#: Words in the names of config keys that make a layer's kind depend on its
#: number modulo the key's value (decoder_sparse_step, sliding_window_pattern,
#: attn_layer_period, full_attention_interval, moe_layer_freq, ...).
_CYCLES = ("period", "interval", "step", "freq", "pattern")


def layer_pattern(config: Mapping[str, Any]) -> tuple[int, int] | None:
    """(first, period): the config's layers after its ``first`` ones repeat
    every ``period`` layers, as transformers reads the config (its class
    defaults filled in); None where that cannot be told (a key naming layer
    numbers this does not know stays a difference the check in
    :func:`hf_counts` sees).  Each layer's kind is the tuple of every
    per-layer list's entry (``layer_types``, ``no_rope_layers``, ...), its
    membership of each set of layers, its number modulo each cycle, and
    whether it is among DeepSeek's ``first_k_dense_replace`` dense layers."""
    transformers = pytest.importorskip("transformers")
    keys = {k: v for k, v in config.items() if k not in ("model_type", "architectures")}
    settings = transformers.AutoConfig.for_model(config["model_type"], **keys).to_dict()
    layers = settings.get("num_hidden_layers")
    if not isinstance(layers, int) or layers < 1:
        return None
    first = settings.get("first_k_dense_replace") or 0
    lists = [v for k, v in settings.items() if isinstance(v, list) and len(v) == layers
             and k not in _LAYER_SETS]
    sets = [set(v) for k, v in settings.items() if k in _LAYER_SETS and isinstance(v, list)]
    cycles = [len(v) if isinstance(v, str) else v for k, v in settings.items()
              if any(w in k for w in _CYCLES) and isinstance(v, (int, str))
              and not isinstance(v, bool) and (isinstance(v, str) or v > 1)]
    kinds = [(tuple(json.dumps(v[i]) for v in lists), tuple(i in s for s in sets),
              tuple(i % c for c in cycles if c), i < first) for i in range(layers)]
    for period in range(1, layers - first + 1):
        if all(kinds[i] == kinds[i + period] for i in range(first, layers - period)):
            return first, period
    return None


def symflops_counts(config: Mapping[str, Any], seq: int = 32, attention: str = "full-square",
                    tmp_path: Any = None, experts: str = "model") -> tuple[int, int]:
    """(parameters, training FLOPs) of the declaration symflops imports
    (``experts``: import-hf's --experts)."""
    from symflops.count.evaluate import number
    import sympy

    text = json.dumps(dict(config), indent=1)
    dims, parameters, total = _imported_model(text, attention, experts)
    at = {k: sympy.Integer(v) for k, v in {**dims, "B": 1, "S": seq}.items()}
    return number(parameters, at), number(total, at)


@functools.lru_cache(maxsize=None)
def _imported_model(text: str, attention: str, experts: str) -> tuple[dict, Any, Any]:
    """The config's dims, and the parameters and training FLOPs of its
    declaration as formulas, derived once per config in a test process (a
    third of the configs are asked at several sequence lengths).

    The two are the figures ``symflops derive`` prints, read where its
    summary reads them: the parameters of every class
    (:func:`symflops.count.params.param_counts`) and the step's matrix FLOPs
    (``Costs.flops_total``, which the summary divides by the tokens), defined
    dims substituted.  The rest of the summary (recomputation policies, the
    key/value cache, each block) is not asked: it was most of the time, and
    ``test_the_oracles_figures_are_those_the_summary_prints``
    (tests/test_hf_oracle_depth.py) holds these two to the summary's."""
    from symflops.core.ir import substitute
    from symflops.count.cost import costs
    from symflops.count.params import param_counts
    from symflops.derive.backward import derive
    from symflops.hf.importer import import_data
    from symflops.planner.model import imported_layer

    imported = import_data(json.loads(text), "config.json", text, attention, experts)
    layer = imported_layer(imported)
    c = costs(derive(layer), choice="minimum")
    subs = layer.substitutions
    parameters = substitute(param_counts(layer, c.trainable).total, subs)
    return dict(imported.dims), parameters, substitute(c.flops_total, subs)


def imported(config: Mapping[str, Any], attention: str = "full-square") -> Any:
    """What ``symflops import-hf`` writes for ``config`` (an :class:`Imported`)."""
    from symflops.hf.importer import import_data

    text = json.dumps(dict(config), indent=1)
    return import_data(json.loads(text), "config.json", text, attention)


def causal_surplus(seq: int, width: int, heads: int, window: int | None = None) -> int:
    """The matrix FLOPs the full square adds to one layer's causal attention: its
    two products and their four gradients, 2 FLOPs per multiply-add, over the
    pairs outside the mask (``12 N E`` per pair: scores 2E forward, 2E for each of
    dQ and dK; the mixing likewise), the pairs a query sees being ``S(S+1)/2``, or
    ``m(m+1)/2 + (S - m) W`` (``m = min(S, W)``) within a window of W."""
    m = seq if window is None else min(seq, window)
    seen = m * (m + 1) // 2 + (seq - m) * (window or 0)
    return 12 * heads * width * (seq * seq - seen)


def at_layers(config: Mapping[str, Any], layers: int = 2, **changes: Any) -> dict[str, Any]:
    """The config at ``layers`` layers, every other size as published: its lists of
    one entry per layer cut to their first ``layers`` (unless ``changes`` gives them)."""
    out = {**config, "num_hidden_layers": layers, **changes}
    for key in ("layer_types", "no_rope_layers", "attn_type_list"):
        if key in config and key not in changes and isinstance(config[key], list):
            out[key] = config[key][:layers]
    return out
