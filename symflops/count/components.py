"""The front table: a layer's costs split into its components, one row each.

A row is one copy of a component (``components:`` in the declaration,
:class:`symflops.core.ir.Component`) with its ``repeat``, the copies of its
ops (the repeats of the blocks they lie in).  Every op, rule, parameter and
saved tensor of the layer is counted in exactly one row:

* an op: in the component that names it; an op no component names that only
  feeds one op of its own statement (a norm's ``Xn_hat`` feeds ``Xn``) goes
  with that op; any other op gets a row of its own, named by its output
  (kind ``"op"``), so nothing is dropped;
* a backward rule: in the row of the op it differentiates
  (``Derivation.rules[i].op``); the adds that sum several rules into one
  gradient, in the row of each rule after the first;
* a parameter shared by a repeated block's copies (``shared:``) counts in
  one copy's parameters and once in the totals (so ``edge`` differs by
  ``(1 - repeat)·|W|`` there); the first copy's contribution to its one
  gradient is no addition, each later copy's is one;
* a parameter: in the first row (in layer order) whose ops read it; a
  parameter read by ops of several rows is listed in :attr:`ComponentRow.shared`
  (a footnote); one no op reads gets a row of its own (kind ``"parameter"``);
* a saved tensor: in the row of the rule that reads it most often (the rule
  whose runs are the tensor's copies, :func:`symflops.count.cost.saved_copies`).

Invariant (checked by :func:`component_table`, a mismatch is a bug): the
rows' exact totals (``totals``: every copy) sum to the layer's totals in
:class:`~symflops.count.cost.Costs`.  The per-copy fields count one whole
copy; ``repeat`` × per copy differs from ``totals`` only at the ends of a
repeated block (the first copy computes no gradient for its input when
nothing before it needs one), and :meth:`ComponentRow.edge` says by how much.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Literal, Mapping, Sequence

import sympy

from ..core.errors import SymflopsError
from ..core.ir import Layer, dim_symbol
from ..core.records import Derivation, Rule
from .cost import Costs, SavedTensor

#: ``component``: declared in ``components:``; ``op``: an op no component
#: names; ``parameter``: a parameter no op reads.
RowKind = Literal["component", "op", "parameter"]


@dataclass(frozen=True)
class Counts:
    """What a row counts: parameter elements, FLOPs (matrix products and
    elementwise, forward and backward) and saved activations (elements and
    bytes at the precision policy)."""

    params: sympy.Expr
    forward: sympy.Expr
    backward: sympy.Expr
    elementwise_forward: sympy.Expr
    elementwise_backward: sympy.Expr
    saved_elements: sympy.Expr
    saved_bytes: sympy.Expr

    @property
    def training(self) -> sympy.Expr:
        """Matrix-product FLOPs of a training step, forward plus backward."""
        return sympy.expand(self.forward + self.backward)

    def minus(self, other: "Counts", times: sympy.Expr = sympy.Integer(1)) -> "Counts":
        return Counts(*(sympy.expand(getattr(self, f.name) - times * getattr(other, f.name))
                        for f in fields(Counts)))


ZERO = Counts(*(sympy.Integer(0),) * len(fields(Counts)))


@dataclass(frozen=True)
class SharedParam:
    """A parameter counted in one row and read by the ops of others too (a
    tied embedding): a footnote of the table."""

    tensor: str
    counted_in: str
    also_read_by: tuple[str, ...]


@dataclass(frozen=True)
class ComponentRow(Counts):
    """One row: the fields of :class:`Counts` count one whole copy;
    ``totals`` counts all ``repeat`` copies, exact."""

    name: str
    kind: RowKind
    repeat: sympy.Expr
    ops: tuple[str, ...]
    param_tensors: tuple[str, ...]
    saved_tensors: tuple[str, ...]
    totals: Counts
    shared: tuple[SharedParam, ...] = ()
    #: parameters the row's copies share (``shared:``): in one copy's count, and once in ``totals``
    tied: tuple[str, ...] = ()
    tied_params: sympy.Expr = sympy.Integer(0)   # their elements

    @property
    def per_copy(self) -> Counts:
        return Counts(*(getattr(self, f.name) for f in fields(Counts)))

    def edge(self) -> Counts:
        """``totals`` less ``repeat`` whole copies: zero but where an end copy
        of a repeated block does less (or keeps less) than the others."""
        return self.totals.minus(self.per_copy, self.repeat)


@dataclass(frozen=True)
class ComponentTable:
    rows: tuple[ComponentRow, ...]
    total: Counts
    #: defined dims and their formulas, substituted before values are given
    substitutions: tuple[tuple[sympy.Symbol, sympy.Expr], ...] = ()


# ------------------------------------------------------------ assignment --


def op_rows(layer: Layer) -> tuple[tuple[str, RowKind, tuple[int, ...]], ...]:
    """Each row's name, kind and the indices of its ops in ``layer.ops``, in
    the order of their first op (the order the layer runs them)."""
    named = {op: c.name for c in layer.components for op in c.ops}
    readers: dict[str, list[int]] = {}
    for k, op in enumerate(layer.ops):
        for name in dict.fromkeys(op.inputs):
            readers.setdefault(name, []).append(k)
    row_of: dict[int, tuple[str, RowKind]] = {}
    for k in reversed(range(len(layer.ops))):  # consumers come later: decided first
        op = layer.ops[k]
        if op.output in named:
            row_of[k] = (named[op.output], "component")
            continue
        feeds = readers.get(op.output, [])
        span = getattr(op, "span", None)
        if (len(feeds) == 1 and span is not None
                and getattr(layer.ops[feeds[0]], "span", None) == span):
            row_of[k] = row_of[feeds[0]]  # a part of the statement that writes feeds[0]
        else:
            row_of[k] = (op.output, "op")
    # A component of a block and one of the includer may share a name (norms
    # x L, norms x 1): they are rows of their own, as their copies differ.
    groups: dict[tuple[str, RowKind, sympy.Expr], list[int]] = {}
    for k in sorted(row_of):
        groups.setdefault((*row_of[k], layer.copies(layer.ops[k].output)), []).append(k)
    return tuple((name, kind, tuple(ks)) for (name, kind, _), ks in groups.items())


def _sum(items: Sequence[tuple[sympy.Expr, sympy.Expr]]) -> tuple[sympy.Expr, sympy.Expr]:
    """(one copy of each item, all copies) of (value, copies) pairs."""
    one = sympy.expand(sum((v for v, _ in items), sympy.Integer(0)))
    return one, sympy.expand(sum((v * n for v, n in items), sympy.Integer(0)))


def _param_owners(layer: Layer, groups: Sequence[tuple[str, RowKind, tuple[int, ...]]]
                  ) -> dict[str, tuple[int | None, tuple[int, ...]]]:
    """Each parameter's row (the first, in layer order, whose ops read it;
    None when no op does) and the other rows whose ops read it."""
    readers: dict[str, list[int]] = {}
    for r, (_, _, ks) in enumerate(groups):
        for k in ks:
            for name in layer.ops[k].inputs:
                if r not in readers.setdefault(name, []):
                    readers[name].append(r)
    return {t.name: ((readers[t.name][0], tuple(readers[t.name][1:])) if t.name in readers
                     else (None, ())) for t in layer.params}


def _saved_reader(derivation: Derivation, costs: Costs, s: SavedTensor) -> Rule:
    """The rule a saved tensor is counted with: the first whose runs are the
    tensor's copies (it is kept for that rule), else the first of the
    deepest blocks' rules that read it."""
    layer = derivation.layer
    runs = [(r, n) for r, n in zip(derivation.rules, costs.backward_copies) if s.name in r.reads]
    rule = next((r for r, n in runs if sympy.expand(n - s.copies) == 0), None)
    if rule is None:
        rule = max(runs, key=lambda rn: len(layer.blocks_of(layer.ops[rn[0].op].output)))[0]
    return rule


