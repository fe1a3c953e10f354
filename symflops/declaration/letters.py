"""Index letters of one statement, bound to dims through the tensors they index.

Every letter of an op is bound to the extent of the axis it indexes (a
:class:`Letter`); a looked-up position (``E[tok[b], d]``) and an affine one
(``X[b,c,p+k]``, ``X[b,c,2*i+u]``, ``H[b,s-1,d]``, on the output too) get
fresh letters, a dim in an affine index being part of its constant
(``X[b,c,i+u-R]``, a centred kernel); the one letter of an affine index that
no operand binds gets the extent that makes the index reach the axis's last
position (a valid convolution), and every affine index is proved to stay
inside its axis and its declared padding; the lookups, the output's letters
and the where-clause are checked.  :func:`bind_letters` does all of it, in that
order, and returns the statement with its fresh letters and the letters bound.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, Mapping, Sequence

import sympy

from ..core.errors import SymflopsError, closest
from ..core.ir import Affine, Tensor, fresh_letter
from ..core.sizes import NONNEGATIVE, POSITIVE, ZERO, check_size, sign
from ..lang.statement import AffineTerm, Call, Ref, Shift, Statement
from ..ops.base import claim
from ..ops.einsum.lower import affine
from ..ops.prefix_statement import bounded_extents
from ..ops.registry import CALLS
from .ranges import (At, Letter, check_range, check_start, needed, new_dim, pad_text, pairs,
                     reach)
from .outputs import pad_advice
from .scatter import scatter_refs

@dataclass(frozen=True)
class IndexRange:
    """The axis size an index tensor's values range over, and the tensor looked up along it."""

    extent: sympy.Expr
    table: str


def bind_letters(st: Statement, known: Mapping[str, Tensor], dims: Mapping[str, sympy.Symbol],
                 at: At, ranges: dict[str, IndexRange], operands: Sequence[Ref] = (),
                 defined: Mapping[str, Letter] | None = None,
                 subs: Mapping[sympy.Symbol, sympy.Expr] | None = None
                 ) -> tuple[Statement, dict[str, Letter]]:
    """The statement with fresh letters at its lookups and shifts, and every
    letter bound; ``ranges`` collects, across statements, the axis size each
    index tensor selects along.  A call kind may add ``operands`` (the further
    parts of a concatenation, bound like the statement's own) and letters it
    ``defined`` itself (the joined axis, whose extent is the sum of the parts').
    Two extents of a letter agree when they do with the defined dims
    replaced by their formulas (``subs``: ``T = M + S``)."""
    for ref in (*st.refs, *operands):
        if ref.name not in known:
            raise SymflopsError(f"unknown tensor {ref.name!r}", at(ref.column),
                                f"declare it under 'tensors:' or produce it with an op; "
                                f"{closest(ref.name, sorted(known))}")
    st = _resolve_lookups(st, lambda name, k: (known[name].shape[k] if name in known
                                               and k < len(known[name].shape) else None),
                          at, set(dims))
    bound: dict[str, Letter] = dict(defined or {})
    for ref in (*st.refs, *operands):
        _bind(ref, known[ref.name], at, bound, subs or {})
    for ref, tensor in scatter_refs(st, known, at):  # a scatter's output, its index tensors
        _bind(ref, tensor, at, bound, subs or {})
    _bind_windows(st, dims, bound, at)
    _solve_shifts(st, bound, dims, known, at, subs or {})
    _solve_output(st, bound, dims, at)
    _check_lookups(st, known, at, ranges, bound)
    # an output letter on no operand, bounded in the where-clause: a prefix sum
    for letter, (extent, source, column) in bounded_extents(
            st, {k: v.extent for k, v in bound.items()}, at, CALLS).items():
        bound[letter] = Letter(extent, bound[source].tensor, at(column))
    _check_output(st, bound, at)
    _check_where(st, bound, dims, known, at)
    return st, bound


