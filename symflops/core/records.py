"""The records the stages hand each other: backward rules and the steps that
justify them, a layer's derivation, and the cost of one op or rule.

A rule is made of einsum terms (:class:`~symflops.core.ir.Einsum`) whatever
op kind derived it; each derivation step is kept (:class:`Step`) so that a
sheet can show it.  Every record is frozen.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Sequence, Union

import sympy

from .ir import Einsum, Factor, Layer, dim_symbol
from .polynomial import less_than


#: An order of pairwise products: a leaf is an operand's position in ``Einsum.factors``.
Tree = Union[int, tuple["Tree", "Tree"]]


def grad_name(tensor: str) -> str:
    return "d" + tensor


@dataclass(frozen=True)
class IndexTerm:
    """``coefficient * prod(factors) * prod(delta(a, b))``, summed over ``summed``."""

    coefficient: sympy.Expr
    factors: tuple[Factor, ...]
    deltas: tuple[tuple[str, str], ...] = ()
    summed: tuple[str, ...] = ()

    def sympy(self) -> sympy.Expr:
        """The summand as a SymPy expression of Indexed objects (no Sum)."""
        expr = self.coefficient
        for f in self.factors:
            if f.is_indicator:  # an Iverson bracket: a function SymPy never differentiates
                head = sympy.IndexedBase(f.tensor)[tuple(_sym(i) for i in f.indices[1:])] \
                    if f.is_select else f.affine.value([_sym(i) for i in f.indices[1:]]) \
                    if f.is_shift else _sym(f.indices[1]) + f.offset
                name = _INDICATOR_NAMES["=+" if f.is_shift else str(f.fn)]
                expr *= sympy.Function(name)(_sym(f.indices[0]), head)
                continue
            element = sympy.IndexedBase(f.tensor)[tuple(_sym(i) for i in f.indices)] if f.indices \
                else sympy.Symbol(f.tensor)
            expr *= sympy.Function(str(f.fn))(element) if f.fn else element
        for a, b in self.deltas:
            expr *= sympy.KroneckerDelta(_sym(a), _sym(b))
        return expr


@dataclass(frozen=True)
class Step:
    """One line of a derivation: ``lhs = sum(terms)``.  ``kind`` is one of
    'contribution', 'differentiate', 'contract', 'rename'."""

    kind: str
    lhs: Factor
    terms: tuple[IndexTerm, ...]
    note: str
    #: a step that is a SymPy expression rather than index terms (the
    #: forward formula and the derivative of a normalisation)
    expr: sympy.Expr | None = None


@dataclass(frozen=True)
class MatrixProduct:
    """A rule or op that is a matrix product, e.g. ``dW = X^T dY``:
    ``output = coefficient * F1 F2`` with each factor possibly transposed.

    A batched product is one matrix product for each value of the ``batch``
    letters (``dQ = dA K / sqrt(E)`` per ``(b, g, r)``; a letter of the
    output and one operand only is a batch letter too, the other operand being
    the same matrix for each of its values), summed over the ``summed`` letters
    that both operands carry and the output does not (``dV = sum_r P^T dO``
    per ``(b, g)``).  A matrix index made of several letters, flattened into
    one (the rows ``(b, s)`` of ``X`` in ``dW = X^T dY``), is listed in ``groups``, its letters
    in the order in which every tensor carrying them carries them, so that
    each tensor's matrix is its row-major reshape."""

    output: str
    coefficient: sympy.Expr
    factors: tuple[tuple[str, bool], ...]  # (tensor, transposed)
    batch: tuple[str, ...] = ()
    summed: tuple[str, ...] = ()
    groups: tuple[tuple[str, ...], ...] = ()

    @property
    def plain(self) -> bool:
        """One product of two matrices, each a tensor of two letters: its
        element ``(r, c)`` is the rule's element, as in ``(X^T dH)_{df}``."""
        return not (self.batch or self.summed or self.groups)

    def __str__(self) -> str:
        parts = [name + ("^T" if t else "") for name, t in self.factors]
        coef = "" if self.coefficient == 1 else sympy.sstr(self.coefficient) + " "
        total = f"sum_{{{','.join(self.summed)}}} " if self.summed else ""
        text = f"{self.output} = {total}{coef}{' '.join(parts)}"
        notes = []
        if self.batch:
            notes.append(f"per ({', '.join(self.batch)})")
        if self.groups:
            notes.append(", ".join(f"({', '.join(g)})" for g in self.groups) + " flattened")
        return text + (" " + "; ".join(notes) if notes else "")


