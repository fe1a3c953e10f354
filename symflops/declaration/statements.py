"""A declaration's ``ops:`` list lowered to IR ops, in dependency order.

Each item is a statement or an ``include:`` of a block.  The items are put in
an order where every one comes after the producers of what it reads; each
statement's letters are bound (:mod:`symflops.declaration.letters`); then the op kind
that claims its right side lowers it (:mod:`symflops.ops.registry`), or, when
none does, it is an einsum (:mod:`symflops.ops.einsum.lower`).  The tensors an
op produces besides its output (``aux``) join the layer as activations.
"""

from __future__ import annotations

from typing import Any, Mapping

import sympy

from ..core.errors import Span, SymflopsError
from ..core.ir import Block, Factor, Tensor
from ..lang.statement import Call, Statement, output_name, parse_statement
from ..lang.yaml import Node, describe
from ..ops.base import Lowered, Op, Scope, claim
from ..ops.einsum.lower import lower
from ..ops.loop_statement import LoopGroup, loop_groups
from ..ops.recurrence_statement import state_refs, without_state
from ..ops.registry import CALLS
from .include import Included, bind
from .letters import IndexRange, Letter, bind_letters
from .loops import lower_loop
from .outputs import check_written, declared_output, declared_outputs, names_written


def lower_ops(node: Node, tensors: dict[str, Tensor], dims: dict[str, sympy.Symbol],
              includes: Mapping[int, Included] | None = None,
              definitions: tuple[tuple[str, sympy.Expr], ...] = ()
              ) -> tuple[tuple[Op, ...], dict[str, Tensor], list[Block], list[Included]]:
    """The ops of an ``ops:`` node, every tensor known after them (the given
    ones first), the blocks of its includes, and the includes in the order
    used; two extents of a letter agree when they do with the defined dims
    (``definitions``) replaced by their formulas."""
    if not isinstance(node.value, list) or not node.value:
        raise SymflopsError("'ops' must be a non-empty list of op statements", node.span,
                            "write each op on its own line, e.g. '- H[b,f] = X[b,d] W[d,f]'")
    includes = includes or {}
    for item in node.value:
        if not isinstance(item.value, str) and id(item) not in includes:
            raise SymflopsError(f"an op must be a statement, found {describe(item.value)}",
                                item.span, "write the op as text, e.g. '- H[b,f] = X[b,d] W[d,f]'; "
                                "quote it if it contains ': ' or '#'")
    names = (frozenset(tensors) | {n for inc in includes.values() for n in inc.outputs}
             | {n for i in node.value if isinstance(i.value, str) for n in [output_name(i.value)] if n})
    parsed = [(includes[id(item)] if id(item) in includes
               else parse_statement(item.value, item.span, names), item) for item in node.value]
    known, declared = declared_outputs(tensors)  # declared op outputs join when written
    check_written(declared, *names_written(parsed))
    # A run of statements that reads a tensor one step back before writing it: one loop op.
    ordered = _order(loop_groups(parsed), known)
    subs = {dims[n]: e for n, e in definitions if n in dims}
    for _ in range(len(subs)):  # a definition may use another defined dim
        subs = {k: v.subs(subs) for k, v in subs.items()}
    ops: list[Op] = []
    blocks: list[Block] = []
    used: list[Included] = []
    ranges: dict[str, IndexRange] = {}
    for st, item in ordered:
        if isinstance(st, Included):
            for t in bind(st, known):
                known[t.name] = t
            ops.extend(st.layer.ops)
            blocks.extend((st.block, *st.nested))
            used.append(st)
            continue
        if isinstance(st, LoopGroup):
            loop, made = lower_loop(st, known, dims, ranges, subs, declared)
            known.update((t.name, t) for t in made)
            ops.append(loop)
            continue
        at = (lambda col, s=item.span: s.shifted(col) if s else None)
        # A recurrence reads its own output: its letters are bound by the other operands.
        recurrent = bool(state_refs(st))
        if st.lhs.name in declared:  # its declared shape (a scatter binds its letters by it)
            known[st.lhs.name] = declared[st.lhs.name]
        operands, defined = _operands(st, known, at)
        bound_st, bound = bind_letters(without_state(st, at) if recurrent else st, known, dims, at,
                                       ranges, operands, defined, subs)
        st = st if recurrent else bound_st
        shaped = known.pop(st.lhs.name) if st.lhs.name in declared else None
        scope = Scope(st.text, item.span, dict(known), {k: v.extent for k, v in bound.items()}, dims)
        out_factor = Factor(st.lhs.name, st.lhs.indices, at(st.lhs.column))
        out = Tensor(st.lhs.name, tuple(bound[i].extent for i in st.lhs.indices), "activation",
                     False, "", at(st.lhs.column))
        if shaped is not None:  # proved to be the shape the op writes; with its pad
            out = declared_output(shaped, out, subs, item.span)
        lowered = _lower(st, out_factor, scope)
        # The kind's own tensors, what the ops before the last save, the
        # output, and what the last op saves: the order the layer lists them.
        known.update((t.name, t) for t in lowered.tensors)
        for op in lowered.ops[:-1]:
            known.update(_aux_tensors(op, known))
        known[out.name] = out
        known.update(_aux_tensors(lowered.ops[-1], known))
        ops.extend(lowered.ops)
    return tuple(ops), known, blocks, used


