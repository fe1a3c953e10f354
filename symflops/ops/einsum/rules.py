"""Backward rules of an einsum term, derived symbolically from its index expression.

For a contraction ``Y[o] = c * A[a] B[b] ...`` the op's share of the first-order
change of the loss is the scalar ``sum over all indices of dY[o] * c * A[a] B[b] ...``
(the chain rule: ``dL = sum dY * dY_op``).  The gradient of an operand ``T`` is
the derivative of that scalar with respect to a generic element ``T[i', j', ...]``:

1. *contribution*: write the scalar;
2. *differentiate*: product rule over every occurrence of ``T``; SymPy
   differentiates the occurrence, ``d T[i,j] / d T[i',j'] = delta(i,i') delta(j,j')``;
3. *contract*: each Kronecker delta with a summed index removes that sum
   (substitute the index); deltas between two generic indices remain and mean
   the gradient lives on a diagonal;
4. *rename*: the generic indices get the operand's own letters back, and the
   result is read out as an einsum statement, ``dT[i,j] = ...``.

No table of cases is consulted, so any einsum (batch indices, outer products,
several contracted indices, broadcast, diagonals, a tensor used twice) derives
the same way.  Each step is kept as a :class:`~symflops.core.records.Step`
record for the sheets, and the product-rule terms are checked against SymPy's
own derivative of the whole scalar.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Iterable

import sympy

from ...core.ir import Apply, Einsum, Factor, Op, fresh_letter, rename
from ...core.records import IndexTerm, Rule, Step, _sym, grad_name
from ..functions import FUNCTIONS



def _fresh(used: set[str], preferred: Iterable[str] = ()) -> str:
    return fresh_letter(used, preferred)


def _rename_factor(f: Factor, mapping: dict[str, str]) -> Factor:
    return Factor(f.tensor, tuple(mapping.get(i, i) for i in f.indices), fn=f.fn)


def _rename_term(t: IndexTerm, mapping: dict[str, str]) -> IndexTerm:
    return IndexTerm(
        t.coefficient,
        tuple(_rename_factor(f, mapping) for f in t.factors),
        tuple((mapping.get(a, a), mapping.get(b, b)) for a, b in t.deltas),
        tuple(mapping.get(i, i) for i in t.summed),
    )


def _delta_pairs(occurrence: Factor, generic: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    """Let SymPy differentiate one occurrence with respect to the generic
    element, and read the Kronecker deltas off its answer."""
    base = sympy.IndexedBase(occurrence.tensor)
    letters = tuple(_sym(i) for i in occurrence.indices)
    element = tuple(_sym(g) for g in generic)
    derivative = base[letters].diff(base[element]) if letters else sympy.Integer(1)
    pairs = []
    for factor in sympy.Mul.make_args(derivative):
        if isinstance(factor, sympy.KroneckerDelta):
            a, b = (str(s) for s in factor.args)
            # SymPy orders the arguments canonically; keep (summed letter, generic).
            pairs.append((a, b) if b in generic else (b, a))
        elif factor != 1:
            raise AssertionError(f"unexpected factor {factor} in d{occurrence}")
    return tuple(pairs)


def _contract(term: IndexTerm, generic: set[str]) -> IndexTerm:
    """Remove every delta that pairs a summed index with another index."""
    factors, deltas, summed = list(term.factors), list(term.deltas), list(term.summed)
    changed = True
    while changed:
        changed = False
        for k, (a, b) in enumerate(deltas):
            if a == b:
                del deltas[k]
                changed = True
                break
            victim, keep = (a, b) if a in summed else (b, a) if b in summed else (None, None)
            if victim is None:
                continue
            mapping = {victim: keep}
            factors = [_rename_factor(f, mapping) for f in factors]
            deltas = [(mapping.get(x, x), mapping.get(y, y)) for x, y in deltas[:k] + deltas[k + 1:]]
            summed.remove(victim)
            changed = True
            break
    return IndexTerm(term.coefficient, tuple(factors), tuple(deltas), tuple(summed))


def _merge(terms: list[tuple[Factor, IndexTerm]]) -> list[tuple[Factor, IndexTerm]]:
    """Add the coefficients of terms that are the same einsum."""
    merged: dict[tuple, tuple[Factor, IndexTerm]] = {}
    for out, t in terms:
        # The same factors in another order are the same einsum.
        key = (out, tuple(sorted(t.factors, key=lambda f: (f.tensor, f.indices, str(f.fn or "")))),
               frozenset(t.summed))
        if key in merged:
            prev = merged[key][1]
            t = IndexTerm(prev.coefficient + t.coefficient, prev.factors, prev.deltas, prev.summed)
        merged[key] = (out, t)
    return [v for v in merged.values() if v[1].coefficient != 0]


def _derivative_factor(e: Einsum, occurrence: Factor,
                       output_form: bool = True) -> tuple[Factor, ...]:
    """What differentiating ``occurrence`` leaves besides Kronecker deltas:
    nothing for a plain tensor, f'(X) for f(X) -- or f' written in the output
    Y when the term is exactly Y = f(X), the op's only term (``output_form``),
    and f's convention saves its output."""
    if occurrence.function is None:
        return ()
    function = FUNCTIONS[occurrence.function.name]
    # A where-clause on the output's letters only restricts it (Y = f(X) inside
    # the domain, 0 outside, and the rule carries the same clause): still lone.
    lone = (output_form and len(e.factors) == 1 and e.coefficient == 1
            and all(f.is_comparison for f in e.operands if f.is_indicator)
            and occurrence.indices == e.output.indices
            and len(set(occurrence.indices)) == len(occurrence.indices))
    if function.saves == "output" and lone:
        return (Factor(e.output.tensor, e.output.indices, fn=Apply(function.name, "derivative@out")),)
    return (Factor(occurrence.tensor, occurrence.indices, fn=Apply(function.name, "derivative")),)


