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
from ..count.inference import cache_note
from .records import Formula, Model, TokenFlops
from ..core.ir import Layer, dim_symbol, index_ranges, substitute
from ..count.indices import index_widths
from .compiled import Compiled, Tree
from ..count.precision import Precision
from ..declaration.reader import load, loads
from ..count.records import formula_text
from ..count.summary import model_part

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
    return _model(_parts(layer, file, dims, recompute, precision))


@dataclasses.dataclass(frozen=True)
class _Parts:
    """The derived polynomials a planner's model evaluates."""

    layer: Layer
    file: str
    recompute: str
    fixed: dict[str, sympy.Expr]
    per: Any              # the per-token record of the summary
    executed: sympy.Expr  # executed training FLOPs per token under the policy
    activations: sympy.Expr
    buffers: sympy.Expr
    parameters: Any       # the parameter record of the summary
    cache: sympy.Expr | None  # KV cache bytes per token of context
    engine: tuple

    def at(self, seq: Any, batch: Any = 1) -> dict[str, sympy.Expr]:
        return {**self.fixed, SEQ: _value(seq), BATCH: _value(batch)}

    @property
    def ref(self) -> dict[str, sympy.Expr]:
        context = self.fixed.get(SEQ)
        return self.at(context if context is not None else 1)


def _parts(layer: Layer, file: str, dims: Mapping[str, Any], recompute: str,
           precision: Precision) -> _Parts:
    d = derive(layer)
    counted = costs(d, precision=precision, choice="minimum")
    model = model_part(d, counted)   # the plan reads only the summary's model part
    per = model.per_token
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
    policies = model.recompute.policies
    if recompute == "fused_attention" and recompute not in policies:
        raise SymflopsError(f"{layer.name} has no attention core to fuse (a product of two "
                            "activations, a softmax, and its product with another activation)",
                            hint="use --recompute none|full")
    if recompute not in policies:
        raise SymflopsError(f"{layer.name} lists no ops for selective recomputation",
                            hint="add 'recompute: {selective: [...]}' to the declaration, "
                                 "or use --recompute none|full")
    fixed = {k: _value(v) for k, v in dims.items()}
    policy = policies[recompute]
    inf = model.inference
    return _Parts(
        layer=layer, file=file, recompute=recompute, fixed=fixed, per=per,
        executed=sympy.expand(policy.flops_executed / layer.tokens),
        activations=policy.activation_bytes,
        buffers=substitute(counted.buffers, layer.substitutions),
        parameters=model.parameters,
        cache=None if inf is None else sympy.expand(inf.cache_bytes_per_sequence
                                                    / dim_symbol(SEQ)),
        engine=(layer, d, counted, dict(fixed)))


def _token_formulas(p: _Parts) -> dict[str, Formula]:
    per, text = p.per, formula_text
    return {"model": Formula(text(per.flops.total), "",
                             f"derived by symflops; dims as in {printable(p.layer.name)}'s declaration"),
            "executed": Formula(text(p.executed), "", f"recompute: {p.recompute}"),
            "attention": Formula(text(per.beyond_six_n), "", "training minus 6N"),
            "inference": Formula(text(per.inference_forward), "", "forward only")}


def _token_polynomials(p: _Parts) -> dict[str, sympy.Expr]:
    return {"model": p.per.flops.total, "executed": p.executed,
            "attention": p.per.beyond_six_n, "inference": p.per.inference_forward}


def _model_formulas(p: _Parts) -> dict[str, Formula]:
    par, text = p.parameters, formula_text
    return {"params_total": Formula(text(par.total), "", "derived by symflops"),
            "params_active": Formula(text(par.active), "", "derived by symflops"),
            "params_read": Formula(text(par.read_per_token), "",
                                   "the parameters one token reads, derived by symflops"),
            "activation_bytes": Formula(text(p.activations), "", f"recompute: {p.recompute}"),
            **({"kv_cache_bytes_per_token": Formula("", "", why.text())}
               if (why := cache_note(p.layer, p.cache is not None)) is not None else {})}


