"""Read the architecture of a decoder-only model from a Hugging Face ``config.json``.

Only the standard :mod:`json` module reads the file; nothing in it is executed.
Three families are recognised, by ``model_type`` when the file has one, else by
its keys:

``llama`` (``model_type`` ``llama`` or ``mistral``)
    required: ``hidden_size``, ``num_hidden_layers``, ``num_attention_heads``,
    ``intermediate_size``, ``vocab_size``, ``max_position_embeddings``;
    optional: ``num_key_value_heads`` (default: the number of heads),
    ``head_dim`` (default ``hidden_size / num_attention_heads``),
    ``tie_word_embeddings`` (default false), ``attention_bias`` and
    ``mlp_bias`` (default false). SwiGLU MLP, RMSNorm, rotary positions.
``mixtral`` (``model_type`` ``mixtral``)
    the same keys plus ``num_local_experts`` and ``num_experts_per_tok``
    (both required): a mixture of SwiGLU experts in every layer.
``gpt2`` (``model_type`` ``gpt2``)
    required: ``n_embd``, ``n_layer``, ``n_head``, ``vocab_size``,
    ``n_positions``; optional: ``n_inner`` (default ``4 n_embd``; ``null``
    means the default). GELU MLP, LayerNorm, biases, learned positions, the
    output projection tied to the token embedding.

Every other key is ignored (configs carry many: dropout rates, token ids,
rope scaling, dtypes). A missing required key, a value of the wrong type, or a
file that matches no family is a :class:`SymflopsError` naming the key and
the file.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any, Mapping

from .errors import Span, SymflopsError, read_text


@dataclass(frozen=True)
class Architecture:
    family: str            # "llama", "mixtral" or "gpt2"
    layers: int
    width: int             # d_model
    heads: int             # query heads
    kv_heads: int          # key/value heads (= heads without grouped-query attention)
    head_width: int
    mlp_width: int         # hidden width of the MLP (of each expert)
    vocab: int
    experts: int           # MLP experts per layer (1: dense)
    active_experts: int    # experts each token is routed to (1: dense)
    tied: bool             # output projection shares the token-embedding matrix
    context: int           # longest sequence the positions allow
    mlp: str               # "gelu" or "swiglu"
    norm: str              # "layernorm" or "rmsnorm"
    biases: bool           # linear layers carry biases
    position: str          # "learned" or "rotary"


#: model_type -> family; the families' keys are listed in the module docstring.
MODEL_TYPES = {"llama": "llama", "mistral": "llama", "mixtral": "mixtral", "gpt2": "gpt2"}

_FIX_TYPE = "set model_type to one of " + ", ".join(sorted(MODEL_TYPES))


class _Reader:
    """Typed access to the keys of one config file, with errors that name them."""

    def __init__(self, path: str, text: str, data: Mapping[str, Any]):
        self.path, self.text, self.data = path, text, data

    def span(self, key: str) -> Span | None:
        """Where ``"key":`` first appears in the file (None when it does not)."""
        at = self.text.find(f'"{key}"')
        if at < 0:
            return None
        line = self.text.count("\n", 0, at) + 1
        start = self.text.rfind("\n", 0, at) + 1
        end = self.text.find("\n", at)
        return Span(self.path, line, at - start + 1, self.text[start:end if end >= 0 else None])

    def has(self, key: str) -> bool:
        return self.data.get(key) is not None

    def integer(self, key: str, default: int | None = None, *, family: str) -> int:
        if not self.has(key):
            if default is not None:
                return default
            raise SymflopsError(f"{self.path}: key {key!r} is missing (required for a "
                                f"{family} config)",
                                hint=f"add \"{key}\": <positive integer> to the file")
        value = self.data[key]
        if isinstance(value, bool) or not isinstance(value, int):
            raise SymflopsError(f"{self.path}: key {key!r} must be a positive integer, "
                                f"found {json.dumps(value)}", self.span(key),
                                f"write {key} as a whole number such as 4096")
        if value < 1:
            raise SymflopsError(f"{self.path}: key {key!r} must be positive, found {value}",
                                self.span(key), f"write {key} as a whole number such as 4096")
        return value

    def flag(self, key: str, default: bool) -> bool:
        if not self.has(key):
            return default
        value = self.data[key]
        if not isinstance(value, bool):
            raise SymflopsError(f"{self.path}: key {key!r} must be true or false, "
                                f"found {json.dumps(value)}", self.span(key),
                                f"write {key} as true or false")
        return value

    def divide(self, key: str, total: int, parts_key: str, parts: int) -> int:
        if total % parts:
            raise SymflopsError(f"{self.path}: {key} = {total} is not a multiple of "
                                f"{parts_key} = {parts}", self.span(parts_key),
                                f"give head_dim explicitly, or check {parts_key}")
        return total // parts


def family_of(data: Mapping[str, Any], path: str) -> str:
    """The family of a parsed config: by ``model_type``, else by its keys."""
    model_type = data.get("model_type")
    if model_type is not None:
        if not isinstance(model_type, str) or model_type not in MODEL_TYPES:
            raise SymflopsError(f"{path}: model_type {json.dumps(model_type)} is not a "
                                f"decoder-only family symflops reads",
                                hint=f"symflops reads {', '.join(sorted(MODEL_TYPES))} configs")
        return MODEL_TYPES[model_type]
    if "n_embd" in data and "n_layer" in data:
        return "gpt2"
    if "num_local_experts" in data:
        return "mixtral"
    if "hidden_size" in data and "num_hidden_layers" in data:
        return "llama"
    raise SymflopsError(f"{path}: no model_type, and the keys match no family symflops reads",
                        hint="a Llama/Mistral config has hidden_size and num_hidden_layers, "
                             "a Mixtral config also num_local_experts, a GPT-2 config n_embd "
                             "and n_layer; or " + _FIX_TYPE)


def architecture(data: Mapping[str, Any], path: str = "config.json", text: str = "") -> Architecture:
    """The architecture described by a parsed config (``text``: the file, for positions)."""
    if not isinstance(data, Mapping):
        raise SymflopsError(f"{path}: a config.json must hold a JSON object, found "
                            f"{type(data).__name__}", hint="give the model's config.json")
    family = family_of(data, path)
    r = _Reader(path, text, data)
    if family == "gpt2":
        width = r.integer("n_embd", family=family)
        heads = r.integer("n_head", family=family)
        return Architecture(
            family=family, layers=r.integer("n_layer", family=family), width=width, heads=heads,
            kv_heads=heads, head_width=r.divide("n_embd", width, "n_head", heads),
            mlp_width=r.integer("n_inner", 4 * width, family=family),
            vocab=r.integer("vocab_size", family=family), experts=1, active_experts=1, tied=True,
            context=r.integer("n_positions", family=family), mlp="gelu", norm="layernorm",
            biases=True, position="learned")
    width = r.integer("hidden_size", family=family)
    heads = r.integer("num_attention_heads", family=family)
    kv_heads = r.integer("num_key_value_heads", heads, family=family)
    if heads % kv_heads:
        raise SymflopsError(f"{path}: num_attention_heads = {heads} is not a multiple of "
                            f"num_key_value_heads = {kv_heads}", r.span("num_key_value_heads"),
                            "each key/value head serves a whole group of query heads")
    if r.has("head_dim"):
        head_width = r.integer("head_dim", family=family)
    else:
        head_width = r.divide("hidden_size", width, "num_attention_heads", heads)
    experts, active = 1, 1
    if family == "mixtral":
        experts = r.integer("num_local_experts", family=family)
        active = r.integer("num_experts_per_tok", family=family)
        if active > experts:
            raise SymflopsError(f"{path}: num_experts_per_tok = {active} exceeds "
                                f"num_local_experts = {experts}", r.span("num_experts_per_tok"),
                                "a token is routed to at most every expert")
    return Architecture(
        family=family, layers=r.integer("num_hidden_layers", family=family), width=width,
        heads=heads, kv_heads=kv_heads, head_width=head_width,
        mlp_width=r.integer("intermediate_size", family=family),
        vocab=r.integer("vocab_size", family=family), experts=experts, active_experts=active,
        tied=r.flag("tie_word_embeddings", False),
        context=r.integer("max_position_embeddings", family=family), mlp="swiglu", norm="rmsnorm",
        biases=r.flag("attention_bias", False) or r.flag("mlp_bias", False), position="rotary")


def load(path: str | os.PathLike) -> Architecture:
    """Read ``config.json`` at ``path`` into an :class:`Architecture`."""
    path = os.fspath(path)
    text = read_text(path, "give the path of a Hugging Face config.json")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        lines = text.splitlines()
        line_text = lines[exc.lineno - 1] if 0 < exc.lineno <= len(lines) else None
        raise SymflopsError(f"not valid JSON: {exc.msg}",
                            Span(path, exc.lineno, exc.colno, line_text),
                            "a config.json is one JSON object") from None
    return architecture(data, path, text)
