"""Typed, accounted access to the keys of one Hugging Face ``config.json``.

:class:`Config` holds the parsed file (read by :mod:`symflops.hf.json_file`:
a regular file of at most 1 MiB, nothing in it executed) and gives each key
as the type a count needs, refusing a value of the wrong type or range with
the key's name and position.  Every key of the file is one of three kinds,
checked by :func:`check_keys` before a family reads anything:

* **read** by the family (its module's ``READ``): honoured, or refused when
  the declaration cannot express the value;
* **ignored** on purpose (:data:`IGNORED` for every family, the family's
  ``IGNORED``): keys that change no parameter, FLOP or memory count symflops
  reports (token ids, generation defaults, the checkpoint's dtype, norm
  epsilons, rotary frequencies);
* anything else is refused by name: a key symflops does not know may change
  a count.

A key whose value is ``null`` is treated as absent (its default).
"""

from __future__ import annotations

import json
import math
from fractions import Fraction
from typing import Any, Iterable, Mapping

from ..core.errors import Span, SymflopsError
from .json_file import key_name, key_offsets, span_at

MAX_VALUE = 10**12           # a dimension beyond this is surely a mistake
#: a layer count beyond this is surely a mistake (the deepest published models have
#: about a hundred): families lay out their layers one by one (which are windowed,
#: which dense), so the count also bounds the import's time and memory
MAX_LAYERS = 10**5
LAYER_KEYS = frozenset({"num_hidden_layers", "n_layer", "num_layers"})

#: keys of every config that change no count symflops reports.
IGNORED = frozenset({
    "_name_or_path", "_commit_hash", "_attn_implementation", "_attn_implementation_autoset",
    "_experts_implementation", "transformers_version", "torch_dtype", "dtype", "use_cache",
    "initializer_range", "bos_token_id", "eos_token_id", "pad_token_id", "sep_token_id",
    "decoder_start_token_id", "return_dict", "output_hidden_states", "output_attentions",
    "torchscript", "use_bfloat16", "tf_legacy_loss", "chunk_size_feed_forward", "is_decoder",
    "cross_attention_hidden_size", "max_length", "min_length", "do_sample", "early_stopping",
    "num_beams", "num_beam_groups", "diversity_penalty", "temperature", "top_k", "top_p",
    "typical_p", "repetition_penalty", "length_penalty", "no_repeat_ngram_size",
    "encoder_no_repeat_ngram_size", "bad_words_ids", "num_return_sequences", "output_scores",
    "return_dict_in_generate", "forced_bos_token_id", "forced_eos_token_id",
    "remove_invalid_values", "exponential_decay_length_penalty", "suppress_tokens",
    "begin_suppress_tokens", "finetuning_task", "id2label", "label2id", "num_labels",
    "tokenizer_class", "prefix", "task_specific_params", "problem_type",
    # the remote code (trust_remote_code) a checkpoint offers: symflops counts transformers'
    # own implementation of the model_type, the model AutoModel builds without it
    "auto_map",
    # how the checkpoint stores its weights (fp8, int4, ...): parameters are counted as
    # the model's, bytes come from --precision
    "quantization_config",
})

#: keys every family reads (checked by :func:`check_common`).
COMMON_READ = frozenset({"model_type", "architectures", "is_encoder_decoder",
                         "tie_encoder_decoder", "pruned_heads"})

#: the Hugging Face activation names symflops has a function for (HF name -> symflops name).
ACTIVATIONS = {"silu": "silu", "swish": "silu", "gelu": "gelu", "gelu_new": "gelu_tanh",
               "gelu_pytorch_tanh": "gelu_tanh", "gelu_fast": None, "relu": "relu",
               "tanh": "tanh", "sigmoid": "sigmoid"}


def shown(value: Any) -> str:
    """A value for a message: scalars as JSON, long text and containers by kind
    (a file's contents are not echoed)."""
    if isinstance(value, (bool, int, float)) or value is None:
        return json.dumps(value)
    if isinstance(value, str):
        return json.dumps(value) if len(value) <= 40 else "a long string"
    return "a JSON array" if isinstance(value, list) else "a JSON object"


BY_HAND = "or write the declaration by hand and plan it (symflops plan FILE DIM=V ...)"


