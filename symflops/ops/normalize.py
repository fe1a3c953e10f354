"""Ops that normalise over named indices: softmax, LayerNorm, RMSNorm.

``P[s,t] = softmax_t(A[s,t])``, ``N[b,d] = layernorm_d(X[b,d])``,
``R[b,d] = rmsnorm_d(X[b,d])``: each output element depends on a whole row of
the input, so these are not einsums.  Over several letters at once,
``N[b,c,p] = layernorm_{c,p}(X[b,c,p])``, a row is every element with the
other letters fixed (``C*P`` of them): the statistics are taken over all of
them jointly (GroupNorm, InstanceNorm and a 2-D BatchNorm are such norms), and
softmax normalises over the joint set; ``rstd`` is one per row.  This module keeps everything one such op
knows in one class: its forward pass (NumPy and PyTorch), its backward rule
(derived by SymPy in :mod:`symflops.ops.reductions`, never typed in), its cost,
and the auxiliary per-row tensor it saves (the reciprocal standard deviation
``rstd_<out>`` of the norms).  A learnable gain and bias are ordinary
elementwise products and adds around the op (``layernorm_d(X[b,d]) * g[d] + beta[d]``).

Conventions: softmax saves its output; LayerNorm saves its output and
``rstd`` (the memory-efficient convention, whose rule is the textbook
``rstd (dN - mean(dN) - N mean(dN N))``); RMSNorm saves its input and
``rstd``, as fused kernels do.  Forward cost per element, counted from the
formula as written: softmax 3 (exp, add into the row sum, divide), LayerNorm 5
(add into the mean, subtract it, square, add into the variance, multiply by
rstd), RMSNorm 3 (square, add into the mean square, multiply by rstd); per
row, the norms add 2 (add eps, reciprocal square root).  The backward cost is
counted from the derived rule like any einsum.  All of it is elementwise
work, apart from the matmul-type ``flops``.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from ..core.lazy import numpy as np
import sympy

from ..core.records import OpCost
from ..core.records import Rule
from ..core.errors import Span, SymflopsError
from ..core.factors import plus
from .conditions import check_domain, condition_factor
from ..core.ir import Einsum, Factor, Order
from .base import Choice, Scope, Unit
from .derivation import ReductionOp, reduction_rule
from .reductions import Reduction, layernorm_rule, rmsnorm_rule, softmax_rule

KINDS = ("softmax", "layernorm", "rmsnorm")
PER_ELEMENT = {"softmax": 3, "layernorm": 5, "rmsnorm": 3}
PER_ROW = {"softmax": 0, "layernorm": 2, "rmsnorm": 2}
EPS = 1e-5
LATEX = {"softmax": r"\operatorname{softmax}", "layernorm": r"\operatorname{layernorm}",
         "rmsnorm": r"\operatorname{rmsnorm}"}


@dataclass(frozen=True)
class Normalize(ReductionOp):
    """``out = kind_index(inp)``; ``aux`` are the per-row tensors it also
    produces (``rstd`` for the norms).  ``index`` lists the reduced letters
    (one for ``softmax_t``, several for ``layernorm_{c,p}``), distinct, each a
    letter of ``inp``."""

    kind: str
    out: Factor
    inp: Factor
    index: tuple[str, ...]
    index_dims: tuple[tuple[str, sympy.Expr], ...]
    text: str = ""
    span: Span | None = field(default=None, compare=False)
    #: indicator factors of a where-clause (softmax only): outside the domain
    #: the scores count as -infinity, so the probabilities there are 0.
    conditions: tuple[Factor, ...] = ()

    @property
    def inputs(self) -> tuple[str, ...]:
        return (self.inp.tensor,)

    @property
    def statistics(self) -> int:  # type: ignore[override]
        """Row statistics summed across devices when the reduced letter is
        split: a layernorm's mean and mean square, an RMSNorm's mean square,
        softmax's sum of exponentials."""
        return 2 if self.kind == "layernorm" else 1

    @property
    def rstd(self) -> str:
        return f"rstd_{self.out.tensor}"

    @property
    def aux(self) -> tuple[Factor, ...]:
        if self.kind == "softmax":
            return ()
        return (Factor(self.rstd, tuple(i for i in self.out.indices if i not in self.index)),)

    @property
    def aux_description(self) -> str:
        return f"reciprocal standard deviation saved by {self.kind}"

    @property
    def name(self) -> str:
        """The call as written: ``softmax_t``, ``layernorm_{c,p}``."""
        letters = self.index[0] if len(self.index) == 1 else "{" + ",".join(self.index) + "}"
        return f"{self.kind}_{letters}"

    def statement(self) -> str:
        where = ", ".join(f.condition() for f in self.conditions)
        return f"{self.out} = {self.name}({self.inp})" + (f" where {where}" if where else "")

    def reduction(self) -> Reduction:
        """The SymPy derivation of the backward rule, in this op's names."""
        dim = tuple(self.dims()[i] for i in self.index)
        if self.kind == "softmax":
            return softmax_rule(self.out.tensor, self.inp.tensor, self.out.indices, self.index, dim)
        if self.kind == "layernorm":
            return layernorm_rule(self.out.tensor, self.inp.tensor, self.out.indices, self.index,
                                  dim, rstd=self.rstd, mean=f"mean_{self.out.tensor}")
        return rmsnorm_rule(self.out.tensor, self.inp.tensor, self.out.indices, self.index, dim,
                            rstd=self.rstd)

    def shown(self) -> Reduction:
        """The derivation as the sheet shows it: a masked softmax's sums run
        over its domain (``u <= s``) and each expression of elements is stated
        on the domain, 0 outside (see :func:`on_domain`).  The rule itself is
        the same either way: ``P`` is 0 outside the domain."""
        red = self.reduction()
        if not self.conditions:
            return red
        stages = tuple((name, on_domain(value, self.index[0], self.conditions)
                        if name in ("forward", "derivative") else value)
                       for name, value in red.stages)
        return dataclasses.replace(red, stages=stages)

    def formula(self) -> sympy.Expr:
        return self.shown().stage("forward")  # type: ignore[return-value]

    def reads(self) -> tuple[Einsum, ...]:
        """It reads its input row by row, inside its where-clause."""
        return (Einsum(self.out, (self.inp, *self.conditions)),)

    def rules(self, number: int, targets: Sequence[str] = ()) -> tuple[Rule, ...]:
        """The rule for its one differentiable input (``targets`` is that input)."""
        red = self.reduction()
        einsums = tuple(self._restricted(e) for e in red.einsums())
        return (reduction_rule(red, self.inp.tensor, number, einsums, self.dims()),)

    def _restricted(self, e: Einsum) -> Einsum:
        """A rule term with the where-clause on every pair of its letters that
        the clause names (the summed letter ``u`` of ``sum_u P[s,u] dP[s,u]``
        ranges over the domain too)."""
        extra = []
        for c in self.conditions:
            a, b = c.indices
            letters = {i for f in (e.output, *e.operands) for i in f.indices}
            if a in letters and b in letters:
                extra.append(c)
            # the reduced index renamed to a fresh summed letter
            fresh = [i for i in e.summed if i not in self.out.indices]
            for u in fresh:
                if (a,) == self.index and b in letters:
                    extra.append(Factor(c.tensor, (u, b), fn=c.fn))
                elif (b,) == self.index and a in letters:
                    extra.append(Factor(c.tensor, (a, u), fn=c.fn))
        return Einsum(e.output, (*e.operands, *extra), e.coefficient) if extra else e

    def cost(self, unit: Unit, order: Order = "written", sizes: tuple[tuple[str, int], ...] = (),
             choice: Choice = "declared") -> OpCost:
        """Per element and per row of the formula (no products to order)."""
        from .einsum.orders import bounds_of, size

        elements = size(set(self.out.indices), self.dims(),
                        bounds_of(Einsum(self.out, self.conditions)))
        rows = sympy.Mul(*(self.dims()[i] for i in self.out.indices if i not in self.index))
        return OpCost(sympy.Integer(0),
                      sympy.expand(PER_ELEMENT[self.kind] * elements + PER_ROW[self.kind] * rows))

    def run(self, values: Mapping[str, np.ndarray], extents: Mapping[str, int] | None = None,
            dims: Mapping[str, int] | None = None) -> dict[str, np.ndarray]:
        """The forward pass with NumPy: the output and the auxiliary tensors."""
        x = values[self.inp.tensor]
        axis = self._axes()
        # The output's letters may be in another order than the input's.
        order = [self.inp.indices.index(i) for i in self.out.indices]
        if self.kind == "softmax":
            keep = self._mask(np.shape(x), dims)
            x = np.where(keep, x, -np.inf)
            e = np.where(keep, np.exp(x - x.max(axis=axis, keepdims=True)), 0.0)
            return {self.output: np.transpose(e / e.sum(axis=axis, keepdims=True), order)}
        centred = x - x.mean(axis=axis, keepdims=True) if self.kind == "layernorm" else x
        r = 1.0 / np.sqrt((centred ** 2).mean(axis=axis, keepdims=True) + EPS)
        return {self.output: np.transpose(centred * r, order),
                self.rstd: np.transpose(np.squeeze(r, axis=axis), self._row_order())}

    def torch(self, torch: Any, values: Mapping[str, Any],
              dims: Mapping[str, int] | None = None) -> dict[str, Any]:
        """The same with PyTorch's own kernels, for the verifier."""
        x = values[self.inp.tensor]
        axes = self._axes()
        order = [self.inp.indices.index(i) for i in self.out.indices]
        # The reduced axes last, in the order listed: a row is the trailing block.
        last = tuple(range(x.dim() - len(axes), x.dim()))
        if self.kind == "softmax":
            keep = torch.as_tensor(self._mask(tuple(x.shape), dims), device=x.device)
            moved = x.masked_fill(~keep, float("-inf")).movedim(axes, last)
            shape = tuple(moved.shape[moved.dim() - len(axes):])
            y = torch.softmax(moved.flatten(start_dim=moved.dim() - len(axes)), dim=-1)
            return {self.output: y.unflatten(-1, shape).movedim(last, axes).permute(order)}
        moved = x.movedim(axes, last)
        shape = tuple(moved.shape[moved.dim() - len(axes):])
        trailing = tuple(range(-len(axes), 0))
        if self.kind == "layernorm":
            y = torch.nn.functional.layer_norm(moved, shape, eps=EPS)
            var = moved.var(dim=trailing, unbiased=False)
        else:
            var = (moved ** 2).mean(dim=trailing)
            y = moved * torch.rsqrt(var.reshape(var.shape + (1,) * len(axes)) + EPS)
        r = torch.rsqrt(var + EPS)
        return {self.output: y.movedim(last, axes).permute(order), self.rstd: r.permute(self._row_order())}

    def _axes(self) -> tuple[int, ...]:
        """The input's axes of the reduced letters, in the order listed."""
        return tuple(self.inp.indices.index(i) for i in self.index)

    def _mask(self, shape: tuple[int, ...], dims: Mapping[str, int] | None = None) -> np.ndarray:
        """True inside the where-clause's domain, over the input's axes (``dims``
        gives the values of the dims a window's offset names)."""
        from .einsum.numeric import indicator

        keep = np.ones(shape, dtype=bool)
        extents = dict(zip(self.inp.indices, shape))
        for c in self.conditions:
            grid = indicator(c, {}, extents, dims).astype(bool)  # over (a, b)
            axes = [self.inp.indices.index(i) for i in c.indices]
            full = grid.reshape([extents[i] if k in axes else 1
                                 for k, i in enumerate(self.inp.indices)]) if axes == sorted(axes) \
                else grid.T.reshape([extents[i] if k in axes else 1
                                     for k, i in enumerate(self.inp.indices)])
            keep = keep & full
        return keep

    def _row_order(self) -> list[int]:
        """Axis order taking the input's row letters to the auxiliary tensor's."""
        rows = [i for i in self.inp.indices if i not in self.index]
        return [rows.index(i) for i in self.aux[0].indices]

    def latex(self, m: Any) -> str:
        """``P_{st} = \\operatorname{softmax}_t(A_{st})``; ``m.ix`` prints an
        indexed name, and a condition as an Iverson bracket."""
        where = r",\ ".join(m.ix(c) for c in self.conditions)
        return (f"{m.ix(self.out)} = {LATEX[self.kind]}_{{{','.join(self.index)}}}({m.ix(self.inp)})"
                + (rf",\ \text{{where }} {where}" if where else ""))


