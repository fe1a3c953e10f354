"""What the op kinds that are not sums of einsums need when their letters
are split over a mesh (:meth:`symflops.ops.base.Op.split`).

* A **reduction over a letter** (softmax, the norms, log-sum-exp, max, mean,
  cross-entropy) works on each device's slice of its input.  When a reduced
  letter is split over an axis, each device holds part of every row: the
  row statistics its formula sums (softmax's sum of exponentials, a
  layernorm's mean and variance, an RMSNorm's mean square, a loss's
  log-sum-exp and target logit) are summed across the axis, an AllReduce of
  ``statistics`` numbers per row.  For max, mean and log-sum-exp those
  statistics are the output itself.
* A **recurrence** runs along its time letter: split along it, each device
  would wait for the state of the one before, which symflops does not model
  (refused by name); along any other letter the rows are independent.
* A **concatenation** along a split letter (its parts placed at offsets of a
  split axis) is refused too; along any other letter it is a copy.

Where the result's placement differs from the output's, the result is
gathered or moved (:func:`symflops.ops.einsum.split.split_terms` does that
part, on the op's reads).
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import sympy

from ..core.ir import Einsum, Factor, selections
from ..core.sharding import Layout, Need, NotSplittable, OpSplit, Placement, Width
from .einsum.split import split_terms


def rowwise(op: Any, inp: Factor, reduced: Sequence[str], statistics: int, layout: Layout,
            widths: Mapping[str, Width], unit: str = "FLOPs", moves: bool = True,
            output_reduced: bool = True) -> OpSplit:
    """A reduction of ``inp`` over ``reduced`` (see the module): its cost split
    like its input, an AllReduce of the row statistics per axis over which a
    reduced letter is split, and the moves that bring its result to the
    output's placement.  ``output_reduced``: the output keeps no reduced
    letter and is the statistic itself (max, mean, log-sum-exp); a loss's
    scalar, summed over its rows as well, is not reduced across devices (its
    value serves logging: the gradient needs none of it)."""
    sizes = layout.size_map
    extents = op.dims()
    split = layout.letters(inp)
    chosen = selections(getattr(op, "selections", ()))
    for letter, axes in split.items():
        if letter in chosen:
            raise NotSplittable(f"{op.statement()}: the letter {letter} of {inp.tensor} is split "
                                f"over {', '.join(axes)}, and the op reads a window of positions "
                                "along it (a halo), which symflops does not model")
    divisor = sympy.Mul(*(sizes[a] for axes in split.values() for a in axes))
    cost = op.cost(unit)
    needs: list[Need] = []
    rows = [x for x in dict.fromkeys(inp.indices) if x not in reduced]
    for letter in reduced:
        for a in split.get(letter, ()):
            kept = sympy.Mul(*(sizes[b] for x in rows for b in split.get(x, ()) if b != a))
            elements = statistics * sympy.Mul(*(extents[x] for x in rows)) / kept
            what = ("the output" if output_reduced else
                    f"{statistics} statistic{'s' if statistics > 1 else ''} per row")
            needs.append(Need("AllReduce", (a,), op.output if output_reduced else
                              f"row statistics of {op.output}", tuple(rows),
                              sympy.expand(elements),
                              f"{op.kind} reduces over {letter}, which is split over {a}: "
                              f"{what} summed across devices", "activations",
                              op.output if output_reduced else ""))
    if moves and op.out.indices:
        # The result is split as the input is along the output's letters (and
        # whole along a reduced letter's axes once the statistics are summed):
        # bring it to the output's placement as a copy would be.
        staged = [a for letter in reduced for a in split.get(letter, ())] if output_reduced else []
        view = Layout(layout.sizes, tuple((n, p) for n, p in layout.placements
                                          if n != inp.tensor) + (
            (inp.tensor, _without(layout, inp, staged)),), layout.rows)
        moved = split_terms(op.reads()[:1], extents, view, widths, unit)
        needs += [n for n in moved.needs if n.kind in ("AllGather", "AllToAll")]
    split_letters = tuple((x, axes) for x, axes in split.items())
    return OpSplit(sympy.expand(cost.flops / divisor), sympy.expand(cost.elementwise / divisor),
                   tuple(needs), split_letters)


def _without(layout: Layout, factor: Factor, axes: Sequence[str]) -> Placement:
    """The placement of ``factor``'s tensor with ``axes`` removed (made whole)."""
    p = layout.placement(factor.tensor)
    if p is None:
        return Placement(tuple(() for _ in factor.indices))
    return Placement(tuple(tuple(a for a in group if a not in axes) for group in p.axes), p.flat)


def along(op: Any, letter: str, what: str, layout: Layout, widths: Mapping[str, Width],
          unit: str = "FLOPs") -> OpSplit:
    """An op that runs along ``letter`` (a recurrence's time) or places its
    parts along it (a concatenation): refused when ``letter`` is split in the
    output or in an operand; otherwise its cost split like its output, and the
    moves its reads need."""
    for f in (op.out, *(t.operands[0] for t in op.reads())):
        for x, axes in layout.letters(f).items():
            if x == letter or (f is not op.out and x in _letters_of(op, f, letter)):
                raise NotSplittable(
                    f"{op.statement()}: the letter {letter} is split over {', '.join(axes)} "
                    f"({f.tensor}), and the op {what} along it, which symflops does not model; "
                    f"split another letter")
    moved = split_terms(op.reads(), op.dims(), layout, widths, unit)
    p = layout.placement(op.output)
    divisor = p.divisor(layout.size_map) if p is not None else sympy.Integer(1)
    cost = op.cost(unit)
    return OpSplit(sympy.expand(cost.flops / divisor), sympy.expand(cost.elementwise / divisor),
                   tuple(n for n in moved.needs if n.kind in ("AllGather", "AllToAll")),
                   moved.split)


def _letters_of(op: Any, f: Factor, letter: str) -> set[str]:
    """The operand letters that stand for ``letter`` (a concatenation's part
    letter along the joined axis)."""
    joined = getattr(op, "joined", ())
    parts = getattr(op, "parts", ())
    return {j for p, j in zip(parts, joined) if p.tensor == f.tensor}
