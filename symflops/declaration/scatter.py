"""The output of a scatter, ``Agg[dst[e], d] += M[e,d]``: where its letters come from.

A scatter is the adjoint of a lookup: ``X[b,d] = E[tok[b], d]`` reads the row
``tok[b]`` of E, ``Agg[dst[e], d] += M[e,d]`` adds the row ``e`` of M into the
row ``dst[e]`` of Agg, ``Agg[v,d] = Σ_e [v = dst[e]] M[e,d]``.  The lookup's
fresh letter ``v`` ranges over the axis it selects along; for a scatter that
axis is the output's, which no operand gives: the declaration states it,
``Agg: {shape: [N, D], role: activation}`` under ``tensors:`` (an op's output
whose shape is declared; :mod:`symflops.declaration.outputs`).  The output's
other letters and the index tensor's letters are bound like an operand's, so
a declared shape that disagrees with the operands is refused at the letter.
"""

from __future__ import annotations

from typing import Callable

from ..core.errors import Span, SymflopsError, closest
from ..core.ir import Tensor
from ..lang.statement import Ref, Statement

At = Callable[[int], "Span | None"]


def scatter_refs(st: Statement, known: dict[str, Tensor] | object, at: At
                 ) -> list[tuple[Ref, Tensor]]:
    """The references a scatter binds besides its operands: its output with
    its declared shape, then each index tensor of the output's lookups; none
    for any other statement."""
    if not st.lhs.gathers:
        return []
    out = st.lhs
    tensor = known.get(out.name)  # type: ignore[union-attr]
    if tensor is None or tensor.role != "activation":
        g = out.gathers[0]
        shape = ", ".join("N" if k == g.position else "..." for k in range(len(out.indices)))
        raise SymflopsError(
            f"the scatter into {out.name} does not say how many positions {g.ref.name} selects "
            "from", at(g.ref.column),
            f"declare the output's shape under 'tensors:', e.g. '{out.name}: {{shape: [{shape}], "
            "role: activation}' (N the positions the index tensor's values range over)")
    refs: list[tuple[Ref, Tensor]] = [(out, tensor)]
    for g in out.gathers:
        if g.ref.name not in known:  # type: ignore[operator]
            raise SymflopsError(f"unknown tensor {g.ref.name!r}", at(g.ref.column),
                                "declare it under 'tensors:' with role: index; "
                                + closest(g.ref.name, sorted(known)))  # type: ignore[arg-type]
        refs.append((g.ref, known[g.ref.name]))  # type: ignore[index]
    return refs