def _bind(ref: Ref, tensor: Tensor, at: At, bound: dict[str, Letter],
          subs: Mapping[sympy.Symbol, sympy.Expr]) -> None:
    """Bind each index letter of ``ref`` to the extent of the axis it indexes."""
    if len(ref.indices) != len(tensor.shape):
        shape = "[" + ", ".join(map(str, tensor.shape)) + "]"
        raise SymflopsError(
            f"{ref.name} has {len(tensor.shape)} axes {shape} but is used with "
            f"{len(ref.indices)} indices", at(ref.column),
            f"give {ref.name} one index per axis, e.g. {ref.name}"
            f"[{','.join('ijklmn'[k] for k in range(len(tensor.shape)))}]")
    for letter, column, extent in zip(ref.indices, ref.index_columns, tensor.shape):
        if (letter in bound and bound[letter].extent != extent
                and sympy.simplify((bound[letter].extent - extent).subs(subs)) != 0):
            first = bound[letter]
            raise SymflopsError(
                f"index {letter!r} ranges over {first.extent} in {first.tensor} "
                f"but over {extent} in {ref.name}", at(column),
                f"use a different letter for the axis of size {extent}")
        bound.setdefault(letter, Letter(extent, ref.name, at(column)))


#: Fresh letters for looked-up and shifted positions, in order of preference.
LOOKUP_LETTERS = "vwuxyzpqrjklmnoghiabcdef"
SHIFT_LETTERS = "qrsjlmnuvwxyzghiaefpkbcdot"


def _bind_windows(st: Statement, dims: Mapping[str, sympy.Symbol], bound: dict[str, Letter],
                  at: At) -> None:
    """A letter that a call reduces and only a shift of its argument carries
    (the window ``k`` of ``max_k(X[b,c,p+k])``, a pooling) ranges over the dim
    named by the letter upper-cased (``K``), which must be declared; the call
    kind says which letters it reduces (its ``window_letters``, for the kinds
    that reduce over a window).  Any other unbound shift is left to
    :func:`_solve_shifts`, which refuses it."""
    calls = [f for term in st.terms for f in term.factors if isinstance(f, Call) and f.ref.shifts]
    for call in calls:
        letters = getattr(claim(CALLS, call.name), "window_letters", None)
        for letter in letters(call) if letters else ():
            shift = next((s for s in call.ref.shifts if letter in (s.left, s.right)), None)
            if letter in bound or shift is None:
                continue
            column = shift.left_column if shift.left == letter else shift.right_column
            name = letter.upper()
            if name not in dims:
                raise SymflopsError(f"the window {letter!r} of {call.name}(...) has no extent",
                                    at(column), f"declare its width as a dim {name} under 'dims:' "
                                    f"(a window letter ranges over the dim of its upper-cased name)")
            bound[letter] = Letter(dims[name], call.ref.name, at(column))


