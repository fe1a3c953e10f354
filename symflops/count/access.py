"""Distinct elements an op touches: the element counts behind the bytes moved.

An op (or a backward rule) says what it reads and writes as products over
its letters (:class:`symflops.ops.base.Access`).  A tensor factor ``X[b,d]``
of such a product touches the tuples of its letters that the product ranges
over; the elements of ``X`` it touches are those tuples' projections onto
``X``'s letters.  This module counts them, exactly, under these conventions:

* **Plain letters**: every tuple of the factor's distinct letters inside the
  where-clause conditions that bind only those letters (``dA[s,t]`` under
  ``t <= s``: ``S(S+1)/2`` elements; a diagonal ``X[i,i]``: ``I``).  A
  condition that links a letter of the factor to a letter it lacks
  (``K[t,e]`` under ``t <= s``) removes nothing when every value of the
  factor's letter has a partner: proved when the linked letters range over
  one extent and each condition holds with the letters equal (the diagonal is
  a witness).  Under one strict condition ``m < l`` between two letters of
  one extent ``E``, and no other on the factor's letter, ``E - 1`` of its
  values have one (``l >= 1``, ``m <= E - 2``).  Otherwise the count is
  refused, naming the op.  The counts assume the op's domain is not empty
  (a strict condition over an extent of 1 admits no tuple).
* **Lookups** (``E[tok[b], d]``): one row per index entry (``B·D``), the
  rows a gather fetches; exact when the entries name distinct rows, an upper
  bound on the distinct rows when they repeat one.
* **Shifted axes** (a convolution's ``X[b,c,p+k]``, a strided or padded
  window): the axis is read whole, its stored positions only (padding zeros
  are not in memory): exact when every position falls in some window, an
  upper bound when a stride skips positions.
* **Placed parts** (a concatenation's ``[t = s + M]``): one element per
  element of the part (the place is one-to-one).

A tensor that several factors of one op touch is counted once: the whole
tensor when any factor touches all of it, else the one count when every
factor touches the same elements (the same pattern of letters under the
same conditions, :func:`part`; equal counts are not enough); anything else
is refused.

**Decoding** (:func:`decoded`) views a product as one step of
autoregressive decoding: the position being decoded is a letter over the
sequence length ``S`` that no causal condition makes earlier (``s`` in
``t <= s``), fixed to the last position, ``S - 1``; an earlier position
(``t``, the keys and values read from the cache) then ranges over every
value the conditions allow: all ``S`` under ``t <= s``, the last ``min(S,
W)`` under a window ``s - t < W``.  A product with two positions and no
causal condition between them (bidirectional attention), or a letter whose
extent grows with ``S`` without being ``S`` (an MoE capacity ``c k B S /
M``, a convolution's axis), is refused.
"""

from __future__ import annotations

from typing import Mapping

import sympy

from ..core.domain import Bound
from ..core.errors import SymflopsError, Span
from ..core.ir import Einsum, Factor, Tensor, comparison
from ..core.offsets import proved_at_most
from ..ops.einsum.orders import bounds_of, size

Extents = Mapping[str, sympy.Expr]


def _refuse(what: str, span: Span | None, hint: str) -> SymflopsError:
    return SymflopsError(f"cannot count the bytes moved: {what}", span, hint)


def _shape(name: str, tensors: Mapping[str, Tensor]) -> tuple[sympy.Expr, ...] | None:
    """A tensor's shape; a gradient's (``dX``) is its tensor's."""
    if name in tensors:
        return tensors[name].shape
    if name.startswith("d") and name[1:] in tensors:
        return tensors[name[1:]].shape
    return None


def elements_of(name: str, tensors: Mapping[str, Tensor]) -> sympy.Expr | None:
    shape = _shape(name, tensors)
    return None if shape is None else sympy.Mul(*shape) if shape else sympy.Integer(1)


def touched(f: Factor, term: Einsum, extents: Extents, tensors: Mapping[str, Tensor],
            span: Span | None = None) -> sympy.Expr:
    """The elements of ``f``'s tensor that factor ``f`` touches in ``term``
    (see the module's conventions); ``f`` may be the output (a write) or a
    lookup's bracket (its index tensor read at its letters)."""
    chosen = {g.indices[0]: g for g in term.operands if g.is_select or g.is_shift or g.is_offset}
    axes = f.indices[1:] if f.is_select else f.indices
    letters: set[str] = set()
    whole = sympy.Integer(1)
    for axis, x in enumerate(axes):
        g = chosen.get(x)
        if g is None:
            letters.add(x)
        elif g.is_select or g.is_offset:   # one row per index entry; a part one-to-one
            letters.update(g.indices[1:] if g.is_select else g.indices[1:2])
        else:                               # a shifted axis: read whole, as stored
            shape = _shape(f.tensor, tensors)
            if shape is None:
                raise _refuse(f"{f.tensor} is read through a shifted index and has no "
                              "declared shape", span, "report this declaration (a bug)")
            whole = whole * shape[axis]
    if letters & set(chosen):
        raise _refuse(f"{f} is indexed through a lookup of a lookup or a shift", span,
                      "write the inner selection as an op of its own")
    return sympy.expand(projection(frozenset(letters), term, extents, span) * whole)