class Config:
    """The keys of one config file, typed, with errors that name them."""

    def __init__(self, path: str, text: str, data: Mapping[str, Any], model_type: str):
        self.path, self.text, self.data, self.model_type = path, text, data, model_type
        self.offsets = key_offsets(text)

    def span(self, key: str) -> Span | None:
        """Where the top-level key ``key`` is written in the file (None when it is not)."""
        return span_at(self.path, self.text, self.offsets.get(key, -1))

    def has(self, key: str) -> bool:
        return self.data.get(key) is not None

    def error(self, key: str, what: str, fix: str) -> SymflopsError:
        """An error at ``key``'s place (the file named once: by its position, or
        before the message when the key is not in the file)."""
        span = self.span(key)
        return SymflopsError(what if span is not None else f"{self.path}: {what}", span, fix)

    def integer(self, key: str, default: int | None = None, minimum: int = 1) -> int:
        """A whole number of at least ``minimum``; ``default`` when absent (None: required)."""
        if not self.has(key):
            if default is not None:
                return default
            if key in self.data:  # written, as null: say so, where it is
                raise self.error(key, f"key {key!r} is null, and a {self.model_type} config "
                                      "needs its value",
                                 f"write \"{key}\": <positive integer> in place of null")
            raise SymflopsError(f"{self.path}: key {key!r} is missing (required for a "
                                f"{self.model_type} config)",
                                hint=f"add \"{key}\": <positive integer> to the file")
        value = self.data[key]
        kind = "a positive integer" if minimum == 1 else f"a whole number of at least {minimum}"
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.error(key, f"key {key!r} must be {kind}, found {shown(value)}",
                             f"write {key} as a whole number such as 4096")
        if value < minimum:
            what = "positive" if minimum == 1 else f"at least {minimum}"
            raise self.error(key, f"key {key!r} must be {what}, found {value}",
                             f"write {key} as a whole number such as 4096")
        if value > MAX_VALUE:
            raise self.error(key, f"key {key!r} = {value} is beyond 10^12",
                             f"check {key}: no model has a dimension this large")
        if key in LAYER_KEYS and value > MAX_LAYERS:
            raise self.error(key, f"key {key!r} = {value:,} layers is beyond {MAX_LAYERS:,}",
                             f"check {key}: no model has this many layers")
        return value

    def optional_integer(self, key: str) -> int | None:
        return self.integer(key) if self.has(key) else None

    def flag(self, key: str, default: bool) -> bool:
        if not self.has(key):
            return default
        value = self.data[key]
        if not isinstance(value, bool):
            raise self.error(key, f"key {key!r} must be true or false, found {shown(value)}",
                             f"write {key} as true or false")
        return value

    def number(self, key: str, default: Fraction | None = None) -> Fraction | None:
        """A finite positive number, exactly as written (30.0 is 30, 0.1 is 1/10)."""
        if not self.has(key):
            return default
        value = self.data[key]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0 \
                or not math.isfinite(value):
            raise self.error(key, f"key {key!r} must be a positive number, found {shown(value)}",
                             f"write {key} as a number such as 30.0")
        return Fraction(repr(value)) if isinstance(value, float) else Fraction(value)

    def fraction(self, key: str, default: Fraction) -> Fraction:
        """A probability in [0, 1), exactly as written (0.1 is 1/10)."""
        if not self.has(key):
            return default
        value = self.data[key]
        if isinstance(value, bool) or not isinstance(value, (int, float)) \
                or not 0 <= value < 1:
            raise self.error(key, f"key {key!r} must be a probability in [0, 1), found "
                                  f"{shown(value)}", f"write {key} as a number such as 0.1")
        return Fraction(repr(value)) if isinstance(value, float) else Fraction(value)

    def choice(self, key: str, default: str, allowed: Iterable[str], why: str) -> str:
        """A text value among ``allowed``."""
        allowed = tuple(allowed)
        value = self.data[key] if self.has(key) else default
        if not isinstance(value, str) or value not in allowed:
            raise self.error(key, f"key {key!r} = {shown(value)} is not supported: {why}",
                             f"symflops reads {', '.join(map(shown, allowed))}; {BY_HAND}")
        return value

    def must_be(self, key: str, wanted: Any, default: Any, why: str) -> None:
        """Refuse ``key`` unless its value (or its default) is ``wanted``."""
        value = self.data[key] if self.has(key) else default
        if value != wanted or isinstance(value, bool) != isinstance(wanted, bool):
            raise self.error(key, f"key {key!r} = {shown(value)} is not supported: {why}",
                             f"set {key} to {shown(wanted)}, {BY_HAND}")

    def zero(self, key: str, why: str) -> None:
        """Refuse a positive probability (dropout, jitter) the declaration does not have."""
        if self.fraction(key, Fraction(0)) != 0:
            raise self.error(key, f"key {key!r} is not 0: {why}",
                             f"set {key} to 0.0 (as at inference), {BY_HAND}")

    def activation(self, key: str, default: str) -> str:
        """The symflops function of a Hugging Face activation name."""
        name = self.data[key] if self.has(key) else default
        if not isinstance(name, str) or ACTIVATIONS.get(name) is None:
            raise self.error(key, f"key {key!r} = {shown(name)} names an activation symflops "
                                  "has no function for",
                             f"symflops reads {', '.join(k for k, v in ACTIVATIONS.items() if v)}"
                             f"; {BY_HAND}")
        return ACTIVATIONS[name]  # type: ignore[return-value]

    def divide(self, key: str, total: int, parts_key: str, parts: int, fix: str) -> int:
        if total % parts:
            raise self.error(parts_key, f"{key} = {total} is not a multiple of "
                                        f"{parts_key} = {parts}", fix)
        return total // parts

    def strings(self, key: str, allowed: Iterable[str], length: int) -> tuple[str, ...] | None:
        """A list of ``length`` texts among ``allowed`` (None when absent)."""
        if not self.has(key):
            return None
        allowed = tuple(allowed)
        value = self.data[key]
        if not isinstance(value, list) or len(value) != length \
                or not all(isinstance(v, str) and v in allowed for v in value):
            raise self.error(key, f"key {key!r} must list one of "
                                  f"{', '.join(map(shown, allowed))} for each of the {length} "
                                  "layers", f"give {length} entries, or remove {key}")
        return tuple(value)

    def integers(self, key: str) -> tuple[int, ...]:
        """A list of whole numbers (layer indices); () when absent."""
        if not self.has(key):
            return ()
        value = self.data[key]
        if not isinstance(value, list) or not all(
                isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= MAX_VALUE
                for v in value):
            raise self.error(key, f"key {key!r} must be a list of layer indices",
                             f"write {key} as e.g. [0, 1]")
        return tuple(value)


