"""The planner's models from declarations: numbers out of the engine.

:func:`model_from_declaration` evaluates a whole-model declaration's derived
polynomials (``symflops derive``'s per-token FLOPs, recomputation policies,
key/value cache) at the given dims, with the sequence length ``S`` and the
micro-batch ``B`` left free for the planner to choose.
:func:`model_from_architecture` maps a Hugging Face config onto a shipped
declaration (``transformer``, ``llama``, ``llama_tied``, ``moe``) and its dims,
changed by :mod:`symflops.planner.variants` where the config asks for what the
declaration leaves out (Llama's biases, another activation, GPT-2's embedding
dropout; :data:`SHIPPED` says what each declaration has); no parameter formula
is written here, the counts come out of the engine.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Mapping

import sympy

from ..count.cost import costs
from ..derive.backward import derive
from ..core.errors import SymflopsError
from ..count.evaluate import check_all_given, check_definitions, check_dim_name, number
from .hfconfig import Architecture
from .records import Formula, Model, TokenFlops, Window
from ..core.ir import Layer, dim_symbol
from ..count.precision import Precision
from ..declaration.reader import load
from ..count.records import formula_text
from ..count.summary import summary
from .variants import with_biases, with_dropout, with_function

SEQ, BATCH = "S", "B"


def declarations_dir() -> str:
    """``derivations/`` beside the package in a checkout, else the installed copy."""
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    checkout = os.path.join(os.path.dirname(package), "derivations")
    if os.path.isfile(os.path.join(checkout, "transformer.yaml")):
        return checkout
    return os.path.join(package, "derivations")


def _value(v: Any) -> sympy.Expr:
    f = Fraction(v)
    return sympy.Rational(f.numerator, f.denominator)


def model_from_declaration(path: str | os.PathLike[str], dims: Mapping[str, Any], recompute: str,
                           precision: Precision) -> Any:
    file = os.fspath(path)
    return model_from_layer(load(file), file, dims, recompute, precision)


def model_from_layer(layer: Layer, file: str, dims: Mapping[str, Any], recompute: str,
                     precision: Precision, window: Any = None) -> Any:
    """The planner's model of ``layer`` (read from ``file``, perhaps changed by
    :mod:`symflops.planner.variants`) at ``dims``; ``window``: a
    :class:`symflops.planner.records.Window` the model's counts hold within."""
    d = derive(layer)
    s = summary(d, costs(d, precision=precision, choice="minimum"))
    per = s.model.per_token
    if per is None:
        raise SymflopsError(f"{file}: the declaration declares no 'tokens:'",
                            hint="add e.g. 'tokens: B*S' so that FLOPs per token are defined")
    names = {dim.name for dim in layer.free_dims}
    for free in (SEQ, BATCH):
        if free not in names:
            raise SymflopsError(f"{file}: the planner needs a dimension {free!r} "
                                f"({'sequence length' if free == SEQ else 'sequences per micro-batch'})",
                                hint="name the sequence length S and the micro-batch B")
    if BATCH in dims:  # not silently replaced by the run's micro-batch
        raise SymflopsError(f"{BATCH}={dims[BATCH]} given with the declaration, but the plan "
                            f"sets {BATCH}: FLOPs per token are taken at {BATCH}=1 and "
                            "activations at --micro-batch",
                            hint=f"leave {BATCH} out; give --micro-batch {dims[BATCH]} for "
                                 f"activations of {dims[BATCH]} sequences")
    for name in dims:
        check_dim_name(layer, name)
    check_all_given(layer, dims, exempt=(BATCH, SEQ))
    policies = s.model.recompute.policies
    if recompute not in policies:
        raise SymflopsError(f"{layer.name} lists no ops for selective recomputation",
                            hint="add 'recompute: {selective: [...]}' to the declaration, "
                                 "or use --recompute none|full")
    fixed = {k: _value(v) for k, v in dims.items()}
    context = fixed.get(SEQ)

    def at(seq: Any, batch: Any = 1) -> dict[str, sympy.Expr]:
        return {**fixed, SEQ: _value(seq), BATCH: _value(batch)}

    tokens = layer.tokens
    policy = policies[recompute]
    text = formula_text

    def flops_per_token(seq: int | None) -> Any:
        if seq is None:
            raise SymflopsError("the planner needs a sequence length for a declaration",
                                hint="give --seq T or --phase TOKENS@T")
        v = at(seq)
        check_definitions(layer, v)  # a ratio such as R = N / G divides exactly here
        executed = sympy.expand(policy.flops_executed / tokens)
        return TokenFlops(
            model=number(per.flops.total, v), executed=number(executed, v),
            attention=number(per.beyond_six_n, v), inference=number(per.inference_forward, v),
            formulas={"model": Formula(text(per.flops.total), "",
                                       f"derived by symflops; dims as in {layer.name}'s declaration"),
                      "executed": Formula(text(executed), "", f"recompute: {recompute}"),
                      "attention": Formula(text(per.beyond_six_n), "", "training minus 6N"),
                      "inference": Formula(text(per.inference_forward), "", "forward only")})

    def activation_bytes(micro_batch: int, seq: int) -> Any:
        check_definitions(layer, at(seq, micro_batch))
        return number(policy.activation_bytes, at(seq, micro_batch))

    def buffers(seq: int | None) -> int | None:
        if seq is None and dim_symbol(SEQ) in s.memory.buffers.free_symbols:
            return None  # a table over positions: its size needs the sequence length
        return number(s.memory.buffers, at(seq if seq is not None else 1))

    par = s.model.parameters
    ref = at(context if context is not None else 1)
    kv = None
    inf = s.model.inference
    if inf is not None:
        kv = number(sympy.expand(inf.cache_bytes_per_sequence / dim_symbol(SEQ)), ref)
    return Model(
        name=f"{layer.name} ({os.path.basename(file)})",
        params_total=number(par.total, ref), params_active=number(par.active, ref),
        params_trainable=number(par.trainable, ref), flops_per_token=flops_per_token,
        activation_bytes=activation_bytes, kv_cache_bytes_per_token=kv,
        formulas={"params_total": Formula(text(par.total), "", "derived by symflops"),
                  "params_active": Formula(text(par.active), "", "derived by symflops"),
                  "params_read": Formula(text(par.read_per_token), "",
                                         "the parameters one token reads, derived by symflops"),
                  "activation_bytes": Formula(text(policy.activation_bytes), "",
                                              f"recompute: {recompute}")},
        counts_attention=True, recompute=recompute,
        params_read=number(par.read_per_token, ref), window=window,
        buffers=buffers if layer.buffers else None)