def _solve_shifts(st: Statement, bound: dict[str, Letter], dims: Mapping[str, sympy.Symbol],
                  known: Mapping[str, Tensor], at: At,
                  subs: Mapping[sympy.Symbol, sympy.Expr] | None = None) -> None:
    """Bind the one letter of an affine index that no operand binds (``p``
    in ``p+k``, ``i`` in ``2*i+u``: on the output only) so that the index
    reaches exactly the last position of its axis; then prove every index in
    range (:func:`~symflops.declaration.ranges.check_range`): the cost model counts every tuple."""
    for ref in st.refs:
        for s in ref.shifts:
            relation = affine(s, dims)
            extent = bound[ref.indices[s.position]].extent
            # A padded axis may be read from -before to extent - 1 + after (zeros outside).
            before, after = known[ref.name].padding(s.position)
            free = [(t, c) for t, c in zip(s.terms, relation.coefficients) if t.letter not in bound]
            viewed = len(free) == 2 and _view(s, free, relation, extent, (before, after), bound,
                                              at, subs or {})
            if viewed == "promised":
                continue    # c*C + u covers the axis of C * (S / C) positions exactly
            if viewed:
                free = []
            if len(free) > 1:
                a, b = free[0][0].letter, free[1][0].letter
                named = [t.letter for t, _ in free if t.letter[:1].isupper()]
                raise SymflopsError(
                    f"the shift {s.text} leaves an index unbound", at(s.column),
                    f"index {b!r} (or {a!r}) with another operand, e.g. a kernel "
                    f"W[o,c,{b}], so that the other letter's extent follows from the axis "
                    f"of {ref.name}: ext({a}) = ext(axis) - ext({b}) + 1" + (
                        f"; if {named[0]!r} is a constant, declare it under 'dims:' (a dim "
                        "in an index is part of its constant: i+u-R)" if named else ""))
            if free:
                term, c = free[0]
                if term.letter in dims:
                    raise SymflopsError(
                        f"{term.letter!r} in the index {s.text} of {ref.name} is a dim, not a "
                        "letter", at(term.column), "an index adds letters; a dim in it "
                        f"multiplies a letter (P*i+u), and the constant is a whole number")
                if c.could_extract_minus_sign():
                    raise SymflopsError(
                        f"the letter {term.letter!r} of {s.text} is bound by no operand and "
                        "counts down", at(term.column), f"index {term.letter!r} with another "
                        "operand, so that its extent is declared")
                rest = [(t, k) for t, k in zip(s.terms, relation.coefficients) if t is not term]
                low, high = reach(rest, relation.offset, bound, ())
                # the free letter adds from 0 up: the least value is the rest's
                centred = c == 1 and high != after and sign(
                    high, sorted(high.free_symbols, key=str)) in (POSITIVE, NONNEGATIVE)
                check_start(ref, s, low, known[ref.name], at, (
                    f"; {pad_text(known[ref.name], s.position, sympy.expand(-low - before), high - after)}"
                    f" keeps {term.letter!r} over the axis's {sympy.sstr(extent)} positions, "
                    "'same' padding for a centred kernel") if centred else "")
                same = (f"; or pad {ref.name} after the axis too, "
                        f"{pad_text(known[ref.name], s.position, 0, high - after)}, so that "
                        f"{term.letter!r} runs over the axis's {sympy.sstr(extent)} positions, "
                        "'same' padding for a centred kernel" if before != 0 and centred else "")
                solved = sympy.expand((extent - 1 + after - high) / c + 1)
                produced = known[ref.name].role == "activation"  # its axis is the op's to size
                check_size(solved, f"the letter {term.letter!r} of the shift {s.text} ranges "
                           "over", at(term.column),
                           f"the axis of {ref.name} must hold {s.text} at the last "
                           f"{term.letter!r} for every value of the dims: " + (
                               f"pad it after with zeros ({term.letter!r} then runs over its "
                               f"{sympy.sstr(extent)} positions): "
                               + pad_advice(known[ref.name], s.position, before, high)
                               if produced and c == 1 else
                               f"pad it: {pad_advice(known[ref.name], s.position, before, after)}"
                               if produced else
                               f"declare it as {needed(term, c, high - after, dims)} with a new "
                               f"dim {new_dim(dims)} for the positions of {term.letter!r}") + (
                               f"; its padding lets the index run from {sympy.sstr(-before)} "
                               f"({ref.name}'s own positions: a causal convolution reads p-k)"
                               if before != 0 else "") + same)
                bound[term.letter] = Letter(solved, ref.name, at(term.column))
            check_range(st, ref, s, relation, extent, bound, known[ref.name], at)


