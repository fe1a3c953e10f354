"""The ``components:`` key of a declaration: named groups of ops, the rows of
a sheet's front table (:mod:`symflops.count.components` counts them)::

    components:
      attention projections: [Q, K, V, Y1]
      MLP: [U, H, M, Y]

Invariants of what :func:`read_components` returns: every op named is an op
output of the layer (its own ops or an included block's); no op is in two
components, counting those an included block brings (carried into the
includer renamed, by :func:`symflops.declaration.include.read_include`); the
ops of one component run equally often (``Layer.copies``), so that a row is
one copy of a repeated block or none.  Ops no component names are not an
error: the front table gives each its own row.
"""

from __future__ import annotations

from typing import Mapping

from ..core.errors import Span, SymflopsError, closest, quote
from ..core.ir import Component, Layer
from ..lang.yaml import Node, mapping, text_of


COMPONENTS_HINT = ("write e.g. 'components: {MLP: [U, H, M, Y], norms: [Xn, Yn]}': each "
                   "component names the ops it holds by the tensors they write")


def read_components(top: Mapping[str, tuple[Span | None, Node]], layer: Layer,
                    carried: tuple[Component, ...]) -> tuple[Component, ...]:
    """``components: {NAME: [op outputs]}``: the rows of the front table.
    Every name is an op's output; an op is in one component at most (with the
    components an included block brings); the ops of one component run equally
    often (a block's ops and the includer's own go in separate components)."""
    if "components" not in top:
        return ()
    fields = mapping(top["components"][1], "'components'", COMPONENTS_HINT)
    outputs = [op.output for op in layer.ops]
    # op -> (its component, where that was named, whether an included block brought it)
    owner = {op: (c.name, c.span, True) for c in carried for op in c.ops}
    out = []
    for name, (kspan, node) in fields.items():
        if not name.strip():
            raise SymflopsError("a component has an empty name", kspan, COMPONENTS_HINT)
        if not isinstance(node.value, list) or not node.value:
            raise SymflopsError(f"component {quote(name)} must be a non-empty list of op outputs",
                                node.span or kspan, COMPONENTS_HINT)
        ops = []
        for item in node.value:
            op = text_of(item, f"an op of component {quote(name)}")
            if op not in outputs:
                raise SymflopsError(
                    f"component {quote(name)} names {quote(op)}, which no op writes", item.span,
                    f"name ops by the tensors they write ({closest(op, outputs)}); the op "
                    f"outputs are {', '.join(outputs)}")
            if op in ops:
                raise SymflopsError(f"component {quote(name)} names {quote(op)} twice", item.span,
                                    "list each op once")
            if op in owner:
                other, at, included = owner[op]
                where = (f"component {quote(other)}"
                         + (" of an included block" if included
                            else f" (line {at.line})" if at else ""))
                raise SymflopsError(f"op {quote(op)} is in two components: {where} and "
                                    f"{quote(name)}", item.span,
                                    "put each op in one component")
            owner[op] = (name, kspan, False)
            ops.append(op)
        copies = {op: layer.copies(op) for op in ops}
        if len(set(copies.values())) > 1:
            runs = ", ".join(f"{op} ({n} {'copy' if n == 1 else 'copies'})" for op, n in copies.items())
            raise SymflopsError(f"component {quote(name)} mixes ops that run a different number "
                                f"of times: {runs}", kspan,
                                "a row counts one copy of a repeated block: put the block's ops "
                                "and the others in separate components")
        out.append(Component(name, tuple(ops), kspan))
    return tuple(out)