@dataclass(frozen=True)
class Shipped:
    """What a shipped declaration has, for mapping a config onto it: the MLP's
    pointwise function, whether its linear layers carry biases, the weights of
    its attention and MLP products (where a config's biases go), and the
    tensor its embeddings write (where GPT-2's embedding dropout goes)."""

    activation: str
    biases: bool
    attention: tuple[str, ...] = ("W_q", "W_k", "W_v", "W_o")
    mlp: tuple[str, ...] = ("W_gate", "W_up", "W_down")
    embeddings: str = "X0"


SHIPPED = {"transformer.yaml": Shipped("gelu", True, mlp=("W_in", "W_out")),
           "llama.yaml": Shipped("silu", False), "llama_tied.yaml": Shipped("silu", False),
           "moe.yaml": Shipped("silu", False)}


def architecture_dims(arch: Architecture) -> tuple[str, dict[str, int]]:
    """The shipped declaration and dims for a Hugging Face architecture."""
    dims = {"L": arch.layers, "V": arch.vocab, "D": arch.width, "N": arch.heads,
            "E": arch.head_width, "F": arch.mlp_width, SEQ: arch.context}
    if arch.family == "gpt2":
        return "transformer.yaml", dims
    dims["G"] = arch.kv_heads
    if arch.experts > 1:
        if arch.tied:
            raise SymflopsError("a mixture of experts with tied embeddings has no shipped "
                                "declaration", hint="copy derivations/moe.yaml and tie W_U to W_E")
        return "moe.yaml", {**dims, "M": arch.experts, "k": arch.active_experts, "c": 1}
    return ("llama_tied.yaml" if arch.tied else "llama.yaml"), dims


def architecture_layer(arch: Architecture) -> tuple[str, Layer, dict[str, int]]:
    """The shipped declaration for ``arch`` (its path), changed where the config
    asks for what it leaves out (:mod:`symflops.planner.variants`), and its dims."""
    file, dims = architecture_dims(arch)
    path = os.path.join(declarations_dir(), file)
    shipped, layer = SHIPPED[file], load(path)
    if arch.activation != shipped.activation:
        layer = with_function(layer, shipped.activation, arch.activation)
    if not shipped.biases:
        if arch.attention_bias:
            layer = with_biases(layer, shipped.attention)
        if arch.mlp_bias:
            layer = with_biases(layer, shipped.mlp)
    if arch.embedding_dropout:
        layer = with_dropout(layer, shipped.embeddings, sympy.Rational(
            arch.embedding_dropout.numerator, arch.embedding_dropout.denominator))
    return path, layer, dims


def model_from_architecture(arch: Architecture, recompute: str, precision: Precision) -> Any:
    path, layer, dims = architecture_layer(arch)
    window = None
    if arch.sliding_window is not None:
        window = Window(arch.sliding_window, arch.context,
                        f"{arch.source}: sliding_window = {arch.sliding_window}")
    return model_from_layer(layer, path, dims, recompute, precision, window)
