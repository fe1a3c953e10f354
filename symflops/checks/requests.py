"""One claim to check with everything it is checked under (:class:`Request`),
the names it may use (:func:`names_for`), the dims ``--given`` makes stand
for formulas, the configurations it is evaluated at, and its tolerance."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Mapping, Sequence

import sympy

from ..core.errors import Span, SymflopsError
from ..core.ir import Layer, dim_symbol
from ..count.evaluate import check_definitions
from ..count.names import registry
from ..lang.expr import parse_expression
from .claim import Names
from .decide import DEFAULT_RTOL, describe
from .declarations import Convention, Declaration, _clash, dims_of

@dataclass(frozen=True)
class Request:
    """One claim to check and everything it is checked under."""

    text: str
    declaration: Declaration
    span: Span | None = None
    convention: Convention = Convention()
    rtol: sympy.Rational = DEFAULT_RTOL
    at: tuple[Mapping[str, sympy.Expr], ...] = ()
    only_at: bool = False
    given: Mapping[str, sympy.Expr] = field(default_factory=dict)
    others: Mapping[str, Declaration] = field(default_factory=dict)
    source: str | None = None
    expect: str | None = None
    number: int = 1
    explain: bool = True
    #: where the conventions are written (a claims file's key), for their errors
    convention_span: Span | None = None


def names_for(request: Request, only: frozenset[str] | None = None) -> Names:
    """What the request's claim may name, in its convention, with its givens;
    with ``only`` (names as a claim writes them, ``full.flops.total`` for a
    second declaration's), the quantities among them alone."""
    decl = request.declaration
    values = dims_of(decl.layer)
    for other in request.others.values():
        for n, v in dims_of(other.layer).items():
            values.setdefault(n, v)
    kinds: dict[str, str] = {}
    registered = {q.name: q.kind for q in registry()}
    for name, v in decl.quantities(request.convention, only).items():
        if name in values:
            raise _clash(decl.layer, name)
        values[name] = v
        kinds[name] = registered[name]
    for alias, other in request.others.items():
        if alias in values or alias in {q.name.split(".")[0] for q in registry()}:
            raise SymflopsError(f"the declaration name {alias!r} is also a name in claims",
                                request.span, "give it another name with --with")
        convention = request.convention
        if convention.attention == "full-square":
            try:
                other.refuse(convention)
            except SymflopsError:  # nothing to count over the full square there
                convention = dataclasses.replace(convention, attention=None)
        if convention.recompute == "selective" and not other.layer.selective:
            convention = dataclasses.replace(convention, recompute=None)
        theirs = None if only is None else frozenset(
            n.split(".", 1)[1] for n in only if n.startswith(alias + "."))
        for name, v in other.quantities(convention, theirs).items():
            values[f"{alias}.{name}"] = v
            kinds[f"{alias}.{name}"] = registered[name]
    if request.given:
        given = {dim_symbol(k): v for k, v in request.given.items()}
        values = {n: (sympy.expand(v.xreplace(given)) if isinstance(v, sympy.Expr) else v)
                  for n, v in values.items()}
    return Names(values, kinds, tuple(request.others), request.convention.unit)


def parse_given(text: str, layers: Sequence[Layer], span: Span | None = None
                ) -> dict[str, sympy.Expr]:
    """``D=N*E,F=4*N*E``: dims standing for formulas of other dims (a paper's
    assumptions: h = d_model, d_ff = 4h), read by the whitelisting parser."""
    dims: dict[str, sympy.Expr] = {}
    for layer in layers:
        for d in layer.free_dims:
            dims.setdefault(d.name, d.symbol)
    out: dict[str, sympy.Expr] = {}
    for part in text.split(","):
        if not part.strip():
            continue
        name, sep, formula = part.partition("=")
        name = name.strip()
        if not sep or name not in dims:
            raise SymflopsError(f"--given takes DIM=FORMULA with a dim that takes a value, found "
                                f"{part.strip()[:60]!r}", span,
                                f"the dims are {', '.join(dims)}; e.g. --given F=4*D")
        value = parse_expression(formula, {n: s for n, s in dims.items() if n != name}, span=span)
        assert isinstance(value, sympy.Expr)
        if name in out:
            raise SymflopsError(f"dimension {name} is given twice", span, "give it once")
        out[name] = value
    return resolve_given(out, span)


def resolve_given(out: dict[str, sympy.Expr], span: Span | None = None) -> dict[str, sympy.Expr]:
    """Given dims whose formulas use other given dims (F=4*D, D=N*E), applied in turn."""
    for _ in range(len(out)):
        out = {n: sympy.expand(v.xreplace({dim_symbol(k): w for k, w in out.items()}))
               for n, v in out.items()}
    cycle = [n for n, v in out.items() if v.free_symbols & {dim_symbol(k) for k in out}]
    if cycle:
        raise SymflopsError(f"the given formulas go round in a cycle ({', '.join(cycle)})", span,
                            "give each dim a formula of dims that are not given")
    return out


def configurations(request: Request) -> tuple[dict[str, sympy.Expr], ...]:
    """Each configuration checked: a value for a dim defined by a formula
    (or given by --given) must agree with the formula; defined dims must
    come out whole."""
    layers = [request.declaration.layer, *(o.layer for o in request.others.values())]
    free = {d.name for layer in layers for d in layer.free_dims}
    formulas: dict[str, sympy.Expr] = {}
    for layer in layers:
        subs = layer.substitutions
        for name, _ in layer.definitions:
            formulas.setdefault(name, subs[dim_symbol(name)])
    given = {dim_symbol(k): v for k, v in request.given.items()}
    formulas.update(request.given)
    out = []
    for values in request.at:
        for name in values:
            if name not in free and name not in formulas:
                known = sorted(free | set(formulas))
                raise SymflopsError(f"{request.declaration.name} has no dimension {name!r}",
                                    hint=f"its dimensions are {', '.join(known)}")
        plain = {k: v for k, v in values.items() if k not in formulas}
        at = {dim_symbol(k): v for k, v in plain.items()}
        for name, formula in formulas.items():
            if name not in values:
                continue
            computed = sympy.expand(formula.xreplace(given).xreplace(at))
            if computed.free_symbols:
                missing = sorted(str(s) for s in computed.free_symbols)
                raise SymflopsError(f"dimension {name} stands for the formula "
                                    f"{sympy.sstr(formula)}",
                                    hint=f"give {', '.join(missing)} too; {name} is then "
                                         "checked against it")
            if computed != values[name]:
                raise SymflopsError(f"at {describe(plain)} the formula of {name}, "
                                    f"{sympy.sstr(formula)}, is {computed}, but {name}="
                                    f"{values[name]} is given",
                                    hint=f"give {name}={computed}, or leave {name} out")
        for layer in layers:
            own = {d.name for d in layer.free_dims}
            check_definitions(layer, {k: v for k, v in plain.items() if k in own})
        out.append(dict(values))
    return tuple(out)


def read_rtol(text: str, span: Span | None = None) -> sympy.Rational:
    """A relative tolerance: a number strictly between 0 and 1 (``0.05``, ``5e-4``, ``1/20``)."""
    from ..lang.expr import parse_number

    value = parse_number(text, span=span)
    if not (0 < value < 1):
        raise SymflopsError(f"the relative tolerance must be above 0 and below 1, got "
                            f"{text.strip()[:60]!r}", span,
                            "give e.g. 0.05 (5 %) or 5e-4")
    return value




def symbols_of(r: Request) -> list[sympy.Symbol]:
    seen: dict[str, sympy.Symbol] = {}
    for layer in [r.declaration.layer, *(o.layer for o in r.others.values())]:
        for d in layer.free_dims:
            seen.setdefault(d.name, d.symbol)
    return list(seen.values())