def component_table(derivation: Derivation, costs: Costs) -> ComponentTable:
    """The layer's costs by component (see the module's invariants)."""
    layer = derivation.layer
    p = costs.precision
    tensors = layer.tensor_map
    groups = op_rows(layer)
    row_of_op = {k: r for r, (_, _, ks) in enumerate(groups) for k in ks}
    n_rows = len(groups)
    Items = list[tuple[sympy.Expr, sympy.Expr]]
    buckets: list[dict[str, Items]] = [
        {f.name: [] for f in fields(Counts)} for _ in range(n_rows)]
    for k, (c, n) in enumerate(zip(costs.forward, costs.forward_copies)):
        buckets[row_of_op[k]]["forward"].append((c.flops, n))
        buckets[row_of_op[k]]["elementwise_forward"].append((c.elementwise, n))
    first_runs: dict[str, sympy.Expr] = {}
    for r, c, n in zip(derivation.rules, costs.backward, costs.backward_copies):
        b = buckets[row_of_op[r.op]]
        b["backward"].append((c.flops, n))
        b["elementwise_backward"].append((c.elementwise, n))
        if layer.sharing(r.wrt):  # each copy adds into the one gradient but the first
            b["elementwise_backward"].append(
                (tensors[r.wrt].elements,
                 n if r.wrt in first_runs else sympy.expand(n - layer.copies(r.wrt))))
            first_runs.setdefault(r.wrt, n)
        elif r.wrt in first_runs:  # one add into the gradient summed so far
            b["elementwise_backward"].append((tensors[r.wrt].elements, first_runs[r.wrt]))
        else:
            first_runs[r.wrt] = n

    owners = _param_owners(layer, groups)
    # a parameter no op reads: a row of its own, never dropped
    extra = tuple((t, "parameter", ()) for t, (r, _) in owners.items() if r is None)
    groups = (*groups, *extra)
    buckets += [{f.name: [] for f in fields(Counts)} for _ in extra]
    own_row = {t: n_rows + i for i, (t, _, _) in enumerate(extra)}
    param_rows: list[list[str]] = [[] for _ in groups]
    shared: list[list[SharedParam]] = [[] for _ in groups]
    tied: list[list[str]] = [[] for _ in groups]
    for t in layer.params:
        first, others = owners[t.name]
        r = own_row[t.name] if first is None else first
        buckets[r]["params"].append((t.elements, layer.copies(t.name)))
        if layer.sharing(t.name):
            tied[r].append(t.name)
        param_rows[r].append(t.name)
        if others:
            shared[r].append(SharedParam(t.name, groups[r][0], tuple(groups[o][0] for o in others)))

    saved_rows: list[list[str]] = [[] for _ in groups]
    for s in costs.saved:
        row = row_of_op[_saved_reader(derivation, costs, s).op]
        width = s.element_bytes(p)
        buckets[row]["saved_elements"].append((s.elements, s.copies))
        buckets[row]["saved_bytes"].append((s.elements * width, s.copies))
        saved_rows[row].append(s.name)

    rows = []
    for r, (name, kind, ks) in enumerate(groups):
        one, every = {}, {}
        for f in fields(Counts):
            one[f.name], every[f.name] = _sum(buckets[r][f.name])
        repeat = (layer.copies(layer.ops[ks[0]].output) if ks
                  else layer.copies(param_rows[r][0]))
        rows.append(ComponentRow(**one, name=name, kind=kind, repeat=repeat,
                                 ops=tuple(layer.ops[k].output for k in ks),
                                 param_tensors=tuple(param_rows[r]),
                                 saved_tensors=tuple(saved_rows[r]), totals=Counts(**every),
                                 shared=tuple(shared[r]), tied=tuple(tied[r]),
                                 tied_params=sympy.expand(sum((tensors[n].elements
                                                               for n in tied[r]),
                                                              sympy.Integer(0)))))
    total = _check(rows, costs)
    return ComponentTable(tuple(rows), total, tuple(layer.substitutions.items()))