def _lone_call(st: Statement) -> Call | None:
    """The call that is the whole right side, if one is."""
    lone = st.terms[0].factors[0] if len(st.terms) == 1 and len(st.terms[0].factors) == 1 else None
    return lone if isinstance(lone, Call) else None


def _operands(st: Statement, known: Mapping[str, Tensor], at: Any
              ) -> tuple[tuple[Any, ...], dict[str, Letter]]:
    """The further tensors and the letters a call binds itself (a
    concatenation's parts and its joined axis), through its kind's
    ``binding``; none for every other statement."""
    calls = [f for term in st.terms for f in term.factors if isinstance(f, Call)]
    for f in calls:
        if f.more and getattr(claim(CALLS, f.name), "binding", None) is None:
            raise SymflopsError(f"{f.name}(...) takes at most two arguments", at(f.more[0].column),
                                "remove the arguments after the second; only concat_i joins "
                                "several tensors")
    for f in calls:
        binding = getattr(claim(CALLS, f.name), "binding", None)
        if binding is not None:  # it checks that the call is the whole right side
            operands, extents = binding(f, st, known, at)
            where = at(st.lhs.column)
            return operands, {i: Letter(e, st.lhs.name, where) for i, e in extents.items()}
    return (), {}


def _lower(st: Statement, out: Factor, scope: Scope) -> Lowered:
    """The ops of one statement: a call kind's whole op when the statement is
    that call alone and the kind takes it as a whole, else an einsum.  A
    scatter's call (``Agg[dst[e]] += max_d(M[e,d])``) is never a whole op: it
    computes a tensor of its own, which the scatter adds."""
    lone = _lone_call(st) if not st.lhs.gathers else None
    if lone is not None:
        kind = claim(CALLS, lone.name)
        op = kind.whole(lone, st, out, scope) if kind is not None else None
        if op is not None:
            return Lowered((op,))
    return lower(st, out, scope, CALLS)


def _aux_tensors(op: Op, known: Mapping[str, Tensor]) -> dict[str, Tensor]:
    """The tensors an op saves besides its output (a norm's per-row ``rstd_N``,
    a loss's probabilities ``P_L``), as activations of the layer."""
    extents = op.dims()
    out = {}
    for f in op.aux:
        if f.tensor in known:
            raise SymflopsError(f"the name {f.tensor!r} is taken", op.span,
                                f"rename the tensor {f.tensor!r}: {op.kind} saves a tensor of "
                                "that name")
        out[f.tensor] = Tensor(f.tensor, tuple(extents[i] for i in f.indices), "activation",
                               False, op.aux_description, op.span)
    return out


def _writes(st: Any, node: Node) -> list[tuple[str, Span | None]]:
    """The tensors an ops item writes, with where to point at them."""
    if isinstance(st, Included):
        return [(name, node.span) for name in st.outputs]
    if isinstance(st, LoopGroup):
        return [(s.lhs.name, n.span.shifted(s.lhs.column) if n.span else None)
                for s, n in st.items]
    return [(st.lhs.name, node.span.shifted(st.lhs.column) if node.span else None)]


def _reads(st: Any) -> list[str]:
    if isinstance(st, (Included, LoopGroup)):
        return list(st.reads)
    # A call's further tensors (a concatenation's parts) are read too; a
    # recurrence reads its own output, which is no dependency.
    more = [r.name for t in st.terms for f in t.factors if isinstance(f, Call) for r in f.tensors[1:]]
    return [ref.name for ref in st.refs if ref.name != st.lhs.name] + more


def _order(parsed: list[tuple[Any, Node]], file_tensors: Mapping[str, Tensor]) -> list[tuple[Any, Node]]:
    """Order ops (and included blocks) so that each comes after the producers
    of its operands."""
    producer: dict[str, int] = {}
    for k, (st, node) in enumerate(parsed):
        for name, where in _writes(st, node):
            if name in file_tensors:
                raise SymflopsError(
                    f"op writes {name!r}, which is declared as {file_tensors[name].role}",
                    where, f"give the op's output a new name; '{name}' is a given tensor")
            if name in producer:
                first = parsed[producer[name]][1].span
                line = f" (first at line {first.line})" if first else ""
                raise SymflopsError(f"tensor {name!r} is defined twice{line}", where,
                                    "each tensor is written by one op; rename one output")
            producer[name] = k
    order: list[int] = []
    state: dict[int, str] = {}

    def visit(k: int, chain: list[int]) -> None:
        if state.get(k) == "done":
            return
        st, node = parsed[k]
        if state.get(k) == "active":
            names = " -> ".join(_writes(parsed[j][0], parsed[j][1])[0][0]
                                for j in chain[chain.index(k):] + [k])
            raise SymflopsError(f"the ops form a cycle: {names}", node.span,
                                "a tensor cannot depend on itself; rename one output")
        state[k] = "active"
        for name in _reads(st):
            if name in producer:
                visit(producer[name], chain + [k])
        state[k] = "done"
        order.append(k)

    for k in range(len(parsed)):
        visit(k, [])
    return [parsed[k] for k in order]