def _view(s: Shift, free: list[tuple[AffineTerm, sympy.Expr]], relation: Affine,
          extent: sympy.Expr, padding: tuple[sympy.Expr, sympy.Expr],
          bound: dict[str, Letter], at: At,
          subs: Mapping[sympy.Symbol, sympy.Expr] | None = None) -> bool | str:
    """A view of an axis as a pair of letters, ``X[b,U*i+u]`` with neither letter
    bound elsewhere (a reshape): ``u`` runs over ``U`` and ``i`` over the axis's
    extent divided by ``U``, the row-major split, when the index is exactly
    ``U*i+u`` over an unpadded axis whose extent ``U`` divides.  Binds both and
    says True; False for any other index (left to the caller's refusal)."""
    (outer, c), (inner, one) = sorted(free, key=lambda tc: tc[1] == 1)
    if one != 1 or relation.offset != 0 or padding != (0, 0) or not c.is_Symbol \
            or len(s.terms) != 2:
        return False
    blocks, rest = sympy.div(sympy.expand(extent), c)
    promised = [d for d, e in (subs or {}).items()
                if sympy.simplify(e - extent / c) == 0] if rest != 0 else []
    if promised:
        bound[inner.letter] = Letter(c, s.text, at(inner.column))
        bound[outer.letter] = Letter(promised[0], s.text, at(outer.column))
        return "promised"
    if rest != 0:
        raise SymflopsError(
            f"{s.text} views an axis of {sympy.sstr(extent)} positions as blocks of {c}, "
            f"which does not divide it", at(s.column),
            f"declare the axis as {c}*N for a dim N of the blocks, or a dim N: {{equals: "
            f"{sympy.sstr(extent)} / {c}}} (the blocks' count, checked whole at every "
            f"evaluation), so that {outer.letter!r} runs over N and {inner.letter!r} over {c}")
    check_size(blocks, f"the letter {outer.letter!r} of the view {s.text} ranges over",
               at(outer.column), f"declare the axis as {c}*N for a dim N of the blocks")
    bound[inner.letter] = Letter(c, s.text, at(inner.column))
    bound[outer.letter] = Letter(sympy.expand(blocks), s.text, at(outer.column))
    return True


def _solve_output(st: Statement, bound: dict[str, Letter], dims: Mapping[str, sympy.Symbol],
                  at: At) -> None:
    """Bind the fresh letter of an affine index on the output (``Y[b,o,2*i+u]
    = X[b,c,i] W[c,o,u]``, a transposed convolution): the output axis holds
    every value the index takes, ``0 .. high``, so it has ``high + 1``
    positions; the index must not go below 0."""
    for s in st.lhs.shifts:
        for term in s.terms:
            if term.letter not in bound:
                raise SymflopsError(
                    f"the output index {s.text} of {st.lhs.name} reads {term.letter!r}, which "
                    "no operand carries", at(term.column),
                    f"an affine output index combines letters of the operands, e.g. "
                    f"Y[b,o,2*i+u] = X[b,c,i] W[c,o,u]; index {term.letter!r} on an operand")
        relation = affine(s, dims)
        low, high = reach(tuple(zip(s.terms, relation.coefficients)), relation.offset, bound,
                           pairs(st))
        if sign(low, sorted(low.free_symbols, key=str)) not in (ZERO, POSITIVE, NONNEGATIVE):
            raise SymflopsError(
                f"the output index {s.text} of {st.lhs.name} writes before the start of its "
                f"axis: it goes down to {sympy.sstr(low)}", at(s.column),
                "every index must be at least 0 for every value of its letters: add a "
                "constant so that its least value is 0")
        bound[st.lhs.indices[s.position]] = Letter(sympy.expand(high + 1), st.lhs.name,
                                                   at(s.column))