def _check(rows: Sequence[ComponentRow], costs: Costs) -> Counts:
    """The layer's totals, which the rows must sum to (else a bug: exit 70)."""
    mem = costs.memory()
    total = Counts(costs.params, costs.flops_forward, costs.flops_backward,
                   costs.elementwise_forward, costs.elementwise_backward, costs.activations,
                   mem["activation_bytes"])
    summed = ZERO
    for row in rows:
        summed = Counts(*(sympy.expand(getattr(summed, f.name) + getattr(row.totals, f.name))
                          for f in fields(Counts)))
    diff = total.minus(summed)
    wrong = [f.name for f in fields(Counts) if getattr(diff, f.name) != 0]
    if wrong:
        raise AssertionError(f"the component rows do not sum to the layer's totals in "
                             f"{', '.join(wrong)}")
    return total


# ---------------------------------------------------------------- shares --


@dataclass(frozen=True)
class RowShares:
    """A row's totals at one configuration, exact, and its fractions of the
    layer's (None where the layer's total is 0)."""

    name: str
    training_flops: sympy.Integer
    params: sympy.Integer
    activation_bytes: sympy.Integer
    training_share: sympy.Rational | None
    params_share: sympy.Rational | None
    activation_share: sympy.Rational | None


def _at(expr: sympy.Expr, subs: Mapping[sympy.Symbol, sympy.Expr],
        values: Mapping[sympy.Symbol, sympy.Integer]) -> sympy.Rational:
    value = sympy.sympify(expr).xreplace(subs).xreplace(values)
    value = sympy.expand(value)
    if not value.is_Rational:
        missing = sorted(str(s) for s in value.free_symbols)
        raise SymflopsError(f"no value for {', '.join(missing) or 'a dim'} at this configuration",
                            hint="give every dim a value: " + ", ".join(missing))
    return value


def shares(table: ComponentTable, values: Mapping[str, int]) -> tuple[RowShares, ...]:
    """Each row's totals at ``values`` (dim name -> positive integer) and its
    exact share of the layer's training FLOPs (matrix products, forward plus
    backward), parameters and saved activation bytes."""
    subs = dict(table.substitutions)
    for _ in range(len(subs)):  # a definition may use another defined dim
        subs = {k: v.xreplace(subs) for k, v in subs.items()}
    vals = {dim_symbol(k): sympy.Integer(v) for k, v in values.items()}
    whole = [_at(e, subs, vals) for e in (table.total.training, table.total.params,
                                          table.total.saved_bytes)]

    def frac(part: sympy.Rational, of: sympy.Rational) -> sympy.Rational | None:
        return None if of == 0 else sympy.Rational(part, of)

    out = []
    for row in table.rows:
        mine = [_at(e, subs, vals) for e in (row.totals.training, row.totals.params,
                                             row.totals.saved_bytes)]
        out.append(RowShares(row.name, *mine, *(frac(a, b) for a, b in zip(mine, whole))))
    return tuple(out)


def percent(q: sympy.Rational) -> str:
    """``q`` as a percentage with one decimal, rounded half up: ``'37.5%'``."""
    tenths = sympy.floor(sympy.Rational(q) * 1000 + sympy.Rational(1, 2))
    return f"{int(tenths) // 10}.{int(tenths) % 10}%"