@dataclass(frozen=True)
class Rule:
    """The gradient contribution that forward op ``op`` sends to ``wrt``.

    ``terms`` are einsums to be added (several when ``wrt`` occurs more than
    once in the op with different index patterns).  ``index_dims`` gives the
    extent of every letter used by the terms."""

    wrt: str
    op: int
    terms: tuple[Einsum, ...]
    index_dims: tuple[tuple[str, sympy.Expr], ...]
    steps: tuple[Step, ...]
    #: whether the forward term it comes from sums over an index (matmul-type
    #: work, counted in ``flops``) rather than being elementwise.
    matmul: bool = True

    @property
    def grad(self) -> str:
        return grad_name(self.wrt)

    @property
    def statement(self) -> str:
        text = ""
        for k, t in enumerate(self.terms):
            rhs = t.statement(where=False).split(" = ", 1)[1]
            if k:
                text += " - " + rhs[1:] if rhs.startswith("-") else " + " + rhs
            else:
                text = rhs
        # One clause for the whole sum: a condition restricts each term carrying both letters.
        clauses = tuple(dict.fromkeys(c for t in self.terms for c in t.where()))
        return f"{self.terms[0].output} = {text}" + (" where " + ", ".join(clauses) if clauses else "")

    @functools.cached_property
    def reads(self) -> tuple[str, ...]:
        """Tensors the rule reads, in order of first appearance (worked out once
        per rule: the counts ask it of every rule for every saved tensor)."""
        return tuple(dict.fromkeys(f.tensor for t in self.terms for f in t.operands
                                   if f.reads_tensor))

    @property
    def matrix_form(self) -> MatrixProduct | None:
        return matrix_form(self.terms[0]) if len(self.terms) == 1 else None

    def dims(self) -> dict[str, sympy.Expr]:
        return dict(self.index_dims)


@dataclass(frozen=True)
class PatternTerm:
    """One term of an einsum op in its textbook form: tensors renamed
    ``Y = X W V ...``, letters ``i, j, k, ...`` in order of appearance.

    Terms with the same ``key`` share one derivation on the sheet."""

    key: str
    term: Einsum
    index_dims: tuple[tuple[str, sympy.Expr], ...]
    #: whether the term is its op's only one: only then may an output-saving
    #: function's rule read the op's output (``tanh'@out``)
    alone: bool

    @property
    def inputs(self) -> tuple[str, ...]:
        """The tensors the term reads, in order of first use."""
        return tuple(dict.fromkeys(f.tensor for f in self.term.operands if f.reads_tensor))


@dataclass(frozen=True)
class PatternRules:
    """A pattern's rules for one of its tensors, each with its steps."""

    wrt: str
    rules: tuple[Rule, ...]


@dataclass(frozen=True)
class Pattern:
    """A pattern a sheet derives step by step: its textbook form ``term``,
    the outputs of the ops it applies to, and its rules for each tensor it
    reads (a tensor without a rule, such as an index, is left out)."""

    term: Einsum
    applies_to: tuple[str, ...]
    rules: tuple[PatternRules, ...]


@dataclass(frozen=True)
class Derivation:
    """A layer with its backward rules in the order they are computed.

    ``patterns`` is None until the sheet's preparation fills it
    (:func:`symflops.derive.patterns.with_patterns`): only a sheet shows
    them, and deriving them costs as much again as a small layer's rules."""

    layer: Layer
    rules: tuple[Rule, ...]
    needs_grad: frozenset[str]
    patterns: tuple[Pattern, ...] | None = None

    @property
    def saved(self) -> tuple[str, ...]:
        """Forward tensors (not parameters, not buffers) that some backward
        rule reads, in forward order: the activations training must keep (a
        buffer is kept anyway, counted apart)."""
        read = {name for r in self.rules for name in r.reads}
        return tuple(t.name for t in self.layer.tensors
                     if t.name in read and not t.is_param and not t.is_buffer)

    def needed_by(self, tensor: str) -> tuple[str, ...]:
        """The gradients whose rules read ``tensor``."""
        return tuple(dict.fromkeys(r.grad for r in self.rules if tensor in r.reads))


_INDICATOR_NAMES = {"<=": "le", "<": "lt", ">=": "ge", ">": "gt", "=": "select", "=+": "shift",
                    "=+c": "offset"}


def _sym(letter: str) -> sympy.Symbol:
    return sympy.Symbol(letter, integer=True)