def contraction_rules(op: Op, op_number: int, wrt: str,
                      output_form: bool = True) -> tuple[Rule, ...]:
    """Every gradient contribution that ``op`` sends to ``wrt``: per term that
    reads ``wrt``, one rule per index pattern of the result (several only when
    ``wrt`` occurs both on and off a diagonal)."""
    return tuple(rule for k, term in enumerate(op.terms)
                 if any(f.tensor == wrt for f in term.factors)
                 for rule in term_rules(op, k, op_number, wrt, output_form))


@functools.lru_cache(maxsize=4096)
def term_rules(op: Op, term: int, op_number: int, wrt: str,
               output_form: bool = True) -> tuple[Rule, ...]:
    """Derive the gradient that term ``term`` of ``op`` sends to ``wrt``.
    Remembered: a sheet derives its generic patterns again, and a model
    shares ops with its blocks and with other models."""
    e = op.terms[term]
    # Derived once per pattern: tensors renamed to placeholders in order of
    # appearance, the other terms and the op's text left out, and the
    # placeholders named back in the rules (two sheets' X[b,d] W[d,f] and
    # A[b,d] B[d,f] share one derivation).
    names = list(dict.fromkeys(f.tensor for f in (e.output, *e.operands)))
    placeholder = {n: f"\0{k}\0" for k, n in enumerate(names)}
    letters = {i for f in e.operands for i in f.indices} | set(e.output.indices)  # lookups too
    pattern = rename(e, placeholder, {})
    pattern_dims = tuple((i, d) for i, d in op.index_dims if i in letters)
    back = {p: n for n, p in placeholder.items()}
    back.update({grad_name(p): grad_name(n) for p, n in back.items()})
    try:
        # A lone term of a one-term op may write f' in its output (see _derivative_factor).
        rules = _term_rules(pattern, pattern_dims, placeholder[wrt],
                            output_form and len(op.terms) == 1)
    except AssertionError as exc:
        raise AssertionError(f"{_named_text(str(exc), back)} ({op.text})") from None
    return tuple(_named_back(r, back, op_number) for r in rules)


def _named_text(s: str, back: dict[str, str]) -> str:
    for p, n in back.items():
        s = s.replace(p, n)
    return s


def _named_back(rule: Rule, back: dict[str, str], op_number: int) -> Rule:
    renamed = rename(rule, back, {})
    steps = tuple(dataclasses.replace(s, note=_named_text(s.note, back)) for s in renamed.steps)
    return dataclasses.replace(renamed, wrt=back[rule.wrt], op=op_number, steps=steps)


