"""An op's output declared under ``tensors:``, to give its shape and its padding.

An op's output needs no declaration: its shape is inferred from the letters
that index it.  It may still be declared, with ``role: activation``::

    Cat: {shape: [B, T, 2*I, 2*J], role: activation, pad: [0, 0, [1, 1], [1, 1]]}

for two things an inferred shape cannot say:

* **padding** (``pad:``, as on an input): zeros around an axis that a later
  op's affine index may read (a "same" convolution over an intermediate,
  ``Z[b,f,i,j] = Cat[b,t,i+u-1,j+v-1] W[f,t,u,v]``); the op that writes the
  tensor writes its own positions only;
* **the positions of a scatter** (``Agg[dst[e], d] += M[e,d]``): the axis the
  index tensor selects along, which no operand carries
  (:mod:`symflops.declaration.scatter`).

The declared shape must be the one the op writes, proved axis by axis (with
the defined dims replaced by their formulas, ``T: {equals: O + S}`` against
``O + S``); a shape that differs is refused at the declaration.  A declared
activation that no op statement of the declaration writes is refused too.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

import sympy

from ..core.errors import Span, SymflopsError
from ..core.ir import Tensor

#: The role of a declared op output.
ACTIVATION = "activation"


def declared_outputs(tensors: Mapping[str, Tensor]) -> tuple[dict[str, Tensor], dict[str, Tensor]]:
    """The given tensors (inputs, parameters, indices, buffers) and the
    declared op outputs, apart."""
    given = {n: t for n, t in tensors.items() if t.role != ACTIVATION}
    return given, {n: t for n, t in tensors.items() if t.role == ACTIVATION}


def check_written(declared: Mapping[str, Tensor], statements: Iterable[str],
                  included: Iterable[str]) -> None:
    """Every declared output is the output of an op statement of this declaration."""
    written, from_blocks = set(statements), set(included)
    for name, t in declared.items():
        if name in written:
            continue
        where = ("is an output of an included block: declare its shape in the block's own "
                 "'tensors:'" if name in from_blocks else
                 "an activation is the output of an op of this declaration: write the op "
                 f"that computes {name}, or declare {name} as an input (role: input)")
        raise SymflopsError(f"tensor {name!r} is declared with role: activation, but no op "
                            "statement here writes it", t.span, where)


def _text(shape: Iterable[sympy.Expr]) -> str:
    return "[" + ", ".join(sympy.sstr(a) for a in shape) + "]"


def declared_output(declared: Tensor, written: Tensor,
                    subs: Mapping[sympy.Symbol, sympy.Expr], op_span: Span | None) -> Tensor:
    """The declared tensor, once its shape is proved to be the one the op
    writes (``written``, inferred from the op's letters)."""
    line = f" (line {op_span.line})" if op_span is not None else ""
    if len(declared.shape) != len(written.shape):
        raise SymflopsError(
            f"{declared.name} is declared with {len(declared.shape)} axes "
            f"{_text(declared.shape)}, but the op that writes it{line} gives it "
            f"{len(written.shape)}: {_text(written.shape)}", declared.span,
            f"declare the shape the op writes, {_text(written.shape)}")
    for k, (mine, theirs) in enumerate(zip(declared.shape, written.shape)):
        if sympy.expand((sympy.sympify(mine) - theirs).subs(subs)) != 0:
            raise SymflopsError(
                f"{declared.name} is declared {_text(declared.shape)}, but the op that writes "
                f"it{line} gives axis {k + 1} {sympy.sstr(theirs)} positions, not "
                f"{sympy.sstr(mine)}", declared.span,
                f"declare the shape the op writes, {_text(written.shape)} (an extent may be "
                "a defined dim equal to it); a declared shape states the op's output, it "
                "does not resize it (pad: adds zeros around it)")
    return declared


def pad_advice(tensor: Tensor, axis: int, before: sympy.Expr, after: sympy.Expr) -> str:
    """How to pad axis ``axis`` of an op's output ``tensor`` by ``(before,
    after)`` zeros: declare it, with its shape, ``role: activation`` and that
    ``pad:`` (the other axes' padding kept)."""
    def side(k: int) -> str:
        b, a = (before, after) if k == axis else tensor.padding(k)
        return "0" if b == 0 and a == 0 else f"[{sympy.sstr(sympy.expand(b))}, {sympy.sstr(sympy.expand(a))}]"
    pads = ", ".join(side(k) for k in range(len(tensor.shape)))
    return (f"declare the op's output {tensor.name} under 'tensors:' with its padding, "
            f"'{tensor.name}: {{shape: {_text(tensor.shape)}, role: activation, pad: [{pads}]}}'")


def names_written(parsed: Iterable[tuple[Any, Any]]) -> tuple[list[str], list[str]]:
    """The outputs of the op statements and of the included blocks of ``parsed``
    (pairs of a statement or an include, and its node)."""
    statements, blocks = [], []
    for st, _ in parsed:
        if hasattr(st, "lhs"):
            statements.append(st.lhs.name)
        else:
            blocks.extend(st.outputs)
    return statements, blocks