def _resolve_lookups(st: Statement, extent_of: Callable[[str, int], sympy.Expr | None],
                     at: At, dim_names: set[str] = frozenset()) -> Statement:  # type: ignore[assignment]
    """Give every looked-up position (``E[tok[b], d]``) a fresh letter, the
    lower-case name of the axis's dim when that is free (``v`` for ``V``).
    A fresh letter is never a dim's name (``c`` beside a capacity factor
    ``c``): on a sheet the two would print alike."""
    used = {i for r in (st.lhs, *st.refs) for i in r.indices}
    used |= {c.left for c in st.where} | {c.right for c in st.where}
    used |= {x for r in (st.lhs, *st.refs) for s in r.shifts for x in s.letters}
    used |= dim_names
    # The names a statement indexes with, or compares: a name there is a letter
    # even when a dim shares it; any other dim in an affine index is a constant.
    names = {i for r in (st.lhs, *st.refs) for i in r.indices if i}
    names |= {c.left for c in st.where} | {c.right for c in st.where}

    def fresh(ref: Ref, position: int, letters: str = LOOKUP_LETTERS) -> str:
        extent = extent_of(ref.name, position)
        named = str(extent).lower() if isinstance(extent, sympy.Symbol) else ""
        return fresh_letter(used, [named] if len(named) == 1 else [], letters, prefix="v")

    def resolve(ref: Ref) -> Ref:
        if not ref.gathers and not ref.shifts:
            return ref
        indices = list(ref.indices)
        for g in ref.gathers:
            indices[g.position] = fresh(ref, g.position)
        shifts = tuple(_named_constant(ref.name, s, names, dim_names, at) for s in ref.shifts)
        for s in shifts:
            _check_affine(ref.name, s, dim_names, at)
            indices[s.position] = fresh(ref, s.position, SHIFT_LETTERS)
        return replace(ref, indices=tuple(indices), shifts=shifts)

    terms = []
    lhs = resolve(st.lhs)  # an affine output index (a transposed convolution) writes a fresh letter
    for term in st.terms:
        factors = [resolve(f) if isinstance(f, Ref)
                   else replace(f, ref=resolve(f.ref)) if isinstance(f, Call) else f
                   for f in term.factors]
        terms.append(replace(term, factors=tuple(factors)))
    return replace(st, lhs=lhs, terms=tuple(terms))


def _named_constant(tensor: str, s: Shift, letters: set[str], dim_names: set[str],
                    at: At) -> Shift:
    """``s`` with its terms that name a dim moved to its constant (``R`` in
    ``i+u-R``, ``2*R`` in ``i+2*k-2*R``, ``P*R``): a declared dim that is no
    letter of the statement.  A term written letter-first (``i*R``) keeps its
    letter; an index left without a letter is refused."""
    terms, named = [], []
    for t in s.terms:
        if t.letter not in dim_names or t.letter in letters:
            terms.append(t)
        elif isinstance(t.coefficient, str) and t.coefficient not in dim_names:
            terms.append(replace(t, letter=t.coefficient, coefficient=t.letter))  # i*R is R*i
        else:
            named.append(t)
    if not named:
        return s
    if not terms:
        raise SymflopsError(
            f"the index {s.text} of {tensor} holds no letter", at(s.column),
            "an index adds letters, and dims and whole numbers as its constant (i+u-R); "
            "a position fixed by dims alone is a slice: declare the tensor without that "
            "axis, or index it with a letter over an axis of extent 1")
    return replace(s, terms=tuple(terms), named=tuple(named))


def _check_affine(tensor: str, s: Shift, dim_names: set[str], at: At) -> None:
    """An affine index names each letter once, and its named coefficients
    are dims (``P*i``): ``p*k``, a product of two letters, is no affine index."""
    letters = s.letters
    for k, term in enumerate(s.terms):
        if term.letter in letters[:k]:
            raise SymflopsError(f"the shift {s.text} adds a letter to itself", at(s.column),
                                "an affine index names each letter once, e.g. p+k or 2*p+k")
        if isinstance(term.coefficient, str) and term.coefficient not in dim_names:
            raise SymflopsError(
                f"index arithmetic of the form {s.text} in {tensor}[...] is not supported",
                at(s.column), f"{term.coefficient!r} is no dim, so {term.coefficient}*"
                f"{term.letter} multiplies two letters; a coefficient is a positive whole "
                f"number or a declared dim (P*i+u)")


