"""How a statement becomes a :class:`~symflops.ops.prefix.PrefixSum`.

A statement whose output carries a letter that no operand does, bounded in
the where-clause by a letter an operand does (``Cs[b,s,h] = La[b,u,h] where
u <= s``), is a prefix sum.  The letter binding
(:mod:`symflops.declaration.letters`) gives such a letter the extent of the
letter it is compared with (:func:`bounded_extents`: ``s`` ranges over ``u``'s
``S``); the einsum lowering hands the statement here (:func:`lower_prefix`,
one call in :func:`symflops.ops.einsum.lower.lower`).  Everything that would
not be a prefix sum of one tensor is refused by name at its column, with the
form to write instead: a product, a function or a constant (compute it in an
op of its own first), an output letter that bounds no summed letter, a summed
letter that no output letter bounds (sum it in an op of its own), two summed
letters compared (sum one first), two such output letters compared (state the
mask on the op that reads the output).
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

import sympy

from ..core.domain import Uncountable
from ..core.errors import SymflopsError
from ..core.ir import Einsum, Factor, fresh_letter
from .base import Scope, claim
from .conditions import check_domain, condition_factor
from .prefix import PrefixSum
from .prefix_count import MAX_SUMMED, prefix_count

#: The form, for messages.
EXAMPLE = "'Cs[b,s,h] = La[b,u,h] where u <= s'"


def _carried(st: Any) -> set[str]:
    """The letters the right side's tensors carry (an affine index's letters too)."""
    return ({i for r in st.refs for i in r.indices if i}
            | {x for r in st.refs for s in r.shifts for x in s.letters})


def output_only(st: Any) -> tuple[tuple[str, int], ...]:
    """The output letters (with their columns) that no operand carries and
    the where-clause names: the letters of a prefix sum."""
    carried = _carried(st)
    named = {c.left for c in st.where} | {c.right for c in st.where}
    return tuple((i, col) for i, col in zip(st.lhs.indices, st.lhs.index_columns)
                 if i and i not in carried and i in named)


def bounded_extents(st: Any, extents: Mapping[str, sympy.Expr], at: Callable[[int], Any],
                    calls: Any = ()) -> dict[str, tuple[sympy.Expr, str, int]]:
    """For each output letter that no operand carries and that a condition
    compares with a letter of known extent (``extents``): that extent, the
    letter it comes from and the output letter's column.  Such a letter
    ranges over the letter it bounds in a prefix sum; letters of different
    extents are refused.  A statement with a call of an op kind
    (``softmax_t``, ``mean_t``, ...) gets none: those kinds read no such letter."""
    if any(claim(calls, getattr(f, "name", "")) is not None
           for t in st.terms for f in t.factors if hasattr(f, "ref")):
        return {}
    out: dict[str, tuple[sympy.Expr, str, int]] = {}
    for letter, column in output_only(st):
        if letter in extents:
            continue
        found = [(c.right if c.left == letter else c.left) for c in st.where
                 if letter in (c.left, c.right)]
        found = [x for x in dict.fromkeys(found) if x in extents]
        values = list(dict.fromkeys(sympy.expand(extents[x]) for x in found))
        if len(values) > 1:
            raise SymflopsError(
                f"the output letter {letter!r} of {st.lhs.name} is on no operand and is compared "
                f"with letters of different extents ({', '.join(map(str, values))})",
                at(column), f"a prefix sum's output letter ranges over the letter it bounds, e.g. "
                f"{EXAMPLE}; compare it with letters of one extent")
        if found:
            out[letter] = (values[0], found[0], column)
    return out


def _term_letters(term: Any) -> set[str]:
    refs = [f if hasattr(f, "indices") else f.ref for f in term.factors if hasattr(f, "indices")
            or hasattr(f, "ref")]
    return ({i for r in refs for i in r.indices if i}
            | {x for r in refs for s in r.shifts for x in s.letters})


def is_prefix(st: Any) -> bool:
    """Whether the (bound) statement is a prefix sum, or has a term that is
    one: an output letter that no operand of the term carries, compared in
    the where-clause with a letter the term sums over."""
    out = set(st.lhs.indices)
    for term in st.terms:
        carried = _term_letters(term)
        summed = carried - out
        if any({c.left, c.right} & summed and {c.left, c.right} & (out - carried)
               for c in st.where):
            return True
    return False


def lower_prefix(st: Any, out: Factor, scope: Scope) -> PrefixSum:
    """The statement as a :class:`PrefixSum`; SymflopsError at the place of
    anything else."""
    at = scope.at
    letters = output_only(st)
    if not letters or len(st.terms) > 1:
        term = next(t for t in st.terms if not set(st.lhs.indices) <= _term_letters(t))
        raise SymflopsError(
            "a term of this sum is a prefix sum (an output letter that none of its operands "
            "carries, bounded by a letter it sums over)", at(term.column),
            f"write the prefix sum as an op of its own, e.g. {EXAMPLE}, and add its output "
            "in another op")
    names = ", ".join(repr(x) for x, _ in letters)
    what = (f"a prefix sum (the output letter{'s' if len(letters) > 1 else ''} {names} on no "
            "operand, bounded by the where-clause)")
    term = st.terms[0]
    factor = term.factors[0] if len(st.terms) == 1 and len(term.factors) == 1 else None
    if factor is None or term.negative or not hasattr(factor, "indices"):
        place = st.terms[1].column if len(st.terms) > 1 else term.column
        raise SymflopsError(
            f"{what} sums one tensor", at(place),
            f"compute the product, function, constant or sum in an op of its own, e.g. "
            f"'Z[b,u,h] = exp(La[b,u,h])', then sum it: 'Cs[b,s,h] = Z[b,u,h] where u <= s'")
    ref = factor
    if ref.gathers or ref.shifts:
        raise SymflopsError(f"{what} reads a lookup or a shifted index", at(ref.column),
                            "read it in an op of its own first, e.g. 'Z[b,u,h] = X[b,u+1,h]', "
                            "then sum Z")
    if len(set(ref.indices)) != len(ref.indices):
        raise SymflopsError(f"{what} reads a diagonal of {ref.name}", at(ref.column),
                            "take the diagonal in an op of its own first, then sum it")
    output = set(st.lhs.indices)
    summed = [i for i in dict.fromkeys(ref.indices) if i not in output]
    only = {x for x, _ in letters}
    for c in st.where:
        pair = {c.left, c.right}
        if pair <= set(summed):
            raise SymflopsError(
                f"{what} compares two summed letters, {c.left!r} and {c.right!r}",
                at(c.column), "each summed letter lies between output letters; sum one of "
                "them in an op of its own first")
        if pair <= only:
            raise SymflopsError(
                f"{what} compares two output letters that no operand carries, {c.left!r} and "
                f"{c.right!r}", at(c.column), "state that mask on the op that reads the output "
                "(e.g. 'L[l,m] = exp(Seg[l,m]) where m <= l'), or leave it out where the other "
                "conditions imply it")
    for letter, column in letters:
        if not any(letter in (c.left, c.right) and ({c.left, c.right} - {letter}) & set(summed)
                   for c in st.where):
            raise SymflopsError(
                f"the output letter {letter!r} of {st.lhs.name} is on no operand and bounds no "
                "summed letter", at(column), f"a prefix sum's output letter bounds the letter it "
                f"sums over, e.g. {EXAMPLE}; index {letter!r} on an operand otherwise")
    for x in summed:
        if not any(x in (c.left, c.right) and ({c.left, c.right} - {x}) & output
                   for c in st.where):
            column = ref.index_columns[ref.indices.index(x)]
            raise SymflopsError(
                f"{what} also sums over {x!r}, which no output letter bounds", at(column),
                f"sum over {x!r} in an op of its own first (e.g. 'Z[b,u] = X[b,u,{x}]'), then "
                "take the prefix sum of Z")
    if len(summed) > MAX_SUMMED:
        raise SymflopsError(f"{what} sums over {len(summed)} letters", at(ref.column),
                            f"at most {MAX_SUMMED}: sum some of them in ops of their own first")
    factors = [Factor(ref.name, ref.indices, at(ref.column))]
    factors += [condition_factor(c, scope) for c in st.where]
    check_domain(factors, scope, st.where)
    term_ = Einsum(out, tuple(factors))
    index_dims = tuple((i, scope.extents[i]) for i in term_.indices)
    try:
        prefix_count(term_, dict(index_dims))
    except Uncountable as exc:
        raise SymflopsError(f"{what} cannot be counted: {exc}", at(st.where[0].column),
                            "check the directions of the comparisons, and state the bounds so "
                            "that the count does not depend on how two dims compare (e.g. "
                            "'u <= s, s - u < W'), or split the op") from None
    return PrefixSum(term_, index_dims, scope.text, scope.span)


def fresh_summed(used: set[str], dims: Mapping[str, Any]) -> str:
    """A letter for the summed position of a gate-less recurrence: ``u`` when free."""
    return fresh_letter(used | set(dims), ["u", "v", "w", "r"])
