"""The mean over named letters: ``Y[b,c] = mean_p(X[b,c,p])``, mean pooling
(a global average pool: ``mean_{i,j}`` over several letters).

``Y[b,c] = (1/P) sum_u X[b,c,u]``: the reduced letters leave the output,
which has the input's other letters in any order.  The backward rule is
derived by SymPy with the machinery of :mod:`symflops.ops.derivation` (the
forward formula differentiated, the sums it creates evaluated, the deltas
contracted): ``dX[b,c,p] = dY[b,c] / P``.  It reads no forward tensor, so
nothing is saved.

Cost, counted from the formula as written, all elementwise (a lone
reduction, no matmul-type ``flops``): per row of ``N`` elements (``N`` the
product of the reduced letters' extents) ``N - 1`` adds and one multiply by
``1/N``, so ``N`` per row, ``B·C·P`` for ``Y[b,c] = mean_p(X[b,c,p])``.  (The
same reduction written as the einsum ``Y[b,c] = X[b,c,p] / P`` is counted by
the einsum convention instead: an add per element read and a multiply per
output, ``B·C·(P + 1)``.)  The backward is counted from the derived rule like
any einsum: one multiply of ``dY`` by ``1/P`` per row, the broadcast free.

A window (average pooling ``mean_k(X[b,c,p+k])``) is refused by name.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from typing import Any, Mapping

from ..core.lazy import numpy as np
import sympy

from ..core.errors import Span, SymflopsError
from ..core.ir import Einsum, Factor, Order
from ..core.records import OpCost
from .base import Choice, Scope, Unit
from .derivation import DerivedOp, derive_reduction, fresh_letters, index_symbol
from .maximum import OverLetters, check_whole, not_inline, reduced_letters
from .reductions import Reduction, check_arguments


@functools.lru_cache(maxsize=None)
def mean_rule(out: Factor, inp: Factor, index: tuple[str, ...], dims: tuple[sympy.Expr, ...]
              ) -> Reduction:
    """``out[..] = sum over index of inp[..] / prod(dims)``, ``dims`` the reduced
    letters' extents; saves nothing."""
    ks = check_arguments(inp.indices, index, (out.tensor, inp.tensor))
    X = sympy.IndexedBase(inp.tensor, real=True)
    taken = set(inp.indices) | set(out.indices)
    summed = []
    for i in index:
        summed.append(fresh_letters(i, taken)[0])
        taken.add(summed[-1])
    row = [index_symbol(i) for i in inp.indices]
    for k, u in zip(ks, summed):
        row[k] = index_symbol(u)
    size = sympy.Mul(*dims)
    forward = sympy.Sum(X[tuple(row)], *((index_symbol(u), 0, d - 1)
                                         for u, d in zip(summed, dims))) / size
    return derive_reduction(DerivedOp(
        name="mean", output=out, forward=forward, inp=inp, base=X, index=index,
        extents=tuple(zip(index, dims)), substitute=lambda e: e, saved=(), aux=(),
        definitions=(), dims=frozenset().union(*(d.free_symbols for d in dims)),
    ))


@dataclass(frozen=True)
class Mean(OverLetters):
    """``out = mean_index(inp)``: ``out`` has ``inp``'s letters but ``index``."""

    out: Factor
    inp: Factor
    index: tuple[str, ...]
    index_dims: tuple[tuple[str, sympy.Expr], ...]
    text: str = ""
    span: Span | None = field(default=None, compare=False)
    kind = "mean"
    aux = ()
    aux_description = ""

    def statement(self) -> str:
        return f"{self.out} = {self.called('mean')}({self.inp})"

    def reduction(self) -> Reduction:
        d = self.dims()
        return mean_rule(Factor(self.out.tensor, self.out.indices),
                         Factor(self.inp.tensor, self.inp.indices), self.index,
                         tuple(d[i] for i in self.index))

    def reads(self) -> tuple[Einsum, ...]:
        """It reads its input row by row."""
        return (Einsum(self.out, (self.inp,)),)

    def cost(self, unit: Unit, order: Order = "written", sizes: tuple[tuple[str, int], ...] = (),
             choice: Choice = "declared") -> OpCost:
        """``N - 1`` adds and one multiply per row of ``N``: ``N`` per row."""
        rows, window = self.rows_and_window()
        return OpCost(sympy.Integer(0), sympy.expand(rows * ((window - 1) + 1)))

    def _axes(self) -> tuple[tuple[int, ...], list[int]]:
        """The reduced axes of the input, and the order taking its other axes
        to the output's letters."""
        rows = [i for i in self.inp.indices if i not in self.index]
        return (tuple(self.inp.indices.index(i) for i in self.index),
                [rows.index(i) for i in self.out.indices])

    def run(self, values: Mapping[str, np.ndarray], extents: Mapping[str, int] | None = None,
            dims: Mapping[str, int] | None = None) -> dict[str, np.ndarray]:
        axes, order = self._axes()
        return {self.output: np.transpose(values[self.inp.tensor].mean(axis=axes), order)}

    def torch(self, torch: Any, values: Mapping[str, Any],
              dims: Mapping[str, int] | None = None) -> dict[str, Any]:
        """PyTorch's own ``torch.mean``, for the verifier."""
        axes, order = self._axes()
        return {self.output: torch.mean(values[self.inp.tensor], dim=axes).permute(order)}

    def latex(self, m: Any) -> str:
        """``Y_{bc} = \\operatorname{mean}_p(X_{bcp})``."""
        return (rf"{m.ix(self.out)} = \operatorname{{mean}}_{{{','.join(self.index)}}}"
                f"({m.ix(self.inp)})")


_NAME = re.compile(r"mean_([A-Za-z_][A-Za-z0-9_]*|\{[^{}]*\})\Z")


class MeanCall:
    """The statement form ``Y[b,c] = mean_p(X[b,c,p])`` (``mean_{i,j}`` over
    several letters), checked."""

    usage = "mean_i as a whole statement (mean_{i,j} over several)"

    def claims(self, name: str) -> bool:
        return _NAME.match(name) is not None

    def window_letters(self, call: Any) -> tuple[str, ...]:
        """Its reduced letters, bound for a window so that :meth:`whole` can
        refuse the window by name."""
        return reduced_letters(call, _NAME)

    def whole(self, call: Any, statement: Any, out: Factor, scope: Scope) -> Mean:
        index = reduced_letters(call, _NAME)
        ref = call.ref
        if ref.shifts:
            s = ref.shifts[0]
            raise SymflopsError(f"mean over a window ({s.left}+{s.right} inside {call.name}(...), "
                                "average pooling) is not supported", scope.at(s.left_column),
                                "mean pools over whole axes (a global average pool, e.g. "
                                f"'Y[b,c] = {call.name}(X[b,c,{index[0]}])'); max_k pools over "
                                "a window")
        check_whole(call, statement, out, scope, index, "mean",
                    f"Y[b] = {call.name}(X[b,{index[0]}])")
        return Mean(out, Factor(ref.name, ref.indices, scope.at(ref.column)), index,
                    tuple((i, scope.extents[i]) for i in ref.indices), scope.text, scope.span)

    def inline(self, call: Any, out: Factor, scope: Scope) -> Mean:
        not_inline(call, scope, f"Y[b] = {call.name}(X[b,p])")


MEAN = MeanCall()
