"""A loop group (:class:`symflops.ops.loop_statement.LoopGroup`) lowered to one
:class:`~symflops.ops.loop.Loop` op.

Each statement's reads of the state one step back, ``S[h,c-1,e,p]``, become
reads of an operand of its own, ``S_prev[h,c,e,p]``; its letters are bound
twice: first with ``S_prev`` left out, statement by statement (which gives
the state's shape, the last statement's output), then with ``S_prev`` of that
shape, and each statement is lowered as an einsum (:func:`symflops.ops.einsum.lower.lower`).
A statement that lowers to anything but one sum of einsum products (a call
of another op kind, a dropout, a prefix sum) is refused by name, and so is a
letter that stands for two extents in two statements of the loop.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

import sympy

from ..core.errors import SymflopsError
from ..core.ir import Factor, Tensor
from ..ops.base import Scope
from ..ops.einsum.lower import lower
from ..ops.einsum.node import Contraction
from ..ops.loop import Loop
from ..ops.loop_statement import LoopGroup
from ..ops.recurrence import prev_name, total_name
from ..ops.registry import CALLS
from .letters import IndexRange, bind_letters


def _with_previous(st: Any, group: LoopGroup) -> Any:
    """The statement with its reads of the state one step back as ``S_prev``."""
    prev = prev_name(group.state)

    def ref(r: Any) -> Any:
        if r.name != group.state:
            return r
        indices = tuple(group.time if s else i for i, s in zip(
            r.indices, (any(x.position == k for x in r.shifts) for k in range(len(r.indices)))))
        return dataclasses.replace(r, name=prev, indices=indices, shifts=())

    terms = tuple(dataclasses.replace(t, factors=tuple(
        ref(f) if hasattr(f, "indices") else f for f in t.factors)) for t in st.terms)
    return dataclasses.replace(st, terms=terms)


def _without_previous(st: Any, prev: str) -> Any:
    terms = []
    for t in st.terms:
        factors = tuple(f for f in t.factors if getattr(f, "name", None) != prev)
        terms += [dataclasses.replace(t, factors=factors)] if factors else []
    return dataclasses.replace(st, terms=tuple(terms)) if terms else None


def lower_loop(group: LoopGroup, known: Mapping[str, Tensor], dims: Mapping[str, sympy.Symbol],
               ranges: dict[str, IndexRange], subs: Mapping[sympy.Symbol, sympy.Expr],
               declared: Mapping[str, Tensor]) -> tuple[Loop, tuple[Tensor, ...]]:
    """The loop op, and the group's tensors in the order written."""
    prev = prev_name(group.state)
    first_st, first_node = group.items[0]
    for st, node in group.items:
        at = (lambda col, s=node.span: s.shifted(col) if s else None)
        if st.lhs.name in declared:
            raise SymflopsError(f"{st.lhs.name} is written by a loop and declared under "
                                "'tensors:'", at(st.lhs.column),
                                "leave the loop's tensors out of 'tensors:'; the loop gives "
                                "their shapes")
    if prev in known:
        raise SymflopsError(f"the name {prev!r} is taken", first_node.span,
                            f"rename the tensor {prev!r}: the loop over {group.time} names the "
                            f"state one step back {prev}")
    for name in group.outputs:
        if name != group.output and total_name(name) in known:
            raise SymflopsError(f"the name {total_name(name)!r} is taken", first_node.span,
                                f"rename the tensor {total_name(name)!r}: the loop over "
                                f"{group.time} names the total gradient of {name} "
                                f"{total_name(name)}")
    rewritten = [(_with_previous(st, group), node) for st, node in group.items]
    # First pass: each statement with the state left out, for the state's shape.
    trial = dict(known)
    error: SymflopsError | None = None
    for st, node in rewritten:
        at = (lambda col, s=node.span: s.shifted(col) if s else None)
        stripped = _without_previous(st, prev)
        if stripped is None:
            continue
        try:
            _, bound = bind_letters(stripped, trial, dims, at, dict(ranges), (), {}, subs)
        except SymflopsError as exc:
            error = error or exc
            continue
        trial[st.lhs.name] = Tensor(st.lhs.name, tuple(bound[i].extent for i in st.lhs.indices),
                                    "activation", False, "", at(st.lhs.column))
    if group.state not in trial:
        if error is not None:
            raise error
        st, node = rewritten[-1]
        raise SymflopsError(f"the shape of the state {group.state} is bound by nothing but "
                            "itself", node.span.shifted(st.lhs.column) if node.span else None,
                            f"add a term whose operands carry {group.state}'s letters")
    work = dict(known)
    work[prev] = dataclasses.replace(trial[group.state], name=prev)
    statements: list[Contraction] = []
    letters: dict[str, sympy.Expr] = {}
    made: list[Tensor] = []
    for st, node in rewritten:
        at = (lambda col, s=node.span: s.shifted(col) if s else None)
        bound_st, bound = bind_letters(st, work, dims, at, ranges, (), {}, subs)
        scope = Scope(st.text, node.span, dict(work), {k: v.extent for k, v in bound.items()},
                      dims)
        out = Factor(st.lhs.name, st.lhs.indices, at(st.lhs.column))
        lowered = lower(bound_st, out, scope, CALLS)
        op = lowered.ops[-1]
        if len(lowered.ops) != 1 or lowered.tensors or not isinstance(op, Contraction):
            raise SymflopsError(f"{st.lhs.name}'s statement is no sum of einsum products",
                                at(st.terms[0].column), "a loop's statements are sums of "
                                "products of tensors (pointwise functions of a factor allowed); "
                                "compute anything else in an op before the loop")
        for letter, extent in op.index_dims:
            if letter in letters and sympy.expand(letters[letter] - extent) != 0:
                raise SymflopsError(f"the letter {letter!r} stands for {letters[letter]} in one "
                                    f"statement of the loop and for {extent} here",
                                    at(st.lhs.column), "use another letter for one of them: "
                                    "a loop's statements share their letters")
            letters.setdefault(letter, extent)
        statements.append(op)
        role = ("" if st.lhs.name == group.output else
                "the loop's state" if st.lhs.name == group.state else
                f"kept by the loop over {group.time}")
        tensor = Tensor(st.lhs.name, tuple(bound[i].extent for i in st.lhs.indices),
                        "activation", False, role, at(st.lhs.column))
        work[st.lhs.name] = tensor
        made.append(tensor)
    state = next(t for t in made if t.name == group.state)
    if state.shape != work[prev].shape:
        raise AssertionError(f"the state's shape changed: {state.shape} {work[prev].shape}")
    text = "; ".join(st.text for st, _ in group.items)
    loop = Loop(tuple(statements), group.state, group.time, group.output,
                tuple(letters.items()), text, first_node.span)
    return loop, tuple(made)
