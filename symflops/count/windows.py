"""A sliding window's exact count beside the figures other accounts use.

A forward op restricted by a causal window (``t <= s`` with ``s - t < W``,
any spelling: the bounds ``t <= s`` and ``s <= t + W - 1``) reads, for each
query ``s``, the keys ``max(0, s - W + 1) .. s``.  symflops counts the
query-key pairs inside exactly (:func:`symflops.core.domain.domain_size`):
``m(m + 1)/2 + (S - m)W`` with ``m = min(S, W)`` over one sequence.  Other
accounts of the same layer state other figures; each is listed here, labelled,
as a polynomial in the same dims, so that a reader can reconcile a number
read elsewhere with the sheet's:

- ``dense``: every pair, ``S·T`` (a kernel that computes the full square and
  masks it, or the count of an unmasked layer);
- ``per-query``: ``W`` keys for every query, ``S·min(T, W)`` (the window's
  bound taken as its size; it ignores the first ``W - 1`` queries' shorter rows);
- ``half-square``: ``S·T/2``, the causal triangle without its diagonal
  (an approximation also used for a window);
- ``half-window``: ``S·W/2``.

The op's FLOPs under a convention are its exact FLOPs scaled per pair, given
only when the exact FLOPs are a polynomial multiple of the exact pairs (so
the scaling is exact too).  Nothing here is pasted: every figure is computed
from the op's letters, extents and bounds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Sequence

import sympy

from ..core.domain import Bound, domain_size
from ..core.ir import Factor, comparison
from ..core.records import Derivation
from .cost import Costs

#: Which account a figure follows (see the module's docstring).
ConventionName = Literal["exact", "dense", "per-query", "half-square", "half-window"]

LABELS: dict[ConventionName, str] = {
    "exact": "exact (symflops): the pairs inside the window",
    "dense": "dense square: every query-key pair, as a masked dense kernel computes",
    "per-query": "W keys for every query (the window's bound taken as its size)",
    "half-square": "half the square (the causal triangle without its diagonal)",
    "half-window": "half a window per query",
}


@dataclass(frozen=True)
class Convention:
    """One account's figure: the query-key pairs it counts and, when the op's
    FLOPs scale exactly per pair, the FLOPs it implies."""

    name: ConventionName
    label: str
    pairs: sympy.Expr
    flops: sympy.Expr | None


@dataclass(frozen=True)
class Window:
    """A causal window shared by some forward ops: ``query`` attends to the
    ``key`` positions ``query - width + 1 .. query``."""

    ops: tuple[str, ...]          # the outputs of the ops restricted by it, in layer order
    query: str
    key: str
    queries: sympy.Expr           # extents of the two letters
    keys: sympy.Expr
    width: sympy.Expr             # W: the most keys one query reads
    flops: sympy.Expr             # the ops' forward FLOPs (matmul-type), every copy
    per_pair: sympy.Expr | None   # flops / exact pairs, when a polynomial
    conventions: tuple[Convention, ...]   # the exact count first

    @property
    def exact(self) -> sympy.Expr:
        return self.conventions[0].pairs


def _conditions(op: object) -> tuple[Factor, ...]:
    """The comparison factors an op carries (a contraction's terms, a masked softmax)."""
    found = [f for t in getattr(op, "terms", ()) for f in t.operands if f.is_comparison]
    found += [f for f in getattr(op, "conditions", ()) if f.is_comparison]
    return tuple(dict.fromkeys(found))


def _window(bounds: Sequence[Bound]) -> tuple[str, str, sympy.Expr] | None:
    """(query, key, width) of a causal window among ``bounds``: a plain
    ``key <= query`` and ``query <= key + c`` (width ``c + 1``), else None."""
    for causal in (b for b in bounds if b.offset == 0 and not b.strict):
        widths = [b.offset + (0 if b.strict else 1) for b in bounds
                  if (b.low, b.high) == (causal.high, causal.low) and b.offset != 0]
        if widths:
            return causal.high, causal.low, sympy.Min(*widths)
    return None


def windows(derivation: Derivation, costs: Costs) -> tuple[Window, ...]:
    """Every causal window of the layer's forward ops, with its conventions."""
    layer = derivation.layer
    groups: dict[tuple, list[int]] = {}
    for k, op in enumerate(layer.ops):
        bounds = tuple(comparison(f) for f in _conditions(op))
        found = _window(bounds)
        if found is None:
            continue
        query, key, _ = found
        extents = op.dims()
        key_of = (query, key, extents[query], extents[key],
                  frozenset(b for b in bounds if b.letters == {query, key}))
        groups.setdefault(key_of, []).append(k)
    out = []
    for (query, key, n_q, n_k, bounds), members in groups.items():
        _, _, width = _window(tuple(bounds))  # type: ignore[misc]
        exact = domain_size({query: n_q, key: n_k}, tuple(bounds))
        flops = sympy.expand(sum((costs.forward[k].flops * costs.forward_copies[k]
                                  for k in members), sympy.Integer(0)))
        per_pair = sympy.cancel(flops / exact) if exact != 0 else None
        if per_pair is not None and (per_pair.has(sympy.Min) or not per_pair.is_polynomial()):
            per_pair = None
        figures: list[tuple[ConventionName, sympy.Expr]] = [
            ("exact", exact), ("dense", n_q * n_k), ("per-query", n_q * sympy.Min(n_k, width)),
            ("half-square", n_q * n_k / 2), ("half-window", n_q * width / 2)]
        conventions = tuple(
            Convention(name, LABELS[name], sympy.expand(pairs),
                       None if per_pair is None else sympy.expand(per_pair * pairs))
            for name, pairs in figures)
        out.append(Window(tuple(layer.ops[k].output for k in members), query, key, n_q, n_k,
                          width, flops, per_pair, conventions))
    return tuple(out)