def projection(letters: frozenset[str], term: Einsum, extents: Extents,
               span: Span | None = None) -> sympy.Expr:
    """Tuples of ``letters`` that some tuple of ``term``'s domain extends."""
    missing = sorted(x for x in letters | {y for b in bounds_of(term) for y in b.letters}
                     if x not in extents)
    if missing:
        product = " ".join(str(f) for f in term.operands)
        raise _refuse(f"the letter {missing[0]} has no extent in {term.output} = {product}",
                      span, "report this declaration (a bug)")
    bounds = bounds_of(term)
    inside = [b for b in bounds if b.letters <= letters]
    linking = [b for b in bounds if not b.letters <= letters]
    ranges = dict(extents)
    for component in _components(linking):
        one = _one_strict(component, letters, extents)
        if one is not None and not any(one in b.letters for b in inside):
            ranges[one] = extents[one] - 1
            continue
        _witnessed(component, letters, extents, span)
    return size(set(letters), ranges, inside)


def _one_strict(bounds: list[Bound], letters: frozenset[str], extents: Extents) -> str | None:
    """The factor's letter, when the only condition linking it to a letter it
    lacks is ``m < l`` between two letters of one extent ``E``: ``l`` has a
    partner for ``l = 1 .. E - 1`` and ``m`` for ``m = 0 .. E - 2``, so ``E - 1``
    of its values are read (the diagonal is no witness: it is excluded)."""
    if len(bounds) != 1 or not bounds[0].strict or bounds[0].offset != 0:
        return None
    b = bounds[0]
    inner = b.letters & letters
    if len(inner) != 1 or sympy.expand(extents[b.low] - extents[b.high]) != 0:
        return None
    return next(iter(inner))


def _components(bounds: list[Bound]) -> list[list[Bound]]:
    """The bounds grouped by the letters they connect."""
    groups: list[tuple[set[str], list[Bound]]] = []
    for b in bounds:
        joined = [g for g in groups if g[0] & b.letters]
        letters, members = set(b.letters), [b]
        for g in joined:
            letters |= g[0]
            members += g[1]
            groups.remove(g)
        groups.append((letters, members))
    return [m for _, m in groups]


def _witnessed(bounds: list[Bound], letters: frozenset[str], extents: Extents,
               span: Span | None) -> None:
    """Each value of the factor's letter in a component of linking conditions
    has a partner: the letters range over one extent and every condition
    holds with them equal.  Refused otherwise."""
    names = {x for b in bounds for x in b.letters}
    inner = names & letters
    text = ", ".join(f"{b.low} {'<' if b.strict else '<='} {b.high}"
                     + (f" + {sympy.sstr(b.offset)}" if b.offset != 0 else "") for b in bounds)
    if len(inner) > 1:
        raise _refuse(f"the condition {text} links letters {', '.join(sorted(inner))} of one "
                      "tensor through letters it lacks", span,
                      "write the condition on the tensor's own letters")
    first = extents[next(iter(sorted(names)))]
    same = all(sympy.expand(extents[x] - first) == 0 for x in names)
    diagonal = all(proved_at_most(sympy.Integer(1 if b.strict else 0), b.offset) for b in bounds)
    if inner and not (same and diagonal):
        raise _refuse(f"under {text}, which elements of the tensor indexed by "
                      f"{', '.join(sorted(inner))} are read is not proved", span,
                      "write the condition between letters over one dim that it allows "
                      "equal (t <= s, s - t < W)")


Part = tuple[object, ...]