_NAME = re.compile(r"(softmax|layernorm|rmsnorm)_([A-Za-z_][A-Za-z0-9_]*|\{[^{}]*\})\Z")


def _lower(call: Any, out: Factor, scope: Scope) -> Normalize:
    """``softmax_t(A[s,t])``, ``layernorm_{c,p}(X[b,c,p])`` and the like,
    checked: each reduced letter is one of the tensor's letters (the grammar
    has made them distinct), and no second argument."""
    at = scope.at
    m = _NAME.match(call.name)
    assert m is not None
    kind = m.group(1)
    # A letter of the name (softmax_t) points at the call; a braced one at itself.
    index = tuple((r.letter, at(r.column)) for r in call.reduced) or ((m.group(2), at(call.column)),)
    if call.argument is not None:
        raise SymflopsError(f"{call.name} takes one tensor", at(call.argument.column),
                            f"write {call.name}({call.ref.name}[...])")
    for letter, where in index:
        if letter not in call.ref.indices:
            raise SymflopsError(
                f"{kind} over {letter!r}, an index {call.ref.name} does not have", where,
                f"normalise over one of {call.ref.name}'s indices: "
                + ", ".join(f"{kind}_{i}" for i in dict.fromkeys(call.ref.indices))
                + (f", or several, e.g. {kind}_{{{','.join(call.ref.indices[-2:])}}}"
                   if len(index) > 1 else ""))
    if len(set(call.ref.indices)) != len(call.ref.indices):
        raise SymflopsError(f"{call.name} of a diagonal is not supported", at(call.column),
                            "give each axis its own letter")
    letters = tuple(dict.fromkeys(call.ref.indices))
    return Normalize(kind, out, Factor(call.ref.name, call.ref.indices, at(call.ref.column)),
                     tuple(letter for letter, _ in index),
                     tuple((i, scope.extents[i]) for i in letters), scope.text, scope.span)