@functools.lru_cache(maxsize=4096)
def _term_rules(e: Einsum, index_dims: tuple[tuple[str, sympy.Expr], ...], wrt: str,
                output_form: bool) -> tuple[Rule, ...]:
    op_number = 0  # set by term_rules
    extents = dict(index_dims)
    upstream = Factor(grad_name(e.output.tensor), e.output.indices)
    # Sums are written over the operands' letters in reading order (X[i,j] W[j,k]: i, j, k).
    letters = tuple(dict.fromkeys([*(i for f in e.operands for i in f.indices),
                                   *e.output.indices]))
    # An indicator ([t <= s], [v = tok[b]]) is never differentiated: it rides along.
    occurrences = [k for k, f in enumerate(e.operands) if f.tensor == wrt and not f.is_indicator]
    first = e.operands[occurrences[0]]
    used = set(letters)
    generic = tuple(_fresh(used, [f"{i}'", f"{i}''", f"{i}'''"]) for i in first.indices)
    element = Factor(grad_name(wrt), generic)
    for g, i in zip(generic, first.indices):
        extents[g] = extents[i]

    # 1. The op's contribution to dL, summed over every index.
    scalar = IndexTerm(e.coefficient, (upstream, *e.operands), (), letters)
    # 2. Product rule: one term per occurrence, the occurrence replaced by its
    #    derivative (Kronecker deltas) and the upstream gradient put in its place.
    differentiated = []
    for k in occurrences:
        others: list[Factor] = []
        for j, f in enumerate(e.operands):
            others += [upstream, *_derivative_factor(e, f, output_form)] if j == k else [f]
        plain = Factor(e.operands[k].tensor, e.operands[k].indices)
        differentiated.append(IndexTerm(e.coefficient, tuple(others),
                                        _delta_pairs(plain, generic), letters))
    has_fn = any(f.fn for f in e.factors)
    check = sympy.expand(scalar.sympy().diff(
        sympy.IndexedBase(wrt)[tuple(_sym(g) for g in generic)]) if generic and not has_fn else 0)
    if generic and not has_fn and sympy.expand(sum(t.sympy() for t in differentiated) - check) != 0:
        raise AssertionError(f"product rule disagrees with SymPy for d{wrt}")
    # 3. Contract the deltas.
    contracted = [_contract(t, set(generic)) for t in differentiated]
    # 4. Rename generic indices to the operand's own letters; read out einsums.
    renamed: list[tuple[Factor, IndexTerm]] = []
    for t in contracted:
        parent = {g: g for g in generic}
        for a, b in t.deltas:
            parent[parent[b]] = parent[a]
        taken = set(t.summed) | {i for f in t.factors for i in f.indices if i not in generic}
        mapping: dict[str, str] = {}
        chosen: set[str] = set()
        for g, letter in zip(generic, first.indices):
            root = parent[g]
            if root in mapping:
                mapping[g] = mapping[root]
                continue
            name = letter if letter not in chosen else _fresh(chosen | taken | set(letters))
            mapping[g] = mapping[root] = name
            chosen.add(name)
        # A summed letter that now collides with an output letter moves aside.
        for s in t.summed:
            if s in chosen:
                mapping[s] = _fresh(chosen | taken | set(letters) | set(mapping.values()))
                extents[mapping[s]] = extents[s]
        out = Factor(grad_name(wrt), tuple(mapping[g] for g in generic))
        r = _rename_term(t, mapping)
        renamed.append((out, IndexTerm(r.coefficient, r.factors, (), r.summed)))
    renamed = _merge(renamed)
    for out, _ in renamed:
        for letter, g in zip(out.indices, generic):
            extents.setdefault(letter, extents[g])

    steps = (
        Step("contribution", Factor("L", ()), (scalar,),
             f"the op's share of dL: d{e.output.tensor} times the op, summed over every index"),
        Step("differentiate", element, tuple(differentiated),
             f"product rule over the {len(occurrences)} occurrence(s) of {wrt}; "
             f"d{wrt}[..]/d{wrt}[..'] is a product of Kronecker deltas"),
        Step("contract", element, tuple(contracted),
             "each delta with a summed index removes that sum"),
        Step("rename", renamed[0][0] if renamed else element,
             tuple(t for _, t in renamed), f"back to the letters of {wrt}"),
    )
    terms = [Einsum(out, t.factors, t.coefficient) for out, t in renamed]
    if not terms:  # the contributions cancel: the gradient is zero
        terms = [Einsum(Factor(grad_name(wrt), first.indices), (), sympy.Integer(0))]
    groups: dict[Factor, list[Einsum]] = {}
    for t in terms:
        groups.setdefault(t.output, []).append(t)
    rules = []
    for group in groups.values():
        used_letters = {i for t in group for i in t.indices}
        index_dims = tuple((i, extents[i]) for i in sorted(used_letters, key=str))
        rules.append(Rule(wrt, op_number, tuple(group), index_dims, steps, bool(e.contracted)))
    return tuple(rules)