def part(f: Factor, term: Einsum, extents: Extents) -> Part:
    """What fixes the elements ``f`` touches in ``term``, its letters renamed in
    order of their place in ``f``: the pattern of its axes (``X[i,i,k]`` and
    ``X[i,k,i]`` differ), their extents, the term's conditions and the
    lookups, shifts and places it reads through.  Two factors with one part
    touch the same elements; equal counts alone do not say so (each of
    ``T[i,i,k]`` and ``T[i,k,i]`` touches R^2 of the R^3 elements, 2R^2 - R
    together)."""
    names: dict[str, str] = {}
    for x in (f.indices[1:] if f.is_select else f.indices):
        names.setdefault(x, f"#{len(names)}")

    def n(x: str) -> str:
        return names.get(x, x)

    own = set(names)
    # a condition that ties f's letter to one f lacks removes none of f's
    # elements, but for one strict m < l (touched() proves so, or refuses):
    # that one removes the letter's last value (as m) or its first (as l), so
    # which end f's letter is at is part of its part; the other letter is any
    # letter over the same extent ("*")
    conditions = [comparison(g) for g in term.operands if g.is_comparison]
    bounds = sorted((n(b.low), n(b.high), b.strict, sympy.srepr(b.offset))
                    for b in conditions if b.letters <= own)
    bounds += sorted((n(b.low) if b.low in own else "*", n(b.high) if b.high in own else "*",
                      b.strict, sympy.srepr(b.offset))
                     for b in conditions
                     if b.strict and b.offset == 0 and b.letters & own and not b.letters <= own)
    # a lookup, shift or place that chooses one of f's axes (touched() reads
    # them so); one that chooses another tensor's axis leaves f's part alone
    via = [g for g in term.operands
           if (g.is_select or g.is_shift or g.is_offset) and g.indices[0] in own]
    for x in (x for g in via for x in g.indices):   # their other letters
        names.setdefault(x, f"${len(names)}")
    through = sorted((str(g.tensor), repr(g.fn), tuple(n(x) for x in g.indices)) for g in via)
    return (f.is_select, tuple(n(x) for x in f.indices),
            tuple((n(x), sympy.srepr(extents.get(x))) for x in names),
            tuple(bounds), tuple(through))


def union(counts: list[tuple[sympy.Expr, Part]], whole: sympy.Expr | None, name: str,
          span: Span | None) -> sympy.Expr:
    """The elements several factors of one op touch together: the whole
    tensor when one of them touches all of it, else one count when every
    factor has the same :func:`part`; anything else is refused."""
    counts = [(sympy.expand(c), k) for c, k in counts]
    if whole is not None and any(sympy.expand(c - whole) == 0 for c, _ in counts):
        return sympy.expand(whole)
    if all(k == counts[0][1] for _, k in counts):
        return counts[0][0]
    raise _refuse(f"the op touches different parts of {name} in different factors", span,
                  "write the op's products so that each reads one part of a tensor")


# ----------------------------------------------------------------- decoding --

def decoded(term: Einsum, extents: Extents, seq: sympy.Symbol, span: Span | None
            ) -> tuple[Einsum, dict[str, sympy.Expr]]:
    """``term`` and its letters' extents in one decoding step (see the module)."""
    positions = [x for x in term.indices if sympy.expand(extents[x] - seq) == 0]
    for x in term.indices:
        if x not in positions and seq in sympy.sympify(extents[x]).free_symbols:
            raise SymflopsError(
                f"cannot count one decoding step: letter {x} ranges over {extents[x]}, which "
                f"grows with the sequence length {seq} without being it", span,
                "decode a declaration whose letters over positions range over the sequence "
                "length itself (an MoE capacity or a convolution over positions is not modelled)")
    bounds = [(f, comparison(f)) for f in term.operands if f.is_comparison]
    earlier = {b.low for _, b in bounds
               if b.offset == 0 and b.low in positions and b.high in positions}
    current = [x for x in positions if x not in earlier]
    out = dict(extents)
    if not current:
        return term, out
    if len(current) > 1:
        raise SymflopsError(
            f"cannot count one decoding step: positions {', '.join(current)} meet in "
            f"{term.statement()} with no causal condition between them", span,
            "decoding needs a causal where-clause (where t <= s) between the position "
            "decoded and the ones it reads; a bidirectional layer is not decoded")
    s = current[0]
    out[s] = sympy.Integer(1)
    kept: list[Factor] = []
    narrowed: set[str] = set()
    for f in term.operands:
        b = comparison(f) if f.is_comparison else None
        if b is None or s not in b.letters:
            kept.append(f)
            continue
        c = b.offset - (1 if b.strict else 0)          # b.low <= b.high + c
        if b.high == s:                                 # other <= S - 1 + c
            if not proved_at_most(sympy.Integer(0), c):
                raise SymflopsError(f"cannot count one decoding step: the condition "
                                    f"{f.condition()} keeps the last positions out", span,
                                    "decode under t <= s or a window s - t < W")
            continue
        other = b.high                                  # S - 1 <= other + c: the last c + 1
        if not proved_at_most(sympy.Integer(0), c):
            raise SymflopsError(f"cannot count one decoding step: the condition "
                                f"{f.condition()} leaves no earlier position", span,
                                "decode under t <= s or a window s - t < W")
        out[other] = sympy.Min(out[other], c + 1)
        narrowed.add(other)
    if any(f.is_comparison and narrowed & set(f.indices) for f in kept):
        raise SymflopsError("cannot count one decoding step: a window's positions are bounded "
                            "again by another condition", span,
                            "decode a layer with one window per product")
    return Einsum(term.output, tuple(kept), term.coefficient), out
