"""Parameter counts by the work each parameter does, and by what a token reads.

* ``dense``: it is an operand of a product that sums over an index together
  with another tensor (a weight matrix; an unembedding, tied or not).  These
  are the N of the "6N FLOPs per token" rule.
* ``lookup``: it is only ever read through a lookup (an embedding table that
  is not tied): a gather does no multiply-adds.
* ``elementwise``: everything else (biases, norm gains, a learned position
  table that is added): no multiply-adds per token beyond one or two.

Per token (when the declaration gives ``tokens:``), the counts come from the
structure of the ops, not from FLOP ratios:

* **Token rows.** An axis of an input, index or mask tensor whose extent is a
  dim of ``tokens:`` (``B`` and ``S`` for ``B*S``) is a *row* axis: each of
  its points is a token.  An op's output has a row axis wherever its letter
  is a row letter of an operand; a lookup through an index tensor carries
  rows over (the dispatch ``Xe[x,q,d] = Yn[tb[x,q], ts[x,q], d]`` makes the
  expert slots ``(x, q)`` rows).
* **Live rows.** Rows read by no later op are padding: computed, never used.
  A lookup ``Ye[ex[b,s,j], sl[b,s,j], d]`` reads as many rows as its index
  has entries (each entry a distinct row, as a token's slots are), so
  ``B S k`` of the ``M C = c k B S`` slots are live, ``1/c`` of them; the ops
  feeding those rows inherit the fraction.
* **Reads.** In a product, one token's rows are its live rows divided by the
  tokens (``k`` slots for a routed token, one row otherwise); per row, the
  product reads the elements of a parameter along the letters that are not
  row letters (a routed expert ``W[x,d,f]``: ``D F`` of one expert; a
  lookup ``E[tok[b,s], d]``: one row ``D``; a position table ``W_P[s,d]``
  added to a row: ``D``).  A product over no row letter (a weight built from
  weights: a merged or normalised weight, ``W0 + A B``) runs once per pass
  and every token reads all of it: its parameters count whole.  A parameter
  read by several products counts once per product (a tied embedding: the
  whole table for the unembedding and one row for the lookup).

From these, with every copy of a repeated block:

* ``active_dense`` (the N of 6N): each dense parameter's reads in the
  products that sum over an index with another tensor.  A mixture of experts
  counts the k of M experts a token reaches, whatever its capacity factor
  (padding slots are compute, not parameters).
* ``active``: ``active_dense`` plus every other parameter whole (gains,
  biases, embedding and position tables), as published counts do
  (Mixtral-8x7B: 12.9e9 of 46.7e9).
* ``read``: every parameter's reads: the weights one token's forward pass
  reads, which a decoding step streams from memory per sequence
  (:mod:`symflops.count.inference`).

A layer whose structure does not give a count (a product whose rows are
neither a multiple nor a divisor of the tokens, rows that ops read in
different live fractions, a parameter read through a shifted index) is
refused with the op named.  Without a declared token count,
``active = total``, ``active_dense = dense`` and ``read`` is None.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Iterator

import sympy

# the one count of index tuples (with where-clauses)
from ..ops.einsum.orders import bounds_of, size as _size
from ..core.errors import SymflopsError
from ..core.ir import Einsum, Layer, substitute
from ..ops.base import Op, Unit
from ..core.polynomial import exact_quotient, monomials, quotient

CLASSES = ("dense", "lookup", "elementwise")


@dataclass(frozen=True)
class ParamCounts:
    total: sympy.Expr
    trainable: sympy.Expr
    by_class: tuple[tuple[str, sympy.Expr], ...]   # (class, elements, every copy)
    classes: tuple[tuple[str, str], ...]           # (tensor, class)
    active: sympy.Expr         # active_dense + every other parameter whole
    active_dense: sympy.Expr   # the dense parameters a token uses: the N of 6N
    read: sympy.Expr | None    # parameter elements one token reads; None without tokens

    def of(self, kind: str) -> sympy.Expr:
        return dict(self.by_class)[kind]


def _is_dense_term(term: Einsum) -> bool:
    names = [f.tensor for f in term.operands if f.reads_tensor and not f.is_select]
    return bool(term.contracted) and len(names) >= 2


def param_class(layer: Layer, name: str) -> str:
    looked_up = False
    for op in layer.ops:
        for term in op.terms:
            names = [f.tensor for f in term.operands if f.reads_tensor and not f.is_select]
            if name not in names:
                continue
            if _is_dense_term(term):
                return "dense"
            if any(f.is_select for f in term.operands) and len(names) == 1:
                looked_up = True
    return "lookup" if looked_up else "elementwise"


def _terms(op: Op) -> tuple[Einsum, ...]:
    """An op's products; a norm, softmax or loss as the one 'product' that
    reads its input row by row (its reads are those of an elementwise map)."""
    return op.reads()


_SKIP = "or declare the layer without 'tokens:' to skip the per-token counts"


def _refuse(op: object, what: str, fix: str = "") -> SymflopsError:
    return SymflopsError(
        f"cannot count the parameters a token uses: {what}", getattr(op, "span", None),
        (fix + ", " if fix else "per-token counts follow the token rows (the dims of "
         "'tokens:') through the ops; ") + _SKIP)


class _TokenRows:
    """Which axes of each tensor are token rows, which fraction of them is
    live, and what each parameter's reads per token come to."""

    def __init__(self, layer: Layer):
        self.layer = layer
        self.subs = layer.substitutions
        self.tokens = sympy.expand(substitute(layer.tokens, self.subs))
        dims = layer.tokens.free_symbols
        produced = {op.output for op in layer.ops}
        self.rows: dict[str, tuple[int, ...]] = {
            t.name: tuple(a for a, n in enumerate(t.shape) if n in dims)
            # buffers are constant tables, not token data: never rows
            for t in layer.tensors if not (t.is_param or t.is_buffer) and t.name not in produced}
        for op in layer.ops:
            letters = set().union(*(self._row_letters(op, t) for t in _terms(op)))
            letters |= {x for t in _terms(op) for x in _scattered(t) if _scattered(t)[x] & letters}
            self.rows[op.output] = tuple(a for a, x in enumerate(op.out.indices) if x in letters)
        self.live = self._liveness()

    def _sub(self, e: sympy.Expr) -> sympy.Expr:
        return sympy.expand(substitute(sympy.expand(e), self.subs))

    def _out_letters(self, op: object) -> set[str]:
        return {op.out.indices[a] for a in self.rows[op.output]}

    def _determining(self, op: object, term: Einsum, letter: str) -> set[str]:
        """The letters a row letter stands for: itself, the index letters of the
        lookup that selects it, or the output letter of the shift that moves it."""
        for f in term.operands:
            if (f.is_select or f.is_shift) and f.indices[0] == letter:
                if f.is_select:
                    return set(f.indices[1:])
                moved = [x for x in f.indices[1:] if x in term.output.indices]
                # a view of the row axis as blocks (Qc[b,c,u] = Q[b,C*c+u]): each row is
                # one (c, u) pair, the row letters both of the shift's letters
                view = len(moved) == len(f.indices) - 1 > 1
                if len(moved) != 1 and not view:
                    raise _refuse(op, f"the token axis shifted in {op.statement()!r} follows "
                                      "no one output letter")
                return set(moved)
        return {letter}

    def _row_letters(self, op: object, term: Einsum) -> set[str]:
        """The letters of a product that run over token rows: the row axes of
        its operands (a lookup's index tensor included)."""
        letters: set[str] = set()
        for f in term.operands:
            if f.is_select:
                letters |= {f.indices[1 + a] for a in self.rows.get(f.tensor, ())}
            elif not f.is_indicator:
                for a in self.rows.get(f.tensor, ()):
                    letters |= self._determining(op, term, f.indices[a])
        return letters

    def _fraction(self, op: object, operand: str, ratio: sympy.Expr) -> sympy.Expr:
        """Entries read over rows, as the live fraction of the rows: 1 when the
        entries are at least the rows (every row read), the ratio when it is
        one over a polynomial (``1/c``)."""
        ratio = sympy.cancel(self._sub(ratio))
        if ratio == 1 or monomials(sympy.expand(ratio)) is not None:
            return sympy.Integer(1)
        if monomials(sympy.expand(1 / ratio)) is not None:
            return ratio
        raise _refuse(op, f"{op.statement()!r} reads {ratio} of the token rows of "
                          f"{operand!r}, which may be more or less than all of them",
                      "give the slots' extent as a formula of the tokens (for an MoE "
                      "capacity, C: {equals: c * k * T / M})")

    def _liveness(self) -> dict[str, sympy.Expr]:
        """The live fraction of each produced tensor's rows, from the layer's
        outputs (all live) back through the ops."""
        live: dict[str, sympy.Expr] = {}
        wanted: dict[str, list[sympy.Expr]] = defaultdict(list)
        tensors = self.layer.tensor_map
        for op in reversed(self.layer.ops):
            shares = set(wanted.get(op.output, [sympy.Integer(1)]))
            if sympy.Integer(1) in shares:   # one reader reads every row
                shares = {sympy.Integer(1)}
            if len(shares) > 1:
                raise _refuse(op, f"later ops read different shares of the rows of "
                                  f"{op.output!r} ({', '.join(sorted(map(str, shares)))})",
                              "read the rows through one lookup")
            phi = shares.pop()
            live[op.output] = phi
            out = self._out_letters(op)
            extents = op.dims()
            for term in _terms(op):
                for f in term.factors:
                    axes = self.rows.get(f.tensor, ())
                    if not axes or tensors[f.tensor].role == "index":  # ids: never padding
                        continue
                    letters = [f.indices[a] for a in axes]
                    det = set().union(*(self._determining(op, term, x) for x in letters))
                    if det == set(letters):
                        if det != out and phi != 1:
                            raise _refuse(op, f"{op.statement()!r} reads rows of {f.tensor!r} "
                                              f"other than the live rows of {op.output!r}")
                        wanted[f.tensor].append(phi if det == out else sympy.Integer(1))
                        continue
                    if phi != 1 and not out <= det:
                        raise _refuse(op, f"{op.statement()!r} looks up rows of {f.tensor!r} "
                                          f"by letters other than {op.output!r}'s rows")
                    rows = sympy.Mul(*(tensors[f.tensor].shape[a] for a in axes))
                    if self._sub(rows - self.layer.tokens) == 0:
                        # one row per token: reading some of them selects tokens (a
                        # Mixture-of-Depths router's top C), it leaves none as padding
                        wanted[f.tensor].append(sympy.Integer(1))
                        continue
                    entries = _size(det, extents, bounds_of(term)) * phi
                    wanted[f.tensor].append(self._fraction(op, f.tensor, entries / rows))
        return live

    def reads(self) -> Iterator[tuple[str, sympy.Expr, bool]]:
        """(parameter, elements one token reads, whether the product is dense)
        for every product a parameter takes part in, every copy counted."""
        for _, name, read, dense in self.reads_by_op():
            yield name, read, dense

    def reads_by_op(self) -> Iterator[tuple[int, str, sympy.Expr, bool]]:
        """:meth:`reads`, each with the position of the op that reads."""
        tensors = self.layer.tensor_map
        for k, op in enumerate(self.layer.ops):
            phi, out = self.live[op.output], self._out_letters(op)
            extents = op.dims()
            for term in _terms(op):
                # a scatter's output rows are the rows its index's letters run over
                rows = self._row_letters(op, term) | out
                rows = (rows - set(_scattered(term))).union(*_scattered(term).values())
                conditions = bounds_of(term)
                for f in term.factors:
                    if f.tensor not in tensors or not tensors[f.tensor].is_param:
                        continue
                    along = set()  # letters the parameter is read along, per row
                    for x in f.indices:
                        if any(g.is_shift and g.indices[0] == x for g in term.operands):
                            raise _refuse(op, f"{f.tensor!r} is read through a shifted index")
                        along |= self._determining(op, term, x) - rows
                    size = _size(rows, extents, conditions)
                    per_row = quotient(_size(rows | along, extents, conditions), size)
                    live_rows = self._sub(size * phi)
                    per_token = exact_quotient(live_rows, self.tokens)
                    if per_token is None and exact_quotient(self.tokens, live_rows) is not None:
                        per_token = sympy.Integer(1)  # rows shared by tokens: one each
                    elif per_token is None:
                        per_token = _fraction_of_tokens(op, live_rows, self.tokens)
                    # in the declared dims, as the totals are (defined dims unsubstituted)
                    read = sympy.expand(per_token * per_row * self.layer.copies(op.output))
                    if monomials(self._sub(read), negative=True) is None:
                        raise _refuse(op, f"{f.tensor!r} is read {self._sub(read)} times "
                                          "per token")
                    yield k, f.tensor, read, _is_dense_term(term)


