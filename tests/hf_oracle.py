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
    """(parameters, FlopCounterMode's training FLOPs) of the Hugging Face model."""
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
    third of the configs are asked at several sequence lengths)."""
    from symflops.count.cost import costs
    from symflops.count.summary import model_part
    from symflops.derive.backward import derive
    from symflops.hf.importer import import_data
    from symflops.planner.model import imported_layer
    import sympy

    imported = import_data(json.loads(text), "config.json", text, attention, experts)
    layer = imported_layer(imported)
    d = derive(layer)
    # the two figures of the summary ``derive`` prints (its model part, defined
    # dims substituted), without its other quantities
    model = model_part(d, costs(d, choice="minimum"))
    total = sympy.expand(model.per_token.flops.total * layer.tokens)  # per token x B S
    return dict(imported.dims), model.parameters.total, total


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
