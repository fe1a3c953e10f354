"""Index letters of one statement, bound to dims through the tensors they index.

Every letter of an op is bound to the extent of the axis it indexes (a
:class:`Letter`); a looked-up position (``E[tok[b], d]``) and a shifted one
(``X[b,c,p+k]``) get fresh letters; a letter of a shift that no operand binds
gets the extent of a valid convolution; the lookups, the output's letters and
the where-clause are checked.  :func:`bind_letters` does all of it, in that
order, and returns the statement with its fresh letters and the letters bound.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, Mapping, Sequence

import sympy

from ..core.errors import Span, SymflopsError, closest
from ..core.ir import Tensor, fresh_letter
from ..core.sizes import check_size
from ..lang.statement import Call, Ref, Shift, Statement
from ..ops.base import claim
from ..ops.registry import CALLS

#: Where a column of the statement is in its file (None without a file).
At = Callable[[int], "Span | None"]


@dataclass(frozen=True)
class Letter:
    """An index letter of an op: the extent it ranges over, and the tensor
    (and place) that bound it first."""

    extent: sympy.Expr
    tensor: str
    span: Span | None


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
    st = _resolve_lookups(st, lambda name, k: (known[name].shape[k] if k < len(known[name].shape)
                                               else None), at, set(dims))
    bound: dict[str, Letter] = dict(defined or {})
    for ref in (*st.refs, *operands):
        _bind(ref, known[ref.name], at, bound, subs or {})
    _bind_windows(st, dims, bound, at)
    _solve_shifts(st, bound, at)
    _check_lookups(st, known, at, ranges, bound)
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
        if letter in bound and sympy.simplify((bound[letter].extent - extent).subs(subs)) != 0:
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


def _solve_shifts(st: Statement, bound: dict[str, Letter], at: At) -> None:
    """Bind a letter of a shift ``p+k`` that no operand binds (``p``, on the
    output only): a valid convolution, ``ext(p) = ext(q) - ext(k) + 1``."""
    for ref in st.refs:
        for s in ref.shifts:
            a, b = s.left, s.right
            extent = bound[ref.indices[s.position]].extent
            if a in bound and b in bound:
                # Every (p, k) must land on the axis: the cost model counts them all.
                ea, eb = bound[a].extent, bound[b].extent
                spare = sympy.simplify(extent - ea - eb + 1)
                if spare.is_nonnegative is not True:
                    raise SymflopsError(
                        f"the shift {a}+{b} runs past the axis of {ref.name}: it reaches "
                        f"{ea} + {eb} - 1 positions, the axis has {extent}",
                        at(s.left_column), f"declare the axis of {ref.name} as {ea} + "
                        f"{eb} - 1 (valid convolution), or leave {a!r} on the output "
                        "only so that its extent follows from the axis")
                continue
            if a not in bound and b not in bound:
                raise SymflopsError(
                    f"the shift {a}+{b} leaves an index unbound", at(s.left_column),
                    f"index {b!r} (or {a!r}) with another operand, e.g. a kernel "
                    f"W[o,c,{b}], so that the other letter's extent follows from the axis "
                    f"of {ref.name}: ext({a}) = ext(axis) - ext({b}) + 1")
            known_letter, free, col = ((a, b, s.right_column) if a in bound
                                       else (b, a, s.left_column))
            given = bound[known_letter].extent
            solved = sympy.simplify(extent - given + 1)
            check_size(solved, f"the letter {free!r} of the shift {a}+{b} ranges over", at(col),
                       f"the axis of {ref.name} must hold at least {given} "
                       f"positions for every value of the dims: declare it as "
                       f"P + {given} - 1 (a valid convolution) with a dim P "
                       "for the positions")
            bound[free] = Letter(solved, ref.name, at(col))


def _resolve_lookups(st: Statement, extent_of: Callable[[str, int], sympy.Expr | None],
                     at: At, dim_names: set[str] = frozenset()) -> Statement:  # type: ignore[assignment]
    """Give every looked-up position (``E[tok[b], d]``) a fresh letter, the
    lower-case name of the axis's dim when that is free (``v`` for ``V``).
    A fresh letter is never a dim's name (``c`` beside a capacity factor
    ``c``): on a sheet the two would print alike."""
    if st.lhs.gathers:
        raise SymflopsError(f"a lookup on the output {st.lhs.name}", at(st.lhs.gathers[0].ref.column),
                            "write the output with plain letters; lookups select from operands")
    if st.lhs.shifts:
        s = st.lhs.shifts[0]
        raise SymflopsError(f"a shifted index {s.text} on the output {st.lhs.name}",
                            at(s.column),
                            "write the output with plain letters; shifts read operands, e.g. "
                            "Y[b,o,p] = X[b,c,p+k] W[o,c,k]")
    used = {i for r in (st.lhs, *st.refs) for i in r.indices}
    used |= {c.left for c in st.where} | {c.right for c in st.where}
    used |= {x for r in st.refs for s in r.shifts for x in s.letters}
    used |= dim_names

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
        for s in ref.shifts:
            _check_affine(ref.name, s, dim_names, at)
            indices[s.position] = fresh(ref, s.position, SHIFT_LETTERS)
        return replace(ref, indices=tuple(indices))

    terms = []
    for term in st.terms:
        factors = [resolve(f) if isinstance(f, Ref)
                   else replace(f, ref=resolve(f.ref)) if isinstance(f, Call) else f
                   for f in term.factors]
        terms.append(replace(term, factors=tuple(factors)))
    return replace(st, terms=tuple(terms))


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
    if not s.is_plain:
        raise SymflopsError(
            f"index arithmetic of the form {s.text} in {tensor}[...] is not supported",
            at(s.column), "strides, dilations and offsets (2*p+k, p+2*k, s-1) are read but "
            "not counted yet; a shift of two letters (p+k, a valid convolution) is")


def _check_lookups(st: Statement, known: Mapping[str, Tensor], at: At,
                   ranges: dict[str, IndexRange], bound: Mapping[str, Letter]) -> None:
    """Index tensors only select, through tensors declared with ``role: index``;
    one index tensor selects along axes of one size (its values' range)."""
    inner = {id(g.ref) for ref in st.refs for g in ref.gathers}
    for ref in st.refs:
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
                f"every output index must index some operand; the operands carry "
                f"{', '.join(sorted(bound)) or 'no indices'}")
        if letter in seen:
            raise SymflopsError(f"index {letter!r} appears twice on the output {st.lhs.name}",
                                at(col), "an output index names one axis; use a new letter")
        seen.add(letter)


def _check_where(st: Statement, bound: Mapping[str, Letter], dims: Mapping[str, sympy.Symbol],
                 known: Mapping[str, Tensor], at: At) -> None:
    """Every letter of the where-clause is an index of the op; no letter is
    compared with itself, and the conditions do not go round in a cycle."""
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
    below: dict[str, set[str]] = {}
    # A condition with an offset (s - t < W) may go round with a plain one
    # (t <= s): a window; whether its domain can be counted is decided when it is.
    for c in (c for c in st.where if c.plain):
        low, high = (c.left, c.right) if c.op in ("<=", "<") else (c.right, c.left)
        below.setdefault(high, set()).add(low)
    state: dict[str, str] = {}

    def visit(letter: str) -> None:
        if state.get(letter) == "done":
            return
        if state.get(letter) == "active":
            raise SymflopsError("the where-clause's conditions form a cycle",
                                at(st.where[0].column),
                                "each letter must be bounded by letters it does not bound; "
                                "for equal letters use one letter")
        state[letter] = "active"
        for low in below.get(letter, ()):
            visit(low)
        state[letter] = "done"

    for letter in list(below):
        visit(letter)