def _check_lookups(st: Statement, known: Mapping[str, Tensor], at: At,
                   ranges: dict[str, IndexRange], bound: Mapping[str, Letter]) -> None:
    """Index tensors only select, through tensors declared with ``role: index``;
    one index tensor selects along axes of one size (its values' range)."""
    inner = {id(g.ref) for ref in (st.lhs, *st.refs) for g in ref.gathers}
    for ref in (*st.refs, *(g.ref for g in st.lhs.gathers)):
        tensor = known[ref.name]
        if id(ref) in inner and tensor.role != "index":
            raise SymflopsError(
                f"{ref.name} is used as an index tensor but is declared as {tensor.role}",
                at(ref.column), f"declare it with integer values as "
                f"'{ref.name}: {{shape: [...], role: index}}', or look up through another tensor")
        if id(ref) not in inner and tensor.role == "index":
            raise SymflopsError(
                f"{ref.name} holds indices and is used as a factor", at(ref.column),
                f"index tensors only select, e.g. E[{ref.name}[{','.join(ref.indices) or 'b'}], d]")
    for ref in (st.lhs, *st.refs):
        for g in ref.gathers:
            r, extent = g.ref, bound[ref.indices[g.position]].extent
            if r.name in ranges and sympy.simplify(ranges[r.name].extent - extent) != 0:
                raise SymflopsError(
                    f"{r.name} selects along an axis of size {extent} in {ref.name} but of size "
                    f"{ranges[r.name].extent} in {ranges[r.name].table}", at(r.column),
                    "an index tensor's values range over one axis size; use one index tensor "
                    "per table size")
            ranges.setdefault(r.name, IndexRange(extent, ref.name))


def _check_output(st: Statement, bound: Mapping[str, Letter], at: At) -> None:
    """Every output letter indexes some operand, once."""
    seen: set[str] = set()
    for letter, col in zip(st.lhs.indices, st.lhs.index_columns):
        if letter not in bound:
            raise SymflopsError(
                f"output index {letter!r} of {st.lhs.name} is on no operand", at(col),
                f"every output index must index some operand, or bound a letter it sums over in "
                f"the where-clause (a prefix sum: 'Cs[b,s] = X[b,u] where u <= s'); the "
                f"operands carry {', '.join(sorted(bound)) or 'no indices'}")
        if letter in seen:
            raise SymflopsError(f"index {letter!r} appears twice on the output {st.lhs.name}",
                                at(col), "an output index names one axis; use a new letter")
        seen.add(letter)


def _check_where(st: Statement, bound: Mapping[str, Letter], dims: Mapping[str, sympy.Symbol],
                 known: Mapping[str, Tensor], at: At) -> None:
    """Every letter of the where-clause is an index of the op, and no letter is
    compared with itself.  Conditions that go round (``t <= s, s - t < W``: a
    window; ``t <= s, s <= t``: the diagonal) are counted when the op is
    lowered, where an empty domain is refused (:mod:`symflops.ops.conditions`)."""
    letters = sorted(i for i in bound if i)
    for c in st.where:
        for letter, col in ((c.left, c.column), (c.right, c.right_column)):
            if letter in bound:
                continue
            what = ("a dimension" if letter in dims else "a tensor" if letter in known
                    else "not an index letter of this op")
            raise SymflopsError(
                f"{letter!r} in the where-clause is {what}", at(col),
                f"compare index letters of this op ({', '.join(letters)}; letters are local "
                "to one op), e.g. 'where t <= s'")
        if c.left == c.right:
            raise SymflopsError(f"the condition compares {c.left!r} with itself", at(c.column),
                                "compare two different letters, e.g. 'where t <= s'")
