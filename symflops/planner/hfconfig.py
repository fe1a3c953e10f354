"""Read the architecture of a decoder-only model from a Hugging Face ``config.json``.

Only the standard :mod:`json` module reads the file
(:mod:`symflops.hf.json_file`: at most 1 MiB, integers of at most 30
digits, nesting as deep as the parser allows); nothing in it is executed.
The family comes from ``model_type`` (``llama``, ``mistral``, ``mixtral``,
``gpt2``); a config without one is refused, never guessed from its keys.
Every key of the file is one of three kinds, and anything else is refused
with its name (a key this module does not know may change a count):

**read** (honoured, or refused when the shipped declaration cannot express
the value; ``null`` means the key's default):

``llama``, ``mistral``, ``mixtral``
    required ``hidden_size``, ``num_hidden_layers``, ``num_attention_heads``,
    ``intermediate_size``, ``vocab_size``, ``max_position_embeddings``;
    ``num_key_value_heads`` (default: the heads), ``head_dim`` (default
    ``hidden_size / num_attention_heads``), ``tie_word_embeddings`` (default
    false), ``hidden_act`` (default ``silu``: the gate of the SwiGLU MLP;
    ``gelu``, ``gelu_new``, ``gelu_pytorch_tanh``, ``relu``, ``tanh``,
    ``sigmoid`` are honoured, others refused), ``attention_dropout`` (must
    be 0: the declarations have no attention dropout).
    ``llama`` also: ``attention_bias`` (biases on q, k, v, o),
    ``mlp_bias`` (on gate, up, down); both default false.  ``mistral`` and
    ``mixtral`` have no biases (the two keys must be false) and also read
    ``sliding_window``: windowed attention costs less than the causal
    attention the declarations count, so a plan at a context longer than the
    window is refused (:class:`Architecture` carries it; the planner checks).
    ``mixtral`` also: ``num_local_experts`` and ``num_experts_per_tok``
    (required), ``output_router_logits`` (must be false: no load-balancing
    loss is counted), ``router_jitter_noise`` (must be 0).
``gpt2``
    required ``n_embd``, ``n_layer``, ``n_head``, ``vocab_size``,
    ``n_positions``; ``n_inner`` (default ``4 n_embd``),
    ``activation_function`` (default ``gelu_new``, the tanh approximation;
    the others as for ``hidden_act``), ``embd_pdrop`` (default 0.1: the
    embeddings are dropped out when it is positive), ``attn_pdrop`` and
    ``resid_pdrop`` (default 0.1: must be positive, the declaration drops
    out the attention probabilities and both residual branches; the
    probability itself changes no count), ``tie_word_embeddings`` (must be
    true), ``scale_attn_weights`` (must be true), ``scale_attn_by_inverse_layer_idx``,
    ``reorder_and_upcast_attn`` and ``add_cross_attention`` (must be false).
every family
    ``model_type``; ``architectures`` (the family's causal language model:
    ``LlamaForCausalLM``, ``MistralForCausalLM``, ``MixtralForCausalLM``,
    ``GPT2LMHeadModel``); ``is_encoder_decoder``, ``tie_encoder_decoder``
    (must be false); ``pruned_heads`` (must be empty).

**ignored on purpose** (they change no count the planner reports): see
:data:`IGNORED` and :data:`FAMILY_IGNORED`: norm epsilons, rotary settings
(``rope_theta``, ``rope_scaling``: rotary positions add no parameter and no
matmul), ``pretraining_tp`` (slices the same products), token ids,
generation defaults, the checkpoint's ``torch_dtype`` (bytes come from
``--precision``), labels of classification heads (``architectures`` says
the model is the language model), GPT-2's ``n_ctx`` and ``summary_*`` (the
double-heads model's head), Mixtral's ``router_aux_loss_coef``.

A missing required key, a value of the wrong type or out of range, or a key
of the third kind is a :class:`SymflopsError` naming the key and the file.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Mapping

from ..core.errors import Span, SymflopsError
from ..hf.json_file import key_name, read_json, span_at

MAX_VALUE = 10**12           # a dimension beyond this is surely a mistake


@dataclass(frozen=True)
class Architecture:
    family: str            # "llama", "mixtral" or "gpt2" ("mistral" reads as "llama")
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
    mlp: str               # "gelu" (two matrices) or "swiglu" (gated)
    norm: str              # "layernorm" or "rmsnorm"
    attention_bias: bool   # q, k, v and output projections carry biases
    mlp_bias: bool         # the MLP's projections carry biases
    position: str          # "learned" or "rotary"
    activation: str        # the MLP's pointwise function, a symflops name ("silu", "gelu_tanh")
    sliding_window: int | None = None       # attention window (None: full causal attention)
    embedding_dropout: Fraction = Fraction(0)   # GPT-2's embd_pdrop (0: none)
    source: str = "config.json"

    @property
    def biases(self) -> bool:
        """Whether any linear layer carries a bias."""
        return self.attention_bias or self.mlp_bias


#: model_type -> family; "mistral" reads as a Llama (same declaration), with its own keys.
MODEL_TYPES = {"llama": "llama", "mistral": "llama", "mixtral": "mixtral", "gpt2": "gpt2"}

#: the Hugging Face activation names symflops has a function for (HF name -> symflops name).
ACTIVATIONS = {"silu": "silu", "swish": "silu", "gelu": "gelu", "gelu_new": "gelu_tanh",
               "gelu_pytorch_tanh": "gelu_tanh", "relu": "relu", "tanh": "tanh",
               "sigmoid": "sigmoid"}

#: the causal language model of each model_type (what ``architectures`` may name).
LM_CLASSES = {"llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM",
              "mixtral": "MixtralForCausalLM", "gpt2": "GPT2LMHeadModel"}

#: keys of every config that change no count the planner reports.
IGNORED = frozenset({
    "_name_or_path", "_commit_hash", "_attn_implementation", "_attn_implementation_autoset",
    "transformers_version", "torch_dtype", "use_cache", "initializer_range",
    "bos_token_id", "eos_token_id", "pad_token_id", "sep_token_id", "decoder_start_token_id",
    "return_dict", "output_hidden_states", "output_attentions", "torchscript", "use_bfloat16",
    "tf_legacy_loss", "chunk_size_feed_forward", "is_decoder", "cross_attention_hidden_size",
    "max_length", "min_length", "do_sample", "early_stopping", "num_beams", "num_beam_groups",
    "diversity_penalty", "temperature", "top_k", "top_p", "typical_p", "repetition_penalty",
    "length_penalty", "no_repeat_ngram_size", "encoder_no_repeat_ngram_size", "bad_words_ids",
    "num_return_sequences", "output_scores", "return_dict_in_generate", "forced_bos_token_id",
    "forced_eos_token_id", "remove_invalid_values", "exponential_decay_length_penalty",
    "suppress_tokens", "begin_suppress_tokens", "finetuning_task", "id2label", "label2id",
    "num_labels", "tokenizer_class", "prefix", "task_specific_params", "problem_type",
})

#: keys each model_type reads beyond those of every family.
_LLAMA = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
          "vocab_size", "max_position_embeddings", "num_key_value_heads", "head_dim",
          "tie_word_embeddings", "hidden_act", "attention_dropout", "attention_bias", "mlp_bias")
READ = {
    "llama": frozenset(_LLAMA),
    "mistral": frozenset(_LLAMA + ("sliding_window",)),
    "mixtral": frozenset(_LLAMA + ("sliding_window", "num_local_experts", "num_experts_per_tok",
                                   "output_router_logits", "router_jitter_noise")),
    "gpt2": frozenset(("n_embd", "n_layer", "n_head", "vocab_size", "n_positions", "n_inner",
                       "activation_function", "embd_pdrop", "attn_pdrop", "resid_pdrop",
                       "tie_word_embeddings", "scale_attn_weights",
                       "scale_attn_by_inverse_layer_idx", "reorder_and_upcast_attn",
                       "add_cross_attention")),
}
_COMMON_READ = frozenset({"model_type", "architectures", "is_encoder_decoder",
                          "tie_encoder_decoder", "pruned_heads"})

#: keys each model_type ignores on purpose beyond :data:`IGNORED`.
_ROTARY = ("rms_norm_eps", "rope_theta", "rope_scaling")
FAMILY_IGNORED = {
    "llama": frozenset(_ROTARY + ("pretraining_tp",)),
    "mistral": frozenset(_ROTARY),
    "mixtral": frozenset(_ROTARY + ("router_aux_loss_coef",)),
    "gpt2": frozenset(("n_ctx", "layer_norm_epsilon", "summary_type", "summary_use_proj",
                       "summary_activation", "summary_proj_to_labels", "summary_first_dropout")),
}


def _shown(value: Any) -> str:
    """A value for a message: scalars as JSON, long text and containers by kind
    (a file's contents are not echoed)."""
    if isinstance(value, (bool, int, float)) or value is None:
        return json.dumps(value)
    if isinstance(value, str):
        return json.dumps(value) if len(value) <= 40 else "a long string"
    return "a JSON array" if isinstance(value, list) else "a JSON object"


class _Reader:
    """Typed access to the keys of one config file, with errors that name them."""

    def __init__(self, path: str, text: str, data: Mapping[str, Any], model_type: str):
        self.path, self.text, self.data, self.model_type = path, text, data, model_type

    def span(self, key: str) -> Span | None:
        """Where ``"key":`` first appears in the file (None when it does not)."""
        return span_at(self.path, self.text, self.text.find(f'"{key}"'))

    def has(self, key: str) -> bool:
        return self.data.get(key) is not None

    def error(self, key: str, what: str, fix: str) -> SymflopsError:
        return SymflopsError(f"{self.path}: {what}", self.span(key), fix)

    def integer(self, key: str, default: int | None = None) -> int:
        if not self.has(key):
            if default is not None:
                return default
            raise SymflopsError(f"{self.path}: key {key!r} is missing (required for a "
                                f"{self.model_type} config)",
                                hint=f"add \"{key}\": <positive integer> to the file")
        value = self.data[key]
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.error(key, f"key {key!r} must be a positive integer, found "
                                  f"{_shown(value)}", f"write {key} as a whole number such as 4096")
        if value < 1:
            raise self.error(key, f"key {key!r} must be positive, found {value}",
                             f"write {key} as a whole number such as 4096")
        if value > MAX_VALUE:
            raise self.error(key, f"key {key!r} = {value} is beyond 10^12",
                             f"check {key}: no model has a dimension this large")
        return value

    def flag(self, key: str, default: bool) -> bool:
        if not self.has(key):
            return default
        value = self.data[key]
        if not isinstance(value, bool):
            raise self.error(key, f"key {key!r} must be true or false, found {_shown(value)}",
                             f"write {key} as true or false")
        return value

    def fraction(self, key: str, default: Fraction) -> Fraction:
        """A probability in [0, 1), exactly as written (0.1 is 1/10)."""
        if not self.has(key):
            return default
        value = self.data[key]
        if isinstance(value, bool) or not isinstance(value, (int, float)) \
                or not 0 <= value < 1:
            raise self.error(key, f"key {key!r} must be a probability in [0, 1), found "
                                  f"{_shown(value)}", f"write {key} as a number such as 0.1")
        return Fraction(repr(value)) if isinstance(value, float) else Fraction(value)

    def must_be(self, key: str, wanted: Any, default: Any, why: str) -> None:
        """Refuse ``key`` unless its value (or its default) is ``wanted``."""
        value = self.data[key] if self.has(key) else default
        if value != wanted or isinstance(value, bool) != isinstance(wanted, bool):
            raise self.error(key, f"key {key!r} = {_shown(value)} is not supported: {why}",
                             f"set {key} to {_shown(wanted)}, or plan from a declaration "
                             "(symflops plan FILE DIM=V ...) that has it")

    def activation(self, key: str, default: str) -> str:
        name = self.data[key] if self.has(key) else default
        if not isinstance(name, str) or name not in ACTIVATIONS:
            raise self.error(key, f"key {key!r} = {_shown(name)} names an activation symflops "
                                  "has no function for",
                             f"symflops reads {', '.join(sorted(ACTIVATIONS))}; or plan from a "
                             "declaration with the function written out")
        return ACTIVATIONS[name]

    def divide(self, key: str, total: int, parts_key: str, parts: int) -> int:
        if total % parts:
            raise self.error(parts_key, f"{key} = {total} is not a multiple of "
                                        f"{parts_key} = {parts}",
                             f"give head_dim explicitly, or check {parts_key}")
        return total // parts


def model_type_of(data: Mapping[str, Any], path: str) -> str:
    """The config's ``model_type``; a missing or unknown one is refused."""
    families = ", ".join(sorted(MODEL_TYPES))
    model_type = data.get("model_type")
    if model_type is None:
        raise SymflopsError(f"{path}: key 'model_type' is missing; symflops does not guess the "
                            "family of a config from its other keys",
                            hint=f"add \"model_type\": one of {families}, if the model is one "
                                 "of these families")
    if not isinstance(model_type, str) or model_type not in MODEL_TYPES:
        raise SymflopsError(f"{path}: model_type {_shown(model_type)} is not a decoder-only "
                            f"family symflops reads", hint=f"symflops reads {families} configs")
    return model_type


def _check_keys(r: _Reader) -> None:
    """Refuse a key that is neither read nor ignored on purpose."""
    known = READ[r.model_type] | _COMMON_READ | IGNORED | FAMILY_IGNORED[r.model_type]
    for key in r.data:
        if key not in known and r.data[key] is not None:
            raise r.error(key, f"key {key_name(key)} is not one symflops reads or knows to change no "
                               f"count in a {r.model_type} config, so it may change one",
                          "remove it if the model does not need it, or plan from a "
                          "declaration (symflops plan FILE DIM=V ...); the keys read and "
                          "ignored are listed in symflops/hfconfig.py")


def _check_common(r: _Reader) -> None:
    lm = LM_CLASSES[r.model_type]
    if r.has("architectures"):
        names = r.data["architectures"]
        if not isinstance(names, list) or not names or any(n != lm for n in names):
            shown = ", ".join(map(_shown, names)) if isinstance(names, list) else _shown(names)
            raise r.error("architectures", f"architectures lists {shown}: symflops plans the "
                                           f"causal language model {lm}",
                          f"set architectures to [\"{lm}\"] to plan the language model")
    r.must_be("is_encoder_decoder", False, False, "symflops reads decoder-only models")
    r.must_be("tie_encoder_decoder", False, False, "symflops reads decoder-only models")
    if r.has("pruned_heads") and r.data["pruned_heads"] != {}:
        raise r.error("pruned_heads", "key 'pruned_heads' lists pruned attention heads, which "
                                      "the declarations do not model",
                      "plan from a declaration with the remaining heads")


def _gpt2(r: _Reader) -> Architecture:
    width, heads = r.integer("n_embd"), r.integer("n_head")
    r.must_be("tie_word_embeddings", True, True, "the transformer declaration ties the "
                                                 "unembedding to the token embedding")
    r.must_be("scale_attn_weights", True, True, "the declaration scales the scores by 1/sqrt(E)")
    for key in ("scale_attn_by_inverse_layer_idx", "reorder_and_upcast_attn",
                "add_cross_attention"):
        r.must_be(key, False, False, "the transformer declaration has no such variant")
    for key in ("attn_pdrop", "resid_pdrop"):
        if r.fraction(key, Fraction(1, 10)) == 0:
            raise r.error(key, f"key {key!r} = 0 is not supported: the transformer declaration "
                               "drops out the attention probabilities and both residual "
                               "branches (any positive probability counts the same)",
                          "plan from a declaration without dropout (symflops plan FILE "
                          "DIM=V ...)")
    return Architecture(
        family="gpt2", layers=r.integer("n_layer"), width=width, heads=heads, kv_heads=heads,
        head_width=r.divide("n_embd", width, "n_head", heads),
        mlp_width=r.integer("n_inner", 4 * width), vocab=r.integer("vocab_size"), experts=1,
        active_experts=1, tied=True, context=r.integer("n_positions"), mlp="gelu",
        norm="layernorm", attention_bias=True, mlp_bias=True, position="learned",
        activation=r.activation("activation_function", "gelu_new"),
        embedding_dropout=r.fraction("embd_pdrop", Fraction(1, 10)), source=r.path)


def _llama(r: _Reader) -> Architecture:
    family = MODEL_TYPES[r.model_type]
    width = r.integer("hidden_size")
    heads = r.integer("num_attention_heads")
    kv_heads = r.integer("num_key_value_heads", heads)
    if heads % kv_heads:
        raise r.error("num_key_value_heads", f"num_attention_heads = {heads} is not a multiple "
                                             f"of num_key_value_heads = {kv_heads}",
                      "each key/value head serves a whole group of query heads")
    if r.has("head_dim"):
        head_width = r.integer("head_dim")
    else:
        head_width = r.divide("hidden_size", width, "num_attention_heads", heads)
    if r.fraction("attention_dropout", Fraction(0)) != 0:
        raise r.error("attention_dropout", "key 'attention_dropout' is not 0: the declarations "
                                           "have no attention dropout, whose masks would add "
                                           "activation memory", "set attention_dropout to 0.0")
    attention_bias = mlp_bias = False
    if r.model_type == "llama":
        attention_bias, mlp_bias = r.flag("attention_bias", False), r.flag("mlp_bias", False)
    else:
        for key in ("attention_bias", "mlp_bias"):
            r.must_be(key, False, False, f"transformers' {r.model_type.capitalize()} has no "
                                         "biases")
    window = None
    if r.has("sliding_window"):
        window = r.integer("sliding_window")
    experts, active = 1, 1
    if family == "mixtral":
        experts = r.integer("num_local_experts")
        active = r.integer("num_experts_per_tok")
        if active > experts:
            raise r.error("num_experts_per_tok", f"num_experts_per_tok = {active} exceeds "
                                                 f"num_local_experts = {experts}",
                          "a token is routed to at most every expert")
        r.must_be("output_router_logits", False, False,
                  "symflops counts no load-balancing loss")
        if r.fraction("router_jitter_noise", Fraction(0)) != 0:
            raise r.error("router_jitter_noise", "key 'router_jitter_noise' is not 0: the moe "
                                                 "declaration has no router jitter",
                          "set router_jitter_noise to 0.0")
    return Architecture(
        family=family, layers=r.integer("num_hidden_layers"), width=width,
        heads=heads, kv_heads=kv_heads, head_width=head_width,
        mlp_width=r.integer("intermediate_size"), vocab=r.integer("vocab_size"),
        experts=experts, active_experts=active, tied=r.flag("tie_word_embeddings", False),
        context=r.integer("max_position_embeddings"), mlp="swiglu", norm="rmsnorm",
        attention_bias=attention_bias, mlp_bias=mlp_bias, position="rotary",
        activation=r.activation("hidden_act", "silu"), sliding_window=window, source=r.path)


def architecture(data: Mapping[str, Any], path: str = "config.json", text: str = "") -> Architecture:
    """The architecture described by a parsed config (``text``: the file, for positions)."""
    if not isinstance(data, Mapping):
        raise SymflopsError(f"{path}: a config.json must hold a JSON object, found "
                            f"{type(data).__name__}", hint="give the model's config.json")
    r = _Reader(path, text, data, model_type_of(data, path))
    _check_keys(r)
    _check_common(r)
    return _gpt2(r) if r.model_type == "gpt2" else _llama(r)


def load(path: str | os.PathLike) -> Architecture:
    """Read ``config.json`` at ``path`` into an :class:`Architecture`."""
    path = os.fspath(path)
    text, data = read_json(path)
    return architecture(data, path, text)