def _check_rows(call: Any, op: Normalize, scope: Scope) -> Normalize:
    """Refuse a normalisation over every letter of its tensor: its statistics
    (the normaliser, the mean, rstd) would be one number for the whole
    tensor, which the derivation indexes by a row."""
    letters = tuple(dict.fromkeys(call.ref.indices))
    if any(i not in op.index for i in letters):
        return op
    row = next(c for c in "rabcdefghijklmnopqstuvwxyz" if c not in letters)
    rows = ",".join((row,) + letters)
    raise SymflopsError(f"{call.name} of a tensor with no other index is not supported",
                        scope.at(call.column), f"give {call.ref.name} a row letter over a dim "
                        f"of extent 1, {call.name}({call.ref.name}[{rows}]), with {row!r} on "
                        "the output too")


class NormalizeCall:
    """The statement forms of the normalisations: ``P[s,t] = softmax_t(A[s,t])``
    (a softmax may take a where-clause, a causal mask) as a whole op, or
    ``layernorm_d(X[b,d]) * g[d] + beta[d]`` inside a product."""

    usage = "softmax_i, layernorm_i, rmsnorm_i over an index i"

    def claims(self, name: str) -> bool:
        return _NAME.match(name) is not None

    def whole(self, call: Any, statement: Any, out: Factor, scope: Scope) -> Normalize | None:
        if statement.terms[0].negative or call.ref.indices != statement.lhs.indices:
            return None
        op = _lower(call, out, scope)
        if not statement.where:
            return _check_rows(call, op, scope)
        where = statement.where
        if len(op.index) > 1:
            raise SymflopsError(f"a where-clause on {call.name}(...) over several indices is not "
                                "supported", scope.at(where[0].column),
                                "mask a softmax over one index, e.g. softmax_t(A[s,t]) where t <= s")
        if op.kind != "softmax":
            raise SymflopsError(f"a where-clause on {call.name}(...) is not supported",
                                scope.at(where[0].column),
                                "only softmax takes a domain (a causal mask)")
        if any(c.left not in call.ref.indices or c.right not in call.ref.indices for c in where):
            raise SymflopsError("the where-clause names a letter the softmax's input "
                                "does not have", scope.at(where[0].column),
                                f"use letters of {call.ref.name}[{','.join(call.ref.indices)}]")
        _check_rows(call, op, scope)
        conditions = tuple(condition_factor(c, scope) for c in where)
        check_domain(conditions, scope, where)
        return dataclasses.replace(op, conditions=conditions)

    def inline(self, call: Any, out: Factor, scope: Scope) -> Normalize:
        return _check_rows(call, _lower(call, out, scope), scope)