def _model(p: _Parts) -> Model:
    layer = p.layer

    def flops_per_token(seq: int | None) -> Any:
        if seq is None:
            raise SymflopsError("the planner needs a sequence length for a declaration",
                                hint="give --seq T or --phase TOKENS@T")
        v = p.at(seq)
        check_definitions(layer, v)  # a ratio such as R = N / G divides exactly here
        return TokenFlops(**{k: number(e, v) for k, e in _token_polynomials(p).items()},
                          formulas=_token_formulas(p))

    def activation_bytes(micro_batch: int, seq: int) -> Any:
        check_definitions(layer, p.at(seq, micro_batch))
        return number(p.activations, p.at(seq, micro_batch))

    def buffers(seq: int | None) -> int | None:
        if seq is None and dim_symbol(SEQ) in p.buffers.free_symbols:
            return None  # a table over positions: its size needs the sequence length
        return number(p.buffers, p.at(seq if seq is not None else 1))

    par, ref = p.parameters, p.ref
    return Model(
        name=f"{layer.name} ({os.path.basename(p.file)})",
        params_total=number(par.total, ref), params_active=number(par.active, ref),
        params_trainable=number(par.trainable, ref), flops_per_token=flops_per_token,
        activation_bytes=activation_bytes,
        kv_cache_bytes_per_token=None if p.cache is None else number(p.cache, ref),
        formulas=_model_formulas(p), counts_attention=True, recompute=p.recompute,
        params_read=number(par.read_per_token, ref),
        buffers=buffers if layer.buffers else None, engine=p.engine)


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
    return compile_import(imported, recompute, precision)[0]


def compile_import(imported: Any, recompute: str,
                   precision: Precision) -> tuple[Model, Compiled | None]:
    """:func:`model_from_import`'s model, and the same model as plain
    formulas for the cache (:mod:`symflops.planner.compiled`); None when a
    formula holds what :func:`plain` does not write, or a figure is not a
    whole number."""
    dims = {k: v for k, v in imported.dims.items() if k != BATCH}
    p = _parts(imported_layer(imported), imported.file, dims, recompute, precision)
    model = dataclasses.replace(_model(p), declaration=imported)
    return model, _compiled(p, model)


def _compiled(p: _Parts, model: Model) -> Compiled | None:
    layer = p.layer
    widths = index_widths(layer)
    trees = {k: plain(e) for k, e in _token_polynomials(p).items()}
    definitions = [plain(layer.substitutions[dim_symbol(name)])
                   for name, _ in layer.definitions]
    indices = [(plain(substitute(size, layer.substitutions)), widths[name])
               for name, size in index_ranges(layer).items() if name in widths]
    par = p.parameters
    counts = [plain(e) for e in (par.total, par.active, par.trainable, par.read_per_token)]
    cache = None if p.cache is None else plain(p.cache)
    activations, buffers = plain(p.activations), plain(p.buffers)
    if (None in trees.values() or None in definitions or any(q is None for q, _ in indices)
            or None in counts or (cache is None and p.cache is not None)
            or activations is None or buffers is None):
        return None

    def texts(formulas: Mapping[str, Formula]) -> dict[str, tuple[str, str, str]]:
        return {k: (f.text, f.numbers, f.note) for k, f in formulas.items()}

    total, active, trainable, read = counts
    return Compiled(
        name=layer.name, recompute=p.recompute, params_total=total, params_active=active,
        params_trainable=trainable, params_read=read, kv_cache_bytes_per_token=cache,
        formulas=texts(model.formulas), token_formulas=texts(_token_formulas(p)),
        token=trees, activations=activations, buffers=buffers if layer.buffers else None,
        definitions=tuple(definitions), indices=tuple(indices))


#: SymPy's operations a kept formula may hold, by their names in a tree.
_OPERATIONS = {sympy.Add: "add", sympy.Mul: "mul", sympy.Max: "max", sympy.Min: "min",
               sympy.floor: "floor", sympy.ceiling: "ceiling"}


def plain(expr: sympy.Expr) -> Tree | None:
    """``expr`` as a tree of :mod:`symflops.planner.compiled`, None when it
    holds anything but fractions, dims, sums, products, whole powers, maxima,
    minima, floors and ceilings."""
    if expr.is_Rational:
        return ("n", int(expr.p), int(expr.q))
    if expr.is_Symbol:
        return ("d", expr.name) if dim_symbol(expr.name) == expr else None
    if expr.is_Pow:
        base = plain(expr.base)
        return ("pow", base, int(expr.exp)) if base is not None and expr.exp.is_Integer else None
    name = _OPERATIONS.get(expr.func)
    args = [plain(arg) for arg in expr.args]
    if name is None or not args or None in args:
        return None
    return (name, *args)
