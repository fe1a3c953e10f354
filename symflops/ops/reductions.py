"""Backward rules of reductions over named indices, derived by SymPy.

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

Conventions (which tensors each rule reads, and why):

* **softmax** saves its output ``P``: the rule is
  ``dA[s,t] = P[s,t] dP[s,t] - P[s,t] P[s,u] dP[s,u]``; no auxiliary tensor.
* **rmsnorm** saves the input ``X`` and the per-row reciprocal RMS
  ``r[b] = (sum_e X[b,e]**2 / D + eps)**(-1/2)`` (``rstd``), as fused kernels
  (Apex, Triton) do; ``r[b]**3`` appears as three factors ``r[b]``.
  ``saves="output"`` gives the rule in the output ``R`` and ``r`` instead.
* **layernorm** saves the output ``N`` and ``r[b]`` (the memory-efficient
  convention; the rule is then the textbook
  ``r (dN - mean(dN) - N mean(dN N))``).  ``saves="input"`` gives the rule
  in ``X``, the mean ``mu[b]`` and ``r[b]``, what fused kernels save by
  default.
* **cross-entropy** with integer targets ``y`` saves the probabilities
  ``P = softmax(Z)`` (auxiliary: the forward pass must produce them) and reads
  the one-hot of the targets, a factor ``onehot_y[b,v]`` equal to
  ``KroneckerDelta(y[b], v)``: SymPy's derivative of ``Z[b, y[b]]`` is that
  delta, read off as an indexed factor with the logits' layout.

``eps`` never appears in a rule: it only enters through ``r``.  Every
coefficient is a rational function of dimension symbols (``-1/D``, ``1/B``).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Callable, Mapping

import sympy
from sympy.concrete.delta import deltasummation
from sympy.core.function import AppliedUndef

from ..core.records import IndexTerm
from ..core.ir import Einsum, Factor, dim_symbol

Stage = tuple[str, "sympy.Expr | tuple[IndexTerm, ...]"]

#: The stage names, in order.  Left-hand sides: ``forward`` is the output
#: element (:attr:`Reduction.output`); ``derivative`` and ``substituted`` are
#: ``d output / d input[generic]``; ``scalar`` and ``contracted`` are the
#: gradient at the generic element (:attr:`Reduction.element`); ``rule`` is
#: :attr:`Reduction.lhs`.
STAGES = ("forward", "derivative", "substituted", "scalar", "contracted", "rule")

#: Default epsilon of the normalisations.
EPS = sympy.Symbol("epsilon", positive=True)


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


# -------------------------------------------------- Piecewise clean-up --

def _relation_truth(rel: sympy.core.relational.Relational,
                    extents: Mapping[sympy.Symbol, sympy.Expr]) -> bool | None:
    """Whether an inequality holds for every (True), no (False) or some (None)
    value of its index in ``0 .. extent - 1``."""
    if not isinstance(rel, (sympy.Ge, sympy.Gt, sympy.Le, sympy.Lt)):
        return None
    gap = sympy.expand(rel.gts - rel.lts)  # the relation says gap >= 0 (or > 0)
    strict = isinstance(rel, (sympy.Gt, sympy.Lt))
    indices = [s for s in gap.free_symbols if s in extents]
    # Other symbols must be dimensions (positive); an index of unknown range
    # or two indices in one relation leave the answer open.
    if len(indices) > 1 or not all(s in extents or s.is_positive for s in gap.free_symbols):
        return None
    worst = best = gap
    if indices:
        i = indices[0]
        slope = gap.diff(i)
        if not slope.is_number or slope == 0 or gap.diff(i, 2) != 0:
            return None
        low, high = sympy.Integer(0), extents[i] - 1
        worst = gap.subs(i, low if slope > 0 else high)
        best = gap.subs(i, high if slope > 0 else low)
    if (worst.is_positive if strict else worst.is_nonnegative):
        return True
    if (best.is_nonpositive if strict else best.is_negative):
        return False
    return None


def _truth(cond: sympy.Basic, extents: Mapping[sympy.Symbol, sympy.Expr]) -> bool | None:
    """Whether ``cond`` holds whenever every index lies in its range: True,
    False, or None when that depends on the values."""
    if cond is sympy.true:
        return True
    if cond is sympy.false:
        return False
    if isinstance(cond, sympy.Not):
        inner = _truth(cond.args[0], extents)
        return None if inner is None else not inner
    if isinstance(cond, (sympy.And, sympy.Or)):
        parts = [_truth(c, extents) for c in cond.args]
        decided, wanted = (False, True) if isinstance(cond, sympy.And) else (True, False)
        if decided in parts:   # one False decides an And, one True an Or
            return decided
        return wanted if all(p is wanted for p in parts) else None
    if isinstance(cond, sympy.core.relational.Relational):
        return _relation_truth(cond, extents)
    return None


def in_range(expr: sympy.Expr, extents: Mapping[sympy.Symbol, sympy.Expr]) -> sympy.Expr:
    """Replace every ``Piecewise`` in ``expr`` by its branch that holds when
    each index ``i`` in ``extents`` lies in ``0 .. extents[i] - 1``.

    Delta summation guards its answer with the range of the summed index
    (``Piecewise((x, (0 <= t') & (t' <= T - 1)), (0, True))``); the indices of
    a tensor element are in range by construction.  Branches are tried in
    order; one whose condition is false in range is skipped; a condition that
    depends on the values (or names an index of unknown range) is an error
    rather than a guess."""

    def pick(pw: sympy.Piecewise) -> sympy.Expr:
        for value, cond in pw.args:
            truth = _truth(cond, extents)
            if truth is True:
                return value
            if truth is None:
                raise ValueError(f"cannot decide {cond} for indices in range")
        raise ValueError(f"no branch of {pw} holds for indices in range")

    return expr.replace(lambda e: isinstance(e, sympy.Piecewise), pick)


# --------------------------------------------------- evaluating sums --

def _evaluate_created_sums(expr: sympy.Expr, opaque: set[sympy.Sum],
                           extents: Mapping[sympy.Symbol, sympy.Expr]) -> sympy.Expr:
    """Evaluate the sums that differentiation created, leaving the forward
    pass's own sums (``opaque``) untouched: by linearity, a summand free of
    the summed index is multiplied by the count, one with a delta in it goes
    to SymPy's delta summation (then :func:`in_range`), any other is kept as a
    sum with its constant factors pulled out."""
    # Opaque sums become placeholders -- undefined functions of the sum's free
    # symbols, so that dependence on a summed index stays visible and delta
    # summation can substitute into it -- and expanding a summand never opens them.
    holders: dict[sympy.Sum, tuple[sympy.Expr, tuple[sympy.Symbol, ...]]] = {}
    for k, s in enumerate(sorted(opaque, key=sympy.default_sort_key)):
        args = tuple(sorted(s.free_symbols, key=str))
        holders[s] = (sympy.Function(f"_opaque{k}")(*args), args)
    restore = {h.func: (s, args) for s, (h, args) in holders.items()}

    def reopen(e: sympy.Expr) -> sympy.Expr:
        s, args = restore[e.func]
        return s.xreplace(dict(zip(args, e.args)))

    def evaluate(s: sympy.Sum) -> sympy.Expr:
        body = s.function.xreplace({o: h for o, (h, _) in holders.items()})
        for limit in s.limits:  # innermost first
            j, low, high = limit
            total = sympy.Integer(0)
            for term in sympy.Add.make_args(sympy.expand(body)):
                const, dep = term.as_independent(j, as_Add=False)
                if dep == 1:
                    total += term * (high - low + 1)
                elif dep.has(sympy.KroneckerDelta):
                    total += const * in_range(deltasummation(dep, limit), extents)
                else:
                    total += const * sympy.Sum(dep, limit)
            body = total
        # A summand kept over several letters is one sum over all of them.
        body = body.replace(lambda e: isinstance(e, sympy.Sum) and isinstance(e.function, sympy.Sum),
                            lambda e: sympy.Sum(e.function.function, *e.function.limits, *e.limits))
        return body.replace(lambda e: getattr(e, "func", None) in restore, reopen)

    return expr.replace(lambda e: isinstance(e, sympy.Sum) and e not in opaque, evaluate)


# ------------------------------------------------------- substitution --

Positions = tuple[int, ...]  # where the reduced letters stand among an element's indices
Letters = tuple[sympy.Symbol, ...]


def _full_sum(e: sympy.Basic, dims: tuple[sympy.Expr, ...]) -> tuple[Letters, sympy.Expr] | None:
    """``((j, ...), f)`` when ``e`` is ``Sum(f, (j, 0, dims[0] - 1), ...)``, one
    limit per reduced letter, in order."""
    if isinstance(e, sympy.Sum) and len(e.limits) == len(dims):
        if all(low == 0 and high == dim - 1 for (_, low, high), dim in zip(e.limits, dims)):
            return tuple(j for j, _, _ in e.limits), e.function
    return None


def _row(element: sympy.Expr, base: sympy.IndexedBase, ks: Positions,
         js: Letters | None = None) -> tuple[sympy.Expr, ...] | None:
    """The indices other than those at positions ``ks`` of ``element`` when it
    is an element of ``base`` (whose indices there are ``js``, when given, and
    no other index holds one of them)."""
    if not (isinstance(element, sympy.Indexed) and element.base == base):
        return None
    idx = element.indices
    rest = tuple(i for n, i in enumerate(idx) if n not in ks)
    if js is not None and (tuple(idx[k] for k in ks) != js
                           or any(i.has(j) for i in rest for j in js)):
        return None
    return rest


def _replace_row_sums(expr: sympy.Expr, dims: tuple[sympy.Expr, ...],
                      summand: Callable[[Letters, sympy.Expr], tuple[sympy.Expr, ...] | None],
                      value: Callable[[tuple[sympy.Expr, ...]], sympy.Expr]) -> sympy.Expr:
    """Replace each ``Sum(f, (j, 0, dims[0] - 1), ...)`` whose summand ``f`` is
    recognised by ``summand`` (which returns the row's other indices) by
    ``value(row)``; any names of the summed letters match."""

    def row_of(e: sympy.Basic) -> tuple[sympy.Expr, ...] | None:
        found = _full_sum(e, dims)
        return summand(*found) if found else None

    return expr.replace(lambda e: row_of(e) is not None, lambda e: value(row_of(e)))


def _elements(base: sympy.IndexedBase, ks: Positions) -> Callable[[Letters, sympy.Expr], tuple | None]:
    """Recognise summands ``base[..., j, ...]`` (the ``js`` at positions ``ks``)."""
    return lambda js, f: _row(f, base, ks, js)


def _exp_elements(base: sympy.IndexedBase, ks: Positions) -> Callable[[Letters, sympy.Expr], tuple | None]:
    """Recognise summands ``exp(base[..., j, ...])``."""
    return lambda js, f: _row(f.args[0], base, ks, js) if isinstance(f, sympy.exp) else None


def _substitute_softmax(expr: sympy.Expr, logits: sympy.IndexedBase, probs: sympy.IndexedBase,
                        ks: Positions, dims: tuple[sympy.Expr, ...],
                        norm: sympy.IndexedBase) -> sympy.Expr:
    """``sum_u exp(A[..u..]) -> Z[..]`` and ``exp(A[..i..]) -> P[..i..] Z[..]``:
    the normaliser ``Z`` then cancels by itself."""
    expr = _replace_row_sums(expr, dims, _exp_elements(logits, ks), lambda row: norm[row])

    def is_exp(e: sympy.Basic) -> bool:
        return isinstance(e, sympy.exp) and _row(e.args[0], logits, ks) is not None

    def to_probs(e: sympy.exp) -> sympy.Expr:
        element = e.args[0]
        return probs[element.indices] * norm[_row(element, logits, ks)]

    return expr.replace(is_exp, to_probs)


def _substitute_centred(expr: sympy.Expr, x: sympy.IndexedBase, ks: Positions, shift: Callable,
                        scale: sympy.IndexedBase, out: sympy.IndexedBase) -> sympy.Expr:
    """``x[..i..] -> out[..i..] / scale[..] + shift(..)``: the input in terms
    of the normalised output."""
    def is_x(e: sympy.Basic) -> bool:
        return _row(e, x, ks) is not None

    def from_out(e: sympy.Indexed) -> sympy.Expr:
        row = _row(e, x, ks)
        return out[e.indices] / scale[row] + shift(row)

    return expr.replace(is_x, from_out)


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


def _fresh_letters(index: str, taken: set[str]) -> list[str]:
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
            mapping[s] = _fresh_letters(s if s in index else index[-1], used)[0]
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
class _Op:
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


def _derive(op: _Op) -> Reduction:
    generic = {f"{i}'": i for i in op.inp.indices}
    # The base must be the forward expression's own (assumptions included),
    # or SymPy sees an unrelated symbol and the derivative is 0.
    element = op.base[tuple(_sym(g) for g in generic)]
    extents = dict(op.extents)
    ranges = {_sym(f"{i}'"): ext for i, ext in extents.items()}

    # (b) SymPy differentiates; the sums it creates are evaluated.
    derivative = _evaluate_created_sums(op.forward.diff(element),
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


# ------------------------------------------------------- public API --

def _sym(letter: str) -> sympy.Symbol:
    return sympy.Symbol(letter, integer=True)


def _check(indices: tuple[str, ...], index: tuple[str, ...], names: tuple[str, ...]) -> Positions:
    """Validate the arguments; return the positions of the reduced indices."""
    if len(set(indices)) != len(indices) or any(not i or "'" in i for i in indices):
        raise ValueError(f"index letters must be distinct plain names: {indices}")
    if not index or len(set(index)) != len(index):
        raise ValueError(f"the reduced indices must be distinct and at least one: {index}")
    for i in index:
        if i not in indices:
            raise ValueError(f"reduced index {i!r} is not among {indices}")
    grads = tuple("d" + n for n in names)
    if len(set(names + grads)) != 2 * len(names):
        raise ValueError(f"tensor names must be distinct (and not each other's gradients): {names}")
    return tuple(indices.index(i) for i in index)


def _dim(dim: sympy.Expr | None, index: str) -> sympy.Expr:
    return dim_symbol(index.upper()) if dim is None else dim


def _reduced(index: str | tuple[str, ...], dim: sympy.Expr | tuple[sympy.Expr, ...] | None
             ) -> tuple[tuple[str, ...], tuple[sympy.Expr, ...]]:
    """The reduced letters and their extents as tuples: one letter may be
    given alone (``"t"``, ``T``); an extent left out is the upper-cased letter."""
    letters = (index,) if isinstance(index, str) else tuple(index)
    if dim is None or isinstance(dim, tuple):
        dims = dim or (None,) * len(letters)
    else:
        dims = (dim,)
    if len(dims) != len(letters):
        raise ValueError(f"{len(letters)} reduced indices {letters} but {len(dims)} dims")
    return letters, tuple(_dim(d, i) for i, d in zip(letters, dims))


def _fresh_for(index: tuple[str, ...], taken: set[str]) -> Letters:
    """A fresh summed letter for each reduced letter (the first free one after
    it: t -> u), each added to ``taken``."""
    out = []
    for i in index:
        out.append(_fresh_letters(i, taken)[0])
        taken.add(out[-1])
    return tuple(_sym(f) for f in out)


def _at(idx: tuple[sympy.Expr, ...], ks: Positions, js: tuple[sympy.Expr, ...]) -> tuple[sympy.Expr, ...]:
    """``idx`` with ``js`` in place of the letters at positions ``ks``."""
    out = list(idx)
    for k, j in zip(ks, js):
        out[k] = j
    return tuple(out)


def _unused(preferred: str, taken: tuple[str, ...]) -> str:
    name = preferred
    while name in taken:
        name += "_"
    return name


@functools.lru_cache(maxsize=None)
def softmax_rule(out: str = "P", inp: str = "A", out_indices: tuple[str, ...] = ("s", "t"),
                 index: str | tuple[str, ...] = "t",
                 dim: sympy.Expr | tuple[sympy.Expr, ...] | None = None) -> Reduction:
    """``out[..t..] = exp(inp[..t..]) / sum_u exp(inp[..u..])`` over ``index``
    (extent ``dim``, default the upper-cased letter), or jointly over a tuple
    of letters (and extents).  Saves ``out``."""
    index, dims = _reduced(index, dim)
    ks = _check(out_indices, index, (out, inp))
    A, P = sympy.IndexedBase(inp, real=True), sympy.IndexedBase(out, positive=True)
    norm = sympy.IndexedBase(_unused("Z", (out, inp)), positive=True)
    idx = tuple(_sym(i) for i in out_indices)
    us = _fresh_for(index, set(out_indices))
    forward = sympy.exp(A[idx]) / sympy.Sum(sympy.exp(A[_at(idx, ks, us)]),
                                            *((u, 0, d - 1) for u, d in zip(us, dims)))
    op = _Op(
        name="softmax", output=Factor(out, out_indices), forward=forward,
        inp=Factor(inp, out_indices), base=A, index=index, extents=tuple(zip(index, dims)),
        substitute=lambda e: _substitute_softmax(e, A, P, ks, dims, norm),
        saved=(Factor(out, out_indices),), aux=(),
        definitions=((Factor(out, out_indices), forward),),
        dims=frozenset().union(*(d.free_symbols for d in dims)),
    )
    return _derive(op)


def _stats(x: sympy.IndexedBase, idx: tuple[sympy.Symbol, ...], ks: Positions,
           index: tuple[str, ...], dims: tuple[sympy.Expr, ...], eps: sympy.Expr,
           centred: bool) -> tuple[sympy.Expr, sympy.Expr]:
    """The row mean (or 0) and the reciprocal root of the row's mean square
    (centred on the mean when ``centred``), over fresh summed letters; a row
    is every element with the other letters fixed, ``prod(dims)`` of them."""
    taken = {str(i) for i in idx}
    es, fs = _fresh_for(index, taken), _fresh_for(index, taken)
    size = sympy.Mul(*dims)

    def over(body: sympy.Expr, js: Letters) -> sympy.Sum:
        return sympy.Sum(body, *((j, 0, d - 1) for j, d in zip(js, dims)))

    mean = over(x[_at(idx, ks, fs)], fs) / size if centred else sympy.Integer(0)
    variance = over((x[_at(idx, ks, es)] - mean) ** 2, es) / size
    return mean, (variance + eps) ** sympy.Rational(-1, 2)


@functools.lru_cache(maxsize=None)
def rmsnorm_rule(out: str = "R", inp: str = "X", out_indices: tuple[str, ...] = ("b", "d"),
                 index: str | tuple[str, ...] = "d",
                 dim: sympy.Expr | tuple[sympy.Expr, ...] | None = None, eps: sympy.Expr = EPS,
                 rstd: str = "r", saves: str = "input") -> Reduction:
    """``out[..d..] = inp[..d..] r[..]`` with ``r[..] = (sum_e inp[..e..]**2 / D
    + eps)**(-1/2)``, over ``index`` (or jointly over a tuple of letters, ``D``
    the product of their extents).  Saves ``inp`` and the auxiliary ``rstd``
    (``saves="input"``, the fused-kernel convention) or ``out`` and ``rstd``
    (``saves="output"``)."""
    index, dims = _reduced(index, dim)
    ks = _check(out_indices, index, (out, inp, rstd))
    if saves not in ("input", "output"):
        raise ValueError(f"saves must be 'input' or 'output', not {saves!r}")
    size = sympy.Mul(*dims)
    X, R = sympy.IndexedBase(inp, real=True), sympy.IndexedBase(out, real=True)
    r = sympy.IndexedBase(rstd, positive=True)
    idx = tuple(_sym(i) for i in out_indices)
    _, rstd_expr = _stats(X, idx, ks, index, dims, eps, False)
    forward = X[idx] * rstd_expr
    aux = Factor(rstd, tuple(i for i in out_indices if i not in index))
    kept = Factor(inp if saves == "input" else out, out_indices)

    def substitute(expr: sympy.Expr) -> sympy.Expr:
        # sum_e X[..e..]**2 = D (r**-2 - eps), so the mean square plus eps is r**-2.
        squares = lambda js, f: _row(f.base, X, ks, js) if f.is_Pow and f.exp == 2 else None
        expr = _replace_row_sums(expr, dims, squares, lambda rw: size * (r[rw] ** -2 - eps))
        if saves == "output":
            expr = _substitute_centred(expr, X, ks, lambda rw: 0, r, R)
        return expr

    op = _Op(
        name="rmsnorm", output=Factor(out, out_indices), forward=forward,
        inp=Factor(inp, out_indices), base=X, index=index, extents=tuple(zip(index, dims)),
        substitute=substitute, saved=(kept, aux), aux=(aux,),
        definitions=((Factor(out, out_indices), forward), (aux, rstd_expr)),
        dims=frozenset().union(*(d.free_symbols for d in dims)),
    )
    return _derive(op)


@functools.lru_cache(maxsize=None)
def layernorm_rule(out: str = "N", inp: str = "X", out_indices: tuple[str, ...] = ("b", "d"),
                   index: str | tuple[str, ...] = "d",
                   dim: sympy.Expr | tuple[sympy.Expr, ...] | None = None, eps: sympy.Expr = EPS,
                   rstd: str = "r", mean: str = "mu", saves: str = "output") -> Reduction:
    """``out[..d..] = (inp[..d..] - mu[..]) r[..]`` with ``mu[..] = sum_e
    inp[..e..] / D`` and ``r[..] = (sum_e (inp[..e..] - mu[..])**2 / D +
    eps)**(-1/2)``, over ``index`` (or jointly over a tuple of letters, ``D``
    the product of their extents).  Saves ``out`` and the auxiliary ``rstd``
    (``saves="output"``), or ``inp``, ``mean`` and ``rstd`` (``saves="input"``)."""
    index, dims = _reduced(index, dim)
    ks = _check(out_indices, index, (out, inp, rstd, mean))
    if saves not in ("input", "output"):
        raise ValueError(f"saves must be 'input' or 'output', not {saves!r}")
    size = sympy.Mul(*dims)
    X, N = sympy.IndexedBase(inp, real=True), sympy.IndexedBase(out, real=True)
    r, mu = sympy.IndexedBase(rstd, positive=True), sympy.IndexedBase(mean, real=True)
    idx = tuple(_sym(i) for i in out_indices)
    row_letters = tuple(i for i in out_indices if i not in index)
    mean_expr, rstd_expr = _stats(X, idx, ks, index, dims, eps, True)
    forward = (X[idx] - mean_expr) * rstd_expr
    r_aux, mu_aux = Factor(rstd, row_letters), Factor(mean, row_letters)

    def substitute(expr: sympy.Expr) -> sympy.Expr:
        # sum_e X[..e..] = D mu; then sum_e (X[..e..] - mu)**2 = D (r**-2 - eps).
        expr = _replace_row_sums(expr, dims, _elements(X, ks), lambda rw: size * mu[rw])

        def centred_squares(js: Letters, f: sympy.Expr) -> tuple | None:
            if not (f.is_Pow and f.exp == 2 and isinstance(f.base, sympy.Add)):
                return None
            for term in f.base.args:
                rw = _row(term, X, ks, js)
                if rw is not None and sympy.expand(f.base - term + mu[rw]) == 0:
                    return rw
            return None

        expr = _replace_row_sums(expr, dims, centred_squares, lambda rw: size * (r[rw] ** -2 - eps))
        if saves == "output":
            expr = _substitute_centred(expr, X, ks, lambda rw: mu[rw], r, N)
        return expr

    saved = (Factor(out, out_indices), r_aux) if saves == "output" else \
        (Factor(inp, out_indices), mu_aux, r_aux)
    op = _Op(
        name="layernorm", output=Factor(out, out_indices), forward=forward,
        inp=Factor(inp, out_indices), base=X, index=index, extents=tuple(zip(index, dims)),
        substitute=substitute, saved=saved,
        aux=(r_aux,) if saves == "output" else (mu_aux, r_aux),
        definitions=((Factor(out, out_indices), forward), (mu_aux, mean_expr), (r_aux, rstd_expr)),
        dims=frozenset().union(*(d.free_symbols for d in dims)),
    )
    return _derive(op)


@functools.lru_cache(maxsize=None)
def cross_entropy_rule(loss: str = "L", logits: str = "Z", target: str = "y",
                       logit_indices: tuple[str, ...] = ("b", "v"), index: str = "v",
                       dim: sympy.Expr | None = None,
                       batch_dims: tuple[sympy.Expr, ...] | None = None,
                       mean: bool = False, probs: str = "P") -> Reduction:
    """``loss = c sum_b (log sum_w exp(logits[b,w]) - logits[b, target[b]])``
    over ``index`` (the classes, extent ``dim``) and summed over every other
    letter (extents ``batch_dims``, in order; default the upper-cased
    letters); ``c`` is 1, or one over the number of rows when ``mean``.
    ``target`` holds integer class indices, with the logits' other letters.
    Saves the auxiliary probabilities ``probs`` and reads ``onehot_<target>``."""
    (k,) = _check(logit_indices, (index,), (loss, logits, target, probs))
    if len(logit_indices) < 2:
        raise ValueError("cross-entropy needs a batch letter besides the class index")
    dim = _dim(dim, index)
    batch = tuple(logit_indices[:k] + logit_indices[k + 1:])
    batch_dims = tuple(_dim(None, b) for b in batch) if batch_dims is None else tuple(batch_dims)
    if len(batch_dims) != len(batch):
        raise ValueError(f"{len(batch)} batch letters {batch} but {len(batch_dims)} batch_dims")
    Z, y = sympy.IndexedBase(logits, real=True), sympy.IndexedBase(target, integer=True)
    P = sympy.IndexedBase(probs, positive=True)
    norm = sympy.IndexedBase(_unused("Z", (loss, logits, target, probs)), positive=True)
    rows = tuple(_sym(b) for b in batch)
    w = _sym(_fresh_letters(index, set(logit_indices))[0])

    def at(j: sympy.Expr) -> sympy.Indexed:
        return Z[rows[:k] + (j,) + rows[k:]]

    per_row = sympy.log(sympy.Sum(sympy.exp(at(w)), (w, 0, dim - 1))) - at(y[rows] if rows else y)
    scale = sympy.Integer(1) / sympy.Mul(*batch_dims) if mean else sympy.Integer(1)
    forward = scale * sympy.Sum(per_row, *((s, 0, n - 1) for s, n in zip(rows, batch_dims))) \
        if rows else scale * per_row
    onehot = f"onehot_{target}"
    v = _sym(index)
    p_aux = Factor(probs, logit_indices)
    p_expr = sympy.exp(at(v)) / sympy.Sum(sympy.exp(at(w)), (w, 0, dim - 1))
    op = _Op(
        name="cross_entropy", output=Factor(loss, ()), forward=forward,
        inp=Factor(logits, logit_indices), base=Z, index=(index,),
        extents=((index, dim), *zip(batch, batch_dims)),
        substitute=lambda e: _substitute_softmax(e, Z, P, (k,), (dim,), norm),
        saved=(p_aux, Factor(onehot, logit_indices)), aux=(p_aux,),
        definitions=((p_aux, p_expr),
                     (Factor(onehot, logit_indices), sympy.KroneckerDelta(y[rows] if rows else y, v))),
        dims=frozenset(dim.free_symbols).union(*(n.free_symbols for n in batch_dims)),
        onehot=(y, onehot, k),
    )
    return _derive(op)