def matrix_form(e: Einsum) -> MatrixProduct | None:
    """``e`` as a product of two matrices with transposes, batched over some
    letters and summed over others, when it is exactly one (see
    :class:`MatrixProduct`); None when it is not (a diagonal, a bracket, a
    letter summed on one operand only, an outer product, a pointwise function).

    Of the forms that are exact, the one moving fewest letters out of the
    matrices (into ``batch`` or ``summed``) is taken, then the one whose
    batch and summed letters stand side by side in most of the three tensors
    (as in ``[batch..., rows, columns]``), then the one moving the earliest
    letters of the left operand: ``dV[t,g,e] = P[g,r,s,t] dO[s,g,r,e]`` is
    ``sum_r P^T dO`` per ``g``, and ``dQ[s,g,r,e] = dA[g,r,s,t] K[t,g,e]``
    is ``dA K`` per ``(g, r)``."""
    if len(e.operands) != 2 or any(f.is_indicator or f.fn for f in e.operands):
        return None
    u, v = e.operands
    out = e.output.indices
    if any(len(set(x)) != len(x) for x in (u.indices, v.indices, out)):
        return None
    us, vs, os_ = set(u.indices), set(v.indices), set(out)
    if not os_ <= us | vs or (us ^ vs) - os_:
        return None  # a broadcast output letter, or a letter summed on one operand only
    shared = [x for x in out if x in us and x in vs]
    contracted = [x for x in u.indices if x in vs and x not in os_]
    if not contracted:
        return None
    found: list[tuple[tuple[int, int, list[int]], MatrixProduct]] = []
    for left, right in ((u, v), (v, u)):
        rows = [x for x in left.indices if x in os_ and x not in right.indices]
        cols = [x for x in right.indices if x in os_ and x not in left.indices]
        letters = rows + cols + contracted
        if len(letters) > MAX_MATRIX_LETTERS:
            return None
        for mask in range(1 << len(letters)):
            moved = frozenset(x for k, x in enumerate(letters) if mask >> k & 1)
            form = _arrange(e, left, right, shared, rows, cols, contracted, moved)
            if form is not None:
                apart = set(form.batch) | set(form.summed)
                together = sum(_contiguous(t, apart) for t in (left.indices, right.indices, out))
                found.append(((len(moved), -together,
                               sorted(left.indices.index(x) if x in left.indices else len(out)
                                      for x in moved)), form))
    return min(found, key=lambda f: f[0])[1] if found else None


#: Beyond this many letters a product is not searched for a matrix form
#: (``2**n`` ways of taking letters out of the matrices).
MAX_MATRIX_LETTERS = 12


def _contiguous(indices: Sequence[str], letters: set[str]) -> bool:
    """Whether ``letters`` stand side by side among ``indices``, as the
    batch axes of a batched matrix product do."""
    at = [k for k, x in enumerate(indices) if x in letters]
    return not at or at[-1] - at[0] == len(at) - 1


def _arrange(e: Einsum, left: Factor, right: Factor, shared: list[str], rows: list[str],
             cols: list[str], contracted: list[str], moved: frozenset[str]
             ) -> MatrixProduct | None:
    """The product with ``moved`` letters out of the matrices, when every
    tensor's remaining letters fall into its two matrix indices in one order."""
    batch = set(shared) | (moved - set(contracted))
    out = [x for x in e.output.indices if x not in batch]
    r = [x for x in rows if x not in moved]
    c = [x for x in cols if x not in moved]
    if not r or not c or out != r + c:
        return None
    lm = [x for x in left.indices if x not in batch and x not in moved]
    rm = [x for x in right.indices if x not in batch and x not in moved]
    inner = [x for x in lm if x not in r]
    if not inner or lm not in (r + inner, inner + r) or rm not in (inner + c, c + inner):
        return None
    return MatrixProduct(e.output.tensor, e.coefficient,
                         ((left.tensor, lm != r + inner), (right.tensor, rm != inner + c)),
                         batch=tuple(x for x in e.output.indices if x in batch),
                         summed=tuple(x for x in contracted if x in moved),
                         groups=tuple(tuple(g) for g in (r, inner, c) if len(g) > 1))


@dataclass(frozen=True)
class OpCost:
    """Cost of one forward op or one backward rule; ``orders`` lists its
    terms whose cheapest orders cross (see :class:`TermOrders`)."""

    flops: sympy.Expr
    elementwise: sympy.Expr
    orders: tuple[TermOrders, ...] = ()


@dataclass(frozen=True)
class TermOrders:
    """The cheapest orders of one term when their costs cross: each costs
    less than the others at some sizes.  ``chosen`` is the candidate counted
    (the one cheapest at the declared ``sizes``), or None when the count is
    the least of them.  ``bounded``: why the search for them stopped at its
    bound (in words); then the one candidate is the order cheapest at
    ``sizes``, every dim of the term (the declared sizes, the others at a
    default)."""

    term: int
    texts: tuple[str, ...]
    candidates: tuple[Candidate, ...]
    chosen: int | None
    sizes: tuple[tuple[str, int], ...] = ()
    bounded: str = ""

    def cheaper_when(self, dims: Sequence[str]) -> tuple[sympy.Basic, ...]:
        """For each candidate, the condition under which it costs less than
        every other, solved for the first of ``dims`` (names) that allows it."""
        symbols = [dim_symbol(n) for n in dims]
        return tuple(sympy.And(*(less_than(c.total, o.total, symbols)
                                 for o in self.candidates if o is not c))
                     for c in self.candidates)


@dataclass(frozen=True)
class Candidate:
    """One order of a term and its cost, split into the two buckets."""

    tree: Tree
    flops: sympy.Expr
    elementwise: sympy.Expr

    @property
    def total(self) -> sympy.Expr:
        return sympy.expand(self.flops + self.elementwise)
