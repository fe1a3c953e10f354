"""How a count grows with each dim, and what each dim is to a run.

A sheet says of each memory row what it grows with, in words ("linearly
with the tokens B, quadratically with the sequence length S"): the degree of
the row's polynomial in each dim that is not a dim of the model's weights
(a dim no parameter has: tokens, sequence length, layers of activations,
image size), read off the polynomial, never assumed.  And "what changes at
scale" sorts the rows by the dims a run grows: the tokens of a step, the
sequence length, the layers.

Invariants: a degree is SymPy's degree of the expanded polynomial (for a
maximum, the largest over its arguments; for the cost of whichever order of a
product is cheapest, the order cheapest as the dim grows, or a refusal); a
dim's kind comes from the declaration (``tokens:``, ``sequences:``, the
repeats of included blocks), never from its name.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Sequence

import sympy

from ..core.errors import SymflopsError
from ..core.polynomial import Cheapest, monomials
from ..core.ir import Layer, substitute

#: What a dim is to a run: part of the tokens of a step (``tokens: B*S``), the
#: sequence length (``tokens / sequences``), the number of copies of a repeated
#: block (layers), or another dim.
DimKind = Literal["tokens", "sequence", "layers", "other"]


@dataclass(frozen=True)
class Growth:
    """``expr`` grows as ``dim`` to the power ``degree`` (at fixed other dims)."""

    dim: str
    degree: int
    kind: DimKind


def degree(expr: sympy.Expr, symbol: sympy.Symbol) -> int:
    """The degree of ``expr`` in ``symbol`` (0 when it does not occur), as
    ``symbol`` grows: for a maximum or minimum at the top, the largest degree
    of its arguments; a minimum inside a sum taken at its argument of least
    degree (``Min(S, W)`` is ``W`` for long ``S``); for a quotient, that of its
    numerator less its denominator's."""
    expr = sympy.expand(expr)
    if symbol not in expr.free_symbols:
        return 0
    if isinstance(expr, (sympy.Max, sympy.Min)):
        return max(degree(a, symbol) for a in expr.args)
    # a minimum inside a sum (a sliding window's pairs): as the dim grows, a Min
    # goes to its argument of least degree, a Max to its largest
    inner = {a: min(a.args, key=lambda x: degree(x, symbol)) if isinstance(a, sympy.Min)
             else max(a.args, key=lambda x: degree(x, symbol))
             for a in expr.atoms(sympy.Min, sympy.Max)}
    inner.update({a: _cheapest_for_large(a, symbol) for a in expr.atoms(Cheapest)})
    if inner:
        return degree(expr.xreplace(inner), symbol)
    terms = monomials(expr, negative=True)
    if terms:  # a sum of terms with dims to whole powers: the largest power (together is slow)
        return max(powers.get(symbol, 0) for _, powers in terms)
    num, den = sympy.fraction(sympy.together(expr))
    return int(sympy.degree(sympy.expand(num), symbol) - sympy.degree(sympy.expand(den), symbol))


def _cheapest_for_large(c: Cheapest, symbol: sympy.Symbol) -> sympy.Expr:
    """The count a :class:`Cheapest` (the cost of whichever order of a product
    is cheapest, unresolved because no ``sizes:`` are declared) comes to as
    ``symbol`` grows: the branch of the order whose total has the least degree
    in it.  Where several orders share that degree, which is cheapest depends
    on the other dims; their branches' degree is the answer when they agree,
    and otherwise the growth is refused, naming what would settle it."""
    values = [v for v, _ in c.args]
    degrees = [degree(t, symbol) for t in c.totals()]
    least = min(degrees)
    found = {degree(v, symbol) for v, d in zip(values, degrees) if d == least}
    if len(found) != 1:
        raise SymflopsError(f"how the count {sympy.sstr(values[0])}, or another order's, grows "
                            f"with {symbol} depends on which order of a product is cheapest, "
                            "which the other dims decide",
                            hint="declare the typical sizes (sizes: {...}) so that one order "
                                 "is counted")
    k = next(i for i, d in enumerate(degrees) if d == least)
    return values[k]


def dim_kind(layer: Layer, name: str) -> DimKind:
    """What dim ``name`` is to a run, from the declaration."""
    symbol = layer.dim_symbols[name]
    if layer.tokens is not None:
        tokens = sympy.expand(layer.tokens)
        if layer.sequences is not None:
            length = sympy.cancel(tokens / layer.sequences)
            if length == symbol:
                return "sequence"
        if symbol in tokens.free_symbols:
            return "tokens"
    if any(sympy.sympify(b.repeat) == symbol for b in layer.blocks):
        return "layers"
    return "other"


def model_dims(layer: Layer) -> frozenset[sympy.Symbol]:
    """The dims of the weights: those of some parameter's shape."""
    subs = layer.substitutions
    return frozenset().union(*(t.elements.free_symbols | substitute(t.elements, subs).free_symbols
                               for t in layer.params)) if layer.params else frozenset()


def growth(layer: Layer, expr: sympy.Expr,
           dims: Sequence[sympy.Symbol] | None = None) -> tuple[Growth, ...]:
    """How ``expr`` grows with each of ``dims`` (by default every dim no
    parameter has), in the declaration's order, leaving out those it does not
    depend on."""
    wanted = set(dims) if dims is not None else None
    weights = model_dims(layer)
    out = []
    for d in layer.dims:
        s = d.symbol
        if wanted is not None and s not in wanted:
            continue
        if wanted is None and s in weights and dim_kind(layer, d.name) == "other":
            continue
        k = degree(expr, s)
        if k > 0:
            out.append(Growth(d.name, k, dim_kind(layer, d.name)))
    return tuple(out)


def sequence_dim(layer: Layer) -> tuple[str | None, str | None]:
    """``(dim, None)`` when ``tokens / sequences`` is one free dim (the
    sequence length, which a sheet's curves sweep), else ``(None, why)``."""
    if layer.tokens is None:
        return None, "the declaration gives no tokens: count"
    if layer.sequences is None:
        return None, ("the declaration gives no sequences: count, so its tokens have no "
                      "sequence length")
    length = sympy.simplify(layer.tokens / layer.sequences)
    if not isinstance(length, sympy.Symbol) or str(length) not in {d.name for d in layer.free_dims}:
        return None, f"tokens / sequences is {sympy.sstr(length)}, not one dim"
    return str(length), None