#: Qwen3.5's mixture of experts: its layers are those of qwen3_5_text and qwen3_next (the
#: gated DeltaNet, the gated attention, routed experts with a gated shared expert), but no
#: oracle test has checked its config and model yet.
_QWEN3_5_MOE = ("Qwen3.5's mixture of experts is not read yet: its pieces are those of "
                "qwen3_next and qwen3_5_text, but no test has checked its config against "
                "transformers' model (docs/huggingface.md, Qwen3-Next and Qwen3.5)")
#: Families known to symflops and refused, with the reason.
NOT_READ = {"qwen3_5_moe": _QWEN3_5_MOE, "qwen3_5_moe_text": _QWEN3_5_MOE}


def model_type_of(data: Mapping[str, Any], path: str, known: Iterable[str],
                  text: str = "") -> str:
    """The config's ``model_type``; a missing, null or unknown one is refused
    (at its place in ``text``, the file, when it is there)."""
    families = ", ".join(sorted(known))
    model_type = data.get("model_type")
    span = span_at(path, text, key_offsets(text).get("model_type", -1))
    lead = "" if span is not None else f"{path}: "
    if model_type is None:
        what = "is null" if "model_type" in data else "is missing"
        raise SymflopsError(f"{lead}key 'model_type' {what}; symflops does not guess the "
                            "family of a config from its other keys", span,
                            hint=f"{'write' if span else 'add'} \"model_type\": one of "
                                 f"{families}, if the model is one of these families; {BY_HAND}")
    if not isinstance(model_type, str) or model_type not in known:
        why = NOT_READ.get(model_type) if isinstance(model_type, str) else None
        raise SymflopsError(f"{lead}model_type {shown(model_type)} is not a family symflops "
                            "reads" + (f": {why}" if why else ""), span,
                            hint=f"symflops reads {families}; for another model, write "
                                 "its declaration by hand (see derivations/llama.yaml) "
                                 "and plan it with symflops plan FILE DIM=V ...")
    return model_type


def check_keys(c: Config, read: frozenset[str], ignored: frozenset[str]) -> None:
    """Refuse a key that is neither read nor ignored on purpose."""
    known = read | COMMON_READ | IGNORED | ignored
    for key in c.data:
        if key not in known and c.data[key] is not None:
            raise c.error(key, f"key {key_name(key)} is not one symflops reads or knows to change "
                               f"no count in a {c.model_type} config, so it may change one",
                          "remove it if the model does not need it, " + BY_HAND + "; the keys "
                          "read and ignored are listed in docs/huggingface.md")


def check_common(c: Config, lm_classes: Iterable[str]) -> None:
    lms = tuple(lm_classes)
    if c.has("architectures"):
        names = c.data["architectures"]
        if not isinstance(names, list) or not names or any(n not in lms for n in names):
            listed = ", ".join(map(shown, names)) if isinstance(names, list) else shown(names)
            raise c.error("architectures", f"architectures lists {listed}: symflops counts the "
                                           f"causal language model {' or '.join(lms)}",
                          f"set architectures to [\"{lms[0]}\"] to count the language model")
    c.must_be("is_encoder_decoder", False, False, "symflops reads decoder-only models")
    c.must_be("tie_encoder_decoder", False, False, "symflops reads decoder-only models")
    if c.has("pruned_heads") and c.data["pruned_heads"] != {}:
        raise c.error("pruned_heads", "key 'pruned_heads' lists pruned attention heads, which "
                                      "the declaration does not model",
                      "write the declaration by hand with the remaining heads")