NORMALIZE = NormalizeCall()


#: The bounds a condition ``t OP x`` puts on the reduced letter ``t``, as
#: (lower, upper) offsets from ``x``; None where that side stays the axis's.
_BOUNDS: dict[str, tuple[int | None, int | None]] = {
    "<=": (None, 0), "<": (None, -1), ">=": (0, None), ">": (1, None), "==": (0, 0)}
_FLIPPED = {"<=": ">=", "<": ">", ">=": "<=", ">": "<", "==": "==", "!=": "!="}
_RELATIONS = {"<=": sympy.Le, "<": sympy.Lt, ">=": sympy.Ge, ">": sympy.Gt, "==": sympy.Eq,
              "!=": sympy.Ne}


def on_domain(expr: sympy.Expr, letter: str, conditions: Sequence[Factor]) -> sympy.Expr:
    """``expr`` (a softmax's forward or derivative element, over the full
    axis) as it reads under the where-clause ``conditions`` on ``letter``: each
    sum over the reduced letter runs over the domain only (``t <= s``: ``u``
    from 0 to ``s``), and the value is stated where the letter and its primed
    copy lie in the domain, 0 elsewhere.  A condition whose domain is not an
    interval of the letter (``!=``) keeps the full sum with the condition on
    its summand."""
    symbols = {str(x): x for x in expr.free_symbols if isinstance(x, sympy.Symbol)}
    # (relation, other letter, offset): letter OP other + offset
    norm: list[tuple[str, str, sympy.Expr]] = []
    for c in conditions:
        a, b = c.indices
        if a == letter:
            norm.append((c.relation, b, c.offset))
        elif b == letter:  # a OP letter + k  is  letter FLIPPED a - k
            norm.append((_FLIPPED[c.relation], a, -c.offset))

    def sym(name: str) -> sympy.Symbol:
        return symbols.get(name, sympy.Symbol(name, integer=True))

    def rebound(s: sympy.Sum) -> sympy.Expr:
        (u, lo, hi), *rest = s.limits
        body = s.function
        # A plain bound replaces the axis's limit (x lies on the axis); a bound with
        # an offset can pass it (s - W + 1 < 0), so it is joined to it by max/min.
        moved = [False, False]
        for op, x, k in norm:
            low, high = _BOUNDS.get(op, (None, None))
            if op not in _BOUNDS:
                body = sympy.Piecewise((body, _RELATIONS[op](u, sym(x) + k, evaluate=False)),
                                       (0, True))
            if low is not None:
                lo = sympy.Max(lo, sym(x) + k + low) if k != 0 or moved[0] else sym(x) + low
                moved[0] = True
            if high is not None:
                hi = sympy.Min(hi, sym(x) + k + high) if k != 0 or moved[1] else sym(x) + high
                moved[1] = True
        return sympy.Sum(body, (u, lo, hi), *rest)

    out = expr.replace(lambda e: isinstance(e, sympy.Sum), rebound)
    if any(k != 0 for _, _, k in norm) and _interval(norm, letter) is not None:
        # a window: each letter's domain as one interval, s - W < t <= s
        where = [sympy.Symbol(_interval(norm, t)) for t in (letter, letter + "'") if t in symbols]
    else:
        where = [_RELATIONS[op](sym(t), sym(x) + k, evaluate=False) for op, x, k in norm
                 for t in (letter, letter + "'") if t in symbols]
    return sympy.Piecewise((out, sympy.And(*where)), (0, True)) if where else out


_LATEX_RELATIONS = {"<": "<", "<=": r"\le"}


def _interval(norm: Sequence[tuple[str, str, sympy.Expr]], letter: str) -> str | None:
    """``s - W < t \\le s``: one lower and one upper bound on ``letter`` as a
    chained inequality (LaTeX, the name of a symbol that stands for it), or None."""
    lows = [(op, x, k) for op, x, k in norm if op in (">", ">=")]
    highs = [(op, x, k) for op, x, k in norm if op in ("<", "<=")]
    if len(lows) != 1 or len(highs) != 1 or len(norm) != 2:
        return None
    (lo, a, ka), (hi, b, kb) = lows[0], highs[0]
    flipped = {">": "<", ">=": "<="}
    return (f"{plus(a, ka)} {_LATEX_RELATIONS[flipped[lo]]} {letter} "
            f"{_LATEX_RELATIONS[hi]} {plus(b, kb)}")