def _scattered(term: Einsum) -> dict[str, set[str]]:
    """The output letters a scatter writes through a lookup (``v`` of
    ``Z[b, ts[b,c], d] += ...``), each with the index letters that choose it."""
    return {f.indices[0]: set(f.indices[1:]) for f in term.operands
            if f.is_select and f.indices[0] in term.output.indices}


def _fraction_of_tokens(op: object, live_rows: sympy.Expr, tokens: sympy.Expr) -> sympy.Expr:
    """Rows that are a fraction of the tokens, a ratio of products of dims
    (the ``B C`` tokens a Mixture-of-Depths block routes, of ``B S``): each
    token reads that fraction of a row's parameters, ``C/S``, on average.
    Anything else is refused."""
    ratio = sympy.cancel(live_rows / tokens)
    num, den = sympy.fraction(ratio)
    if len(monomials(sympy.expand(num)) or ()) == 1 and len(monomials(sympy.expand(den)) or ()) == 1:
        return ratio
    raise _refuse(op, f"the {live_rows} rows of {getattr(op, 'statement')()!r} are not a "
                      f"multiple, a divisor or a fraction (a ratio of products of dims) of the "
                      f"{tokens} tokens")


def live_fractions(layer: Layer) -> dict[str, sympy.Expr]:
    """The live fraction of the token rows of each op's output (``1/c`` for
    the expert slots of a capacity factor ``c``; 1 for every op whose rows
    all carry a token); empty without ``tokens:``."""
    if layer.tokens is None:
        return {}
    return {name: sympy.expand(substitute(phi, layer.substitutions))
            for name, phi in _TokenRows(layer).live.items()}


def param_counts(layer: Layer, trainable: sympy.Expr, unit: Unit = "FLOPs") -> ParamCounts:
    classes = tuple((t.name, param_class(layer, t.name)) for t in layer.params)
    tensors = layer.tensor_map
    by = {k: sympy.Integer(0) for k in CLASSES}
    for name, kind in classes:
        by[kind] += tensors[name].elements * layer.copies(name)
    total = sympy.expand(sum(by.values(), sympy.Integer(0)))
    by_class = tuple((k, sympy.expand(v)) for k, v in by.items())
    if layer.tokens is None:
        return ParamCounts(total, trainable, by_class, classes, total, by["dense"], None)
    kinds = dict(classes)
    read = active_dense = sympy.Integer(0)
    for name, elements, dense in _TokenRows(layer).reads():
        read += elements
        if dense and kinds[name] == "dense":
            active_dense += elements
    active = active_dense + by["lookup"] + by["elementwise"]
    return ParamCounts(total, trainable, by_class, classes, sympy.expand(active),
                       sympy.expand(active_dense), sympy.expand(read))
