"""The derivation of a reduction's backward rule by SymPy, shared by every op of
:mod:`symflops.ops.reductions`, and its record :class:`Reduction`.

Softmax, RMSNorm, LayerNorm and cross-entropy are not contractions: each output
element depends on a whole row of the input through a sum over the reduced
index.  Their backward rules are derived here the same way :mod:`symflops.derive.backward`
derives contraction rules, from the op's index expression, with no table of
answers:

(a) *forward*: the output element as a SymPy expression of ``IndexedBase``
    elements, with a ``Sum`` over the reduced index whose upper bound is the
    dimension symbol (``Sum(exp(A[s,u]), (u, 0, T - 1))``);
(b) *derivative*: SymPy differentiates it with respect to a generic input
    element whose index names are primed (``A[s',t']``); the sums that
    differentiation creates hold Kronecker deltas, and SymPy's delta summation
    evaluates them to ``Piecewise((value, 0 <= t' <= T - 1), (0, True))``.
    Indices always lie in their range, so :func:`in_range` keeps the branch
    that holds there;
(c) *substituted*: sub-expressions the forward pass names are replaced by the
    tensors it saves (``exp(A[s,i]) -> P[s,i] Z[s]`` with the normaliser
    ``Z[s]`` cancelling; ``sum_e X[b,e]**2 / D + eps -> r[b]**-2``;
    ``sum_e X[b,e] / D -> mu[b]``; ``X[b,i] - mu[b] -> N[b,i] / r[b]``) and the
    result is expanded into a sum of products;
(d) *scalar*: each product becomes an :class:`~symflops.derive.backward.IndexTerm` of the
    op's share of the loss change, ``sum over the output indices of
    dY[out] * dY[out]/dX[generic]`` (the output indices are its ``summed``);
(e) *contracted*: every delta pairing a summed index with a generic one
    removes that sum;
(f) *rule*: the generic indices get the input's letters back, the remaining
    summed letters get fresh ones (the letters after the reduced one, so
    softmax over ``t`` sums over ``u``), equal products are merged.

Softmax and the norms may reduce over several letters at once
(``layernorm_{c,p}``): each sum then runs over a tuple of letters
(``Sum(X[b,e,q], (e, 0, C - 1), (q, 0, P - 1))``), the statistics divide by the
product of their extents, and everything else is as for one letter.

Only the sums that differentiation creates are evaluated (split by linearity,
delta terms by :func:`sympy.concrete.delta.deltasummation`).  The forward
pass's own sums (normalisers, statistics) stay opaque until step (c) names
them.  A blanket ``.doit()`` would try hypergeometric (Gosper) summation of
every sum of unknown tensor elements: over a second for LayerNorm, and it
leaves sums of additions unsplit.

The op-specific parts (the forward expression and what the saved tensors
replace) are :mod:`symflops.ops.reductions`; the sums' mechanics are
:mod:`symflops.ops.sums`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

import sympy
from sympy.core.function import AppliedUndef

from ..core.records import IndexTerm, Rule, Step
from ..core.ir import Einsum, Factor
from .base import Access, accesses
from .sums import evaluate_created_sums

Stage = tuple[str, "sympy.Expr | tuple[IndexTerm, ...]"]

#: The stage names, in order.  Left-hand sides: ``forward`` is the output
#: element (:attr:`Reduction.output`); ``derivative`` and ``substituted`` are
#: ``d output / d input[generic]``; ``scalar`` and ``contracted`` are the
#: gradient at the generic element (:attr:`Reduction.element`); ``rule`` is
#: :attr:`Reduction.lhs`.
STAGES = ("forward", "derivative", "substituted", "scalar", "contracted", "rule")


@dataclass(frozen=True)
class Reduction:
    """A derived backward rule: ``lhs = sum of terms``.

    ``stages`` keeps every step of the derivation by name (see
    :data:`STAGES`).  ``terms`` use the op's own letters and fresh summed
    letters; ``saved`` lists the forward tensors the rule reads (with their
    indices as used in the rule), ``aux`` those the op must produce besides
    its output, ``definitions`` how each saved or auxiliary tensor is computed
    from the input.  ``index_dims`` gives the extent of every letter the rule
    knows (the reduced index, fresh summed letters, and for the loss the batch
    letters); other letters range as in the op."""

    op: str
    output: Factor
    inp: Factor
    element: Factor
    lhs: Factor
    stages: tuple[Stage, ...]
    terms: tuple[IndexTerm, ...]
    saved: tuple[Factor, ...]
    aux: tuple[Factor, ...]
    definitions: tuple[tuple[Factor, sympy.Expr], ...]
    index_dims: tuple[tuple[str, sympy.Expr], ...]

    def stage(self, name: str) -> sympy.Expr | tuple[IndexTerm, ...]:
        for key, value in self.stages:
            if key == name:
                return value
        raise KeyError(name)

    def einsums(self) -> tuple[Einsum, ...]:
        """The rule as einsums writing ``lhs`` (summed over every letter not
        on it); a letter of ``lhs`` that no operand carries broadcasts."""
        return tuple(Einsum(self.lhs, t.factors, t.coefficient) for t in self.terms)

    @property
    def reads(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(f.tensor for t in self.terms for f in t.factors))

    def statement(self) -> str:
        """E.g. ``dA[s,t] = P[s,t] dP[s,t] - P[s,t] P[s,u] dP[s,u]`` (summing over
        letters not on the left, as in einsum statements)."""
        text = ""
        for k, t in enumerate(self.terms):
            coef = t.coefficient
            sign = "-" if coef.could_extract_minus_sign() else "+"
            coef = -coef if sign == "-" else coef
            body = " ".join(str(f) if f.indices else f.tensor for f in t.factors)
            part = body if coef == 1 else f"{sympy.sstr(coef)} {body}".strip()
            text += (f" {sign} " if k else ("-" if sign == "-" else "")) + part
        return f"{self.lhs} = {text or '0'}"


# ------------------------------------------------------ index terms --

def _index_terms(expr: sympy.Expr, upstream: Factor, summed: tuple[str, ...],
                 onehot: tuple[sympy.IndexedBase, str, int] | None) -> tuple[IndexTerm, ...]:
    """Each additive term of ``expr`` (an expanded product of tensor elements,
    deltas and a coefficient) times the upstream gradient, as an IndexTerm
    summed over ``summed``.  A positive integer power of an element is that
    many factors; a delta against a target element ``y[b]`` is the one-hot
    factor ``onehot[b,v]``."""
    terms = []
    for term in sympy.Add.make_args(expr):
        if term == 0:
            continue
        coefficient, factors, deltas = sympy.Integer(1), [upstream], []
        for part in sympy.Mul.make_args(term):
            base, power = part.as_base_exp()
            if isinstance(base, sympy.Indexed):
                if not (power.is_Integer and power > 0):
                    raise ValueError(f"{part}: only positive integer powers of a tensor element "
                                     "are products of factors")
                factors += [_factor(base)] * int(power)
            elif isinstance(base, sympy.KroneckerDelta) and power.is_Integer and power > 0:
                # A delta is 0 or 1, so any positive power of it is itself.
                a, b = base.args
                if isinstance(a, sympy.Indexed):
                    a, b = b, a
                if isinstance(b, sympy.Indexed):
                    if onehot is None or b.base != onehot[0]:
                        raise ValueError(f"unexpected delta {base}")
                    _, name, k = onehot
                    letters = tuple(str(i) for i in b.indices)
                    factors.append(Factor(name, letters[:k] + (str(a),) + letters[k:]))
                else:
                    deltas.append((str(a), str(b)))
            elif part.has(sympy.Indexed, sympy.Sum, sympy.KroneckerDelta, AppliedUndef):
                raise ValueError(f"{part} is not a product of tensor elements")
            else:
                coefficient *= part
        terms.append(IndexTerm(coefficient, tuple(factors), tuple(deltas), summed))
    return tuple(terms)


def _factor(element: sympy.Indexed) -> Factor:
    if not all(isinstance(i, sympy.Symbol) for i in element.indices):
        raise ValueError(f"{element}: indices must be letters")
    return Factor(str(element.base), tuple(str(i) for i in element.indices))


def _rename(f: Factor, mapping: Mapping[str, str]) -> Factor:
    return Factor(f.tensor, tuple(mapping.get(i, i) for i in f.indices))


def _contract(term: IndexTerm) -> IndexTerm:
    """Remove every delta that pairs a summed index with another index (the
    sum collapses onto the other index); deltas between two free indices
    stay (a diagonal)."""
    factors, deltas, summed = list(term.factors), list(term.deltas), list(term.summed)
    kept = []
    while deltas:
        a, b = deltas.pop(0)
        if a == b:
            continue
        if a not in summed and b not in summed:
            kept.append((a, b))
            continue
        victim, keep = (a, b) if a in summed else (b, a)
        factors = [_rename(f, {victim: keep}) for f in factors]
        deltas = [tuple({victim: keep}.get(x, x) for x in pair) for pair in deltas]
        kept = [tuple({victim: keep}.get(x, x) for x in pair) for pair in kept]
        summed.remove(victim)
    return IndexTerm(term.coefficient, tuple(factors), tuple(kept), tuple(summed))


def fresh_letters(index: str, taken: set[str]) -> list[str]:
    """Candidate names for summed letters: those after ``index`` in the
    alphabet (t -> u, v, ...), then any other free letter."""
    alphabet = "abcdefghijklmnopqrstuvwxyz"
    start = alphabet.index(index) + 1 if len(index) == 1 and index in alphabet else 0
    order = alphabet[start:] + alphabet[:start]
    names = [c for c in order if c not in taken]
    return names + [f"{index}{n}" for n in range(1, 100) if f"{index}{n}" not in taken]


def _finish(terms: tuple[IndexTerm, ...], generic: dict[str, str], index: tuple[str, ...],
            taken: set[str], order: tuple[str, ...]
            ) -> tuple[tuple[IndexTerm, ...], dict[str, str]]:
    """Generic letters back to the input's letters, summed letters fresh
    (each a letter after the reduced letter it sums, t -> u), equal products
    merged, factors and terms in a fixed order.  Also returns the letter each
    fresh letter replaced (for its extent)."""
    merged: dict[tuple, IndexTerm] = {}
    origin: dict[str, str] = {}
    for t in terms:
        if t.deltas:
            raise AssertionError(f"a diagonal delta survived contraction: {t.deltas}")
        mapping = dict(generic)
        used = taken | set(generic.values())
        first_seen = [i for f in t.factors for i in f.indices if i in t.summed]
        for s in dict.fromkeys(first_seen):
            mapping[s] = fresh_letters(s if s in index else index[-1], used)[0]
            used.add(mapping[s])
            origin[mapping[s]] = s
        summed = tuple(mapping[s] for s in dict.fromkeys(first_seen))
        free = set(generic.values())
        # Factors on the output's letters only first, then those inside the sum.
        factors = sorted((_rename(f, mapping) for f in t.factors),
                         key=lambda f: (any(i not in free for i in f.indices),
                                        order.index(f.tensor) if f.tensor in order else len(order),
                                        f.indices))
        key = (tuple(factors), summed)
        previous = merged[key].coefficient if key in merged else 0
        merged[key] = IndexTerm(previous + t.coefficient, tuple(factors), (), summed)
    final = [t for t in merged.values() if sympy.cancel(t.coefficient) != 0]
    final.sort(key=lambda t: (len(t.summed), len(t.factors), t.coefficient.could_extract_minus_sign()))
    return tuple(final), origin


# ------------------------------------------------------- the pipeline --

@dataclass(frozen=True)
class DerivedOp:
    """What the shared derivation needs to know about one op."""

    name: str
    output: Factor
    forward: sympy.Expr
    inp: Factor
    base: sympy.IndexedBase          # the input's, as the forward expression uses it
    index: tuple[str, ...]           # the reduced letters of the input
    extents: tuple[tuple[str, sympy.Expr], ...]   # known extents, input letters
    substitute: Callable[[sympy.Expr], sympy.Expr]
    saved: tuple[Factor, ...]
    aux: tuple[Factor, ...]
    definitions: tuple[tuple[Factor, sympy.Expr], ...]
    dims: frozenset[sympy.Symbol]    # symbols a coefficient may contain
    onehot: tuple[sympy.IndexedBase, str, int] | None = None


def derive_reduction(op: DerivedOp) -> Reduction:
    generic = {f"{i}'": i for i in op.inp.indices}
    # The base must be the forward expression's own (assumptions included),
    # or SymPy sees an unrelated symbol and the derivative is 0.
    element = op.base[tuple(index_symbol(g) for g in generic)]
    extents = dict(op.extents)
    ranges = {index_symbol(f"{i}'"): ext for i, ext in extents.items()}

    # (b) SymPy differentiates; the sums it creates are evaluated.
    derivative = evaluate_created_sums(op.forward.diff(element),
                                        set(op.forward.atoms(sympy.Sum)), ranges)
    # (c) Saved tensors in place of what the forward pass computed from the input.
    substituted = sympy.expand(op.substitute(derivative))
    allowed = {f.tensor for f in op.saved} | ({str(op.onehot[0])} if op.onehot else set())
    stray = {str(e.base) for e in substituted.atoms(sympy.Indexed)} - allowed
    if substituted.has(sympy.Sum) or stray:
        raise AssertionError(f"{op.name}: substitution left {stray or 'a sum'} in {substituted}")
    # (d) The op's share of dL, differentiated: sum over the output indices.
    upstream = Factor("d" + op.output.tensor, op.output.indices)
    scalar = _index_terms(substituted, upstream, op.output.indices, op.onehot)
    for t in scalar:
        if not t.coefficient.free_symbols <= op.dims:
            raise AssertionError(f"{op.name}: coefficient {t.coefficient} is not in the dims")
    # (e) Contract, (f) rename.
    contracted = tuple(_contract(t) for t in scalar)
    taken = set(op.inp.indices) | set(op.output.indices) | set(generic)
    taken |= {i for f in op.saved for i in f.indices}
    order = (*(f.tensor for f in op.saved), upstream.tensor)
    final, origin = _finish(contracted, generic, op.index, taken, order)
    lhs = Factor("d" + op.inp.tensor, op.inp.indices)
    # A fresh letter ranges like the output letter whose sum it carries.
    output_extents = {**extents, **{o: extents[i] for o, i in zip(op.output.indices, op.inp.indices)
                                    if i in extents}}
    extents.update((new, output_extents[old]) for new, old in origin.items() if old in output_extents)
    for t in final:
        assert set(t.summed).isdisjoint(lhs.indices)
        assert {i for f in t.factors for i in f.indices} <= set(lhs.indices) | set(t.summed)
    stages = (
        ("forward", op.forward),
        ("derivative", derivative),
        ("substituted", substituted),
        ("scalar", scalar),
        ("contracted", contracted),
        ("rule", final),
    )
    return Reduction(op.name, op.output, op.inp, Factor(lhs.tensor, tuple(generic)), lhs,
                     stages, final, op.saved, op.aux, op.definitions,
                     tuple(sorted(extents.items())))


def index_symbol(letter: str) -> sympy.Symbol:
    return sympy.Symbol(letter, integer=True)


# ------------------------------------------- what such ops share --

class ReductionOp:
    """The members shared by the op kinds whose backward rule is a
    :class:`Reduction` (softmax and the norms, log-sum-exp, cross-entropy).

    A kind is a frozen dataclass with the fields ``out`` (its output with its
    letters) and ``index_dims``, and a method ``reduction()`` giving the
    derivation in its own names; it inherits the rest of these members."""

    terms = ()  # not a sum of einsums

    @property
    def output(self) -> str:
        return self.out.tensor  # type: ignore[attr-defined]

    def dims(self) -> dict[str, sympy.Expr]:
        return dict(self.index_dims)  # type: ignore[attr-defined]

    def formula(self) -> sympy.Expr:
        """The output element as SymPy derives it (the forward stage)."""
        return self.reduction().stage("forward")  # type: ignore[attr-defined]

    def patterns(self) -> tuple[()]:
        """No einsum patterns: its derivation is :meth:`shown`."""
        return ()

    def shown(self) -> Reduction:
        """The derivation as the sheet shows it."""
        return self.reduction()  # type: ignore[attr-defined]

    #: the row statistics its formula sums over the reduced letter (softmax's
    #: sum of exponentials; a layernorm has two), summed across devices when
    #: that letter is split (:mod:`symflops.ops.split`)
    statistics = 1

    def split(self, layout: Any, widths: Mapping[str, Any], unit: str = "FLOPs",
              order: str = "written") -> Any:
        """Its work on each device's slice, and an AllReduce of its row
        statistics over each axis a reduced letter is split over."""
        from .split import rowwise

        inp = getattr(self, "logits", None) or self.inp  # type: ignore[attr-defined]
        index = self.index  # type: ignore[attr-defined]
        reduced = (index,) if isinstance(index, str) else tuple(index)
        out = self.out.indices  # type: ignore[attr-defined]
        keeps = all(x in out for x in reduced)
        return rowwise(self, inp, reduced, self.statistics, layout, widths, unit,
                       output_reduced=bool(out) and not keeps)

    def moved(self, rule: Rule | None = None) -> Access:
        """Its input read row by row, its output and ``aux`` written; a rule
        reads what its terms name (the saved output, ``rstd``, ``dY``)."""
        return accesses(self, rule)  # type: ignore[arg-type]


def reduction_rule(red: Reduction, wrt: str, number: int, einsums: tuple[Einsum, ...],
                   dims: Mapping[str, sympy.Expr],
                   shown: Callable[[tuple[IndexTerm, ...]], tuple[IndexTerm, ...]] = lambda t: t
                   ) -> Rule:
    """The rule a :class:`Reduction` gives for ``wrt`` (op ``number``), written
    as ``einsums``, with the derivation's stages as its steps: index-term
    stages carry their terms (as ``shown`` writes them), the others their
    SymPy expression.  ``dims`` are the op's letters' extents."""
    extents = {**dims, **dict(red.index_dims)}
    steps = []
    for name, value in red.stages:
        if isinstance(value, tuple):
            lhs = red.lhs if name in ("scalar", "contracted", "rule") else red.output
            steps.append(Step(name, lhs, shown(value), name))
        else:
            steps.append(Step(name, red.output, (), name, value))
    letters = sorted({i for e in einsums for i in e.indices})
    return Rule(wrt, number, einsums, tuple((i, extents[i]) for i in letters), tuple(steps),
                matmul=False)
