"""The planner's models from declarations: numbers out of the engine.

:func:`model_from_declaration` evaluates a whole-model declaration's derived
polynomials (``symflops derive``'s per-token FLOPs, recomputation policies,
key/value cache) at the given dims, with the sequence length ``S`` and the
micro-batch ``B`` left free for the planner to choose.
:func:`model_from_import` does the same for a Hugging Face config, through
the declaration ``symflops import-hf`` writes for it (:mod:`symflops.hf`);
no parameter formula is written here, the counts come out of the engine.
"""

from __future__ import annotations

import dataclasses
import os
from fractions import Fraction
from typing import Any, Mapping

import sympy

from ..count.cost import costs
from ..derive.backward import derive
from ..core.errors import SymflopsError, printable
from ..count.evaluate import check_all_given, check_definitions, check_dim_name, number
from .records import Formula, Model, TokenFlops
from ..core.ir import Layer, dim_symbol
from ..count.precision import Precision
from ..declaration.reader import load, loads
from ..count.records import formula_text
from ..count.summary import summary

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
                     precision: Precision) -> Any:
    """The planner's model of ``layer`` (read from ``file``) at ``dims``."""
    d = derive(layer)
    counted = costs(d, precision=precision, choice="minimum")
    s = summary(d, counted, quantities=False)   # the plan reads no named quantity
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
    if recompute == "fused_attention" and recompute not in policies:
        raise SymflopsError(f"{layer.name} has no attention core to fuse (a product of two "
                            "activations, a softmax, and its product with another activation)",
                            hint="use --recompute none|full")
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
                                       f"derived by symflops; dims as in {printable(layer.name)}'s declaration"),
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
        params_read=number(par.read_per_token, ref),
        buffers=buffers if layer.buffers else None,
        engine=(layer, d, counted, dict(fixed)))


def imported_layer(imported: Any) -> Layer:
    """The layer of a declaration written by ``symflops import-hf``
    (:class:`symflops.hf.importer.Imported`), read by the ordinary reader.  Its
    text is symflops's own: an error reading it is a bug, not bad input."""
    try:
        return loads(imported.text, imported.file)
    except SymflopsError as exc:
        raise RuntimeError(f"the declaration written for {imported.file} does not read: "
                           f"{exc}") from exc


def model_from_import(imported: Any, recompute: str, precision: Precision) -> Any:
    """The planner's model of a Hugging Face config, through the declaration
    ``symflops import-hf`` writes for it, at the config's dims (S: its context)."""
    dims = {k: v for k, v in imported.dims.items() if k != BATCH}
    model = model_from_layer(imported_layer(imported), imported.file, dims, recompute,
                             precision)
    return dataclasses.replace(model, declaration=imported)
