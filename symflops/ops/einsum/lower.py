"""A statement as an einsum: ``H[b,f] = X[b,d] W[d,f] + c[f]``.

A statement is an einsum when no call kind claims its whole right side (see
:mod:`symflops.ops.registry`).  Each term becomes an :class:`~symflops.core.ir.Einsum`
with its constant coefficient; a pointwise function becomes a factor's ``fn``;
``dropout(A[..], p)`` becomes ``A[..] mask[..] / (1 - p)`` with a keep-mask
tensor the layer gains; a call of another kind inside a product
(``layernorm_d(X[b,d]) * g[d]``) becomes an op of its own, computing a fresh
tensor (``N_hat``) that the product reads; a lookup ``E[tok[b], d]`` becomes a
selection factor ``[v = tok[b]]``, a shift ``X[b,c,p+k]`` a factor ``[q = p + k]``;
a where-clause restricts every term that carries both of its letters.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import sympy

from ...core.errors import SymflopsError, closest
from ...core.ir import SELECT, SHIFT, Affine, Apply, Einsum, Factor, Tensor
from ...lang.expr import parse_expression
from ...lang.statement import AffineTerm, Call, Constant, Ref, Shift, Statement, Term
from ..base import CallKind, Lowered, Op, Scope, claim, usages
from ..conditions import check_domain, condition_factor
from ..functions import FUNCTIONS
from ..functions import known as known_functions
from ..prefix_statement import is_prefix, lower_prefix
from ..recurrence_statement import lower_recurrence
from .node import Contraction

#: The drop probability of ``dropout(A[..])`` written without one.
DROPOUT_DEFAULT = sympy.Rational(1, 10)


def lower(st: Statement, out: Factor, scope: Scope, calls: Sequence[CallKind]) -> Lowered:
    """The statement as ops: those its calls need first, then the contraction;
    with the tensors the lowering made (dropout masks, normalised intermediates).
    A statement that reads its own output is a recurrence (:mod:`..recurrence`);
    one whose output letter no operand carries is a prefix sum (:mod:`..prefix`)."""
    if any(ref.name == out.tensor for ref in st.refs):
        return Lowered((lower_recurrence(st, out, scope),))
    if is_prefix(st):  # an output letter on no operand, bounded by the where-clause
        return Lowered((lower_prefix(st, out, scope),))
    made: dict[str, Tensor] = {}
    first: list[Op] = []
    terms = []
    written = _lookups(st.lhs, scope)  # an affine output index: its brackets, on every term
    for term in st.terms:
        coefficient, factors = _term(term, out.tensor, scope, calls, made, first)
        _writes(term, factors, written, st, scope)
        factors += written
        carried = {i for f in (out, *factors) for i in f.indices}
        factors += [condition_factor(c, scope) for c in st.where
                    if c.left in carried and c.right in carried]
        terms.append(Einsum(out, tuple(factors), coefficient))
        check_domain(factors, scope, st.where)
    for c in st.where:
        if not any(f.indices == (c.left, c.right) and f.relation == c.op
                   for t in terms for f in t.operands if f.is_comparison):
            raise SymflopsError(f"no term of the op carries both {c.left!r} and {c.right!r}",
                                scope.at(c.column), "a condition restricts terms that sum or "
                                "write both letters; remove it or put it on another op")
    letters = dict.fromkeys(i for t in terms for i in t.indices)
    index_dims = tuple((letter, scope.extents[letter]) for letter in letters)
    op = Contraction(tuple(terms), index_dims, scope.text, scope.span)
    return Lowered((*first, op), tuple(made.values()))


def _writes(term: Term, factors: Sequence[Factor], written: Sequence[Factor], st: Statement,
            scope: Scope) -> None:
    """A term of an op with an affine output index carries every letter of
    that index (else the term would be added once per value of the missing
    letter, or read where no operand is)."""
    carried = {i for f in factors for i in f.indices}
    for f in written:
        missing = [i for i in f.indices[1:] if i not in carried]
        if missing:
            index = (f"{f.tensor}[{','.join(f.indices[1:])}]" if f.is_select
                     else f.affine.text(f.indices[1:]))
            what = "a lookup (a scatter)" if f.is_select else "an affine"
            raise SymflopsError(
                f"this term does not carry {missing[0]!r} of the output index {index}",
                scope.at(term.column),
                f"every term of an op with {what} output index reads all of its letters; "
                f"write the other terms as an op of their own, e.g. Z = {st.lhs.name} + ...")


def _coefficient(term: Term, scope: Scope) -> sympy.Expr:
    """The term's constant factor: its sign times every constant, read by the
    whitelisting expression parser."""
    value: sympy.Expr = sympy.Integer(-1 if term.negative else 1)
    for f in term.factors:
        if isinstance(f, Constant):
            c = parse_expression(f.text, dict(scope.dims), span=scope.at(f.column))
            value = value / c if f.divide else value * c
    return value


def _term(term: Term, out: str, scope: Scope, calls: Sequence[CallKind], made: dict[str, Tensor],
          first: list[Op]) -> tuple[sympy.Expr, list[Factor]]:
    """A parsed term as (coefficient, factors); the ops its calls need go to
    ``first``, the tensors it makes to ``made``."""
    at, known = scope.at, scope.known
    coefficient = _coefficient(term, scope)
    factors: list[Factor] = []
    for f in term.factors:
        if isinstance(f, Ref):
            factors += _lookups(f, scope) + [Factor(f.name, f.indices, at(f.column))]
        elif isinstance(f, Call):
            ref = Factor(f.ref.name, f.ref.indices, at(f.ref.column))
            kind = claim(calls, f.name)
            if (f.ref.gathers or f.ref.shifts) and (f.name == "dropout" or kind is not None):
                raise SymflopsError(f"a lookup or shift inside {f.name}(...)", at(f.column),
                                    "write the lookup as an op of its own, e.g. "
                                    "'X[b,d] = E[tok[b], d]', and apply the call to X")
            if kind is not None:
                # The call's result before gain and bias, printed with a hat.
                name = f"{out}_hat"
                k = 2
                while name in known or name in made:
                    name, k = f"{out}_hat{k}", k + 1
                temp = Factor(name, f.ref.indices, at(f.column))
                first.append(kind.inline(f, temp, scope))
                made[name] = Tensor(name, known[f.ref.name].shape, "activation", False, "",
                                    at(f.column))
                factors.append(temp)
                continue
            factors += _lookups(f.ref, scope)
            if f.name in FUNCTIONS:
                if f.argument is not None:
                    raise SymflopsError(f"{f.name} takes one tensor", at(f.argument.column),
                                        f"write {f.name}({f.ref.name}[...])")
                factors.append(Factor(ref.tensor, ref.indices, ref.span, Apply(f.name)))
            elif f.name == "dropout":
                mask, p = _dropout(f, ref, out, scope, made)
                factors += [ref, Factor(mask, ref.indices, at(f.column))]
                coefficient = coefficient / (1 - p)
            else:
                raise SymflopsError(f"unknown function {f.name!r}", at(f.column),
                                    f"the pointwise functions are {known_functions()}; also "
                                    f"dropout(A[..], p), and {usages(calls)}")
    return coefficient, factors


def _dropout(f: Call, ref: Factor, out: str, scope: Scope, made: dict[str, Tensor]
             ) -> tuple[str, sympy.Expr]:
    """The keep-mask of ``dropout(A[..], p)`` (added to ``made``) and ``p``."""
    at, known = scope.at, scope.known
    if isinstance(f.argument, Ref):
        raise SymflopsError("dropout's second argument is the drop probability",
                            at(f.argument.column), "e.g. dropout(A[b,d], 0.1)")
    p = DROPOUT_DEFAULT
    if f.argument is not None:
        p = parse_expression(f.argument.text, dict(scope.dims), span=at(f.argument.column))
    if not (p.is_number and 0 <= p < 1):
        raise SymflopsError(f"dropout probability must be in [0, 1), got {p}",
                            at(f.argument.column if f.argument else f.column),
                            "give the drop probability, e.g. dropout(A[b,d], 0.1)")
    mask = f"mask_{out}" + (f"_{len(made)}" if f"mask_{out}" in made else "")
    if mask in known:
        raise SymflopsError(f"the dropout mask name {mask!r} is taken",
                            at(f.column), f"rename the tensor {mask!r}")
    if ref.tensor not in known:
        raise SymflopsError(f"unknown tensor {ref.tensor!r}", ref.span,
                            f"declare it under 'tensors:' or produce it with an op; "
                            f"{closest(ref.tensor, sorted(known))}")
    made[mask] = Tensor(mask, known[ref.tensor].shape, "mask", False,
                        f"dropout keep-mask of {out} (drop probability {p})", at(f.column))
    return mask, p


def _lookups(ref: Ref, scope: Scope) -> list[Factor]:
    """The selections ``[v = tok[b]]`` of a lookup ``E[tok[b], d]`` (whose
    looked-up position already holds its fresh letter ``v``), and the
    brackets ``[q = p + k]``, ``[q = 2 p + k]`` of affine indices ``X[b,c,p+k]``,
    ``X[b,c,2*p+k]``."""
    return ([Factor(g.ref.name, (ref.indices[g.position], *g.ref.indices), scope.at(g.ref.column),
                    SELECT) for g in ref.gathers]
            + [Factor("", (ref.indices[s.position], *s.letters), scope.at(s.column),
                      SHIFT if s.is_plain else affine(s, scope.dims)) for s in ref.shifts])


def affine(s: Shift, dims: Mapping[str, sympy.Symbol]) -> Affine:
    """The relation of an affine index, its named coefficients read as dims
    (:func:`symflops.declaration.letters.bind_letters` has checked they are),
    and its constant the whole number plus its dim terms (``-R`` in ``i+u-R``)."""
    def signed(t: AffineTerm) -> sympy.Expr:
        return (-1 if t.negative else 1) * (dims[t.coefficient] if isinstance(
            t.coefficient, str) else sympy.Integer(t.coefficient))

    coefficients = tuple(signed(t) for t in s.terms)
    constant = sympy.Integer(s.constant) + sum((signed(t) * dims[t.letter] for t in s.named),
                                               sympy.Integer(0))
    return Affine(coefficients, sympy.expand(constant))
