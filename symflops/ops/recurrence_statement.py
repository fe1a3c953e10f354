"""How a statement that reads its own output becomes a :class:`~symflops.ops.recurrence.Recurrence`.

``H[b,s,d] = A[d] H[b,s-1,d] + X[b,s,d]`` reaches this module from the einsum
lowering (:func:`symflops.ops.einsum.lower.lower`, the one call there) when
the output is among its operands; the declaration's letter binding first
leaves the state out (:func:`without_state`), its letters being the output's.
Without a gate (``H[b,s,d] = H[b,s-1,d] + X[b,s,d]``) it is the prefix sum
``H[b,s,d] = X[b,u,d] where u <= s`` and becomes that op
(:class:`symflops.ops.prefix.PrefixSum`).  Everything else that reads the
output is refused by name at its column: an offset other than -1, an offset along two letters or none, the state under a
function, read twice, a difference, several gates, a drive that is no plain
tensor with the output's letters.  The index records are the affine grammar's
(:class:`symflops.lang.syntax.Shift`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ..core.errors import SymflopsError
from ..core.ir import Factor
from .base import Scope
from .prefix import PrefixSum, gateless
from .prefix_statement import fresh_summed
from .loop import EXAMPLE as LOOP_EXAMPLE
from .recurrence import EXAMPLE, OFFSET, Recurrence, prev_name, total_name
from .solve import TriangularSolve, lower_solve, solve_form


def state_refs(st: Any) -> tuple[Any, ...]:
    """The references of a parsed statement to its own output."""
    return tuple(r for r in st.refs if r.name == st.lhs.name)


def without_state(st: Any, at: Any) -> Any:
    """The statement with the state's references (plain or under a call) left
    out of its products, for binding the other letters (the state's extents
    are the output's); ``at`` places a column of the statement."""
    terms = []
    for t in st.terms:
        factors = tuple(f for f in t.factors
                        if getattr(getattr(f, "ref", f), "name", None) != st.lhs.name)
        terms += [dataclasses.replace(t, factors=factors)] if factors else []
    if not terms:
        raise SymflopsError(f"{st.lhs.name} is computed from itself alone", at(st.terms[0].column),
                            f"a linear recurrence adds a drive, e.g. {EXAMPLE}")
    return dataclasses.replace(st, terms=tuple(terms))


def _shift_at(ref: Any, position: int) -> Any:
    """The affine index record (:class:`symflops.lang.syntax.Shift`) at
    ``position`` of ``ref``, or None for a plain letter."""
    return next((s for s in ref.shifts if s.position == position), None)


def _offset(ref: Any, position: int) -> int | None:
    """The constant offset of index ``position`` of ``ref`` from one letter
    (``s-1``: -1; a plain letter: 0), or None when it is another affine form
    (``s+t``, ``2*s``)."""
    s = _shift_at(ref, position)
    if s is None:
        return 0
    if len(s.terms) == 1 and s.terms[0].coefficient == 1 and not s.terms[0].negative:
        return int(s.constant)
    return None


def _letter(ref: Any, position: int) -> tuple[str, int]:
    """The letter at ``position`` (the first of an affine index) and its column."""
    s = _shift_at(ref, position)
    if s is None:
        return ref.indices[position], ref.index_columns[position]
    return s.terms[0].letter, s.column


def lower_recurrence(st: Any, out: Factor, scope: Scope
                     ) -> Recurrence | PrefixSum | TriangularSolve:
    """``H[..s..] = G[..] H[..s-1..] + X[..s..]`` as a :class:`Recurrence`;
    without a gate, ``H[..s..] = H[..s-1..] + X[..s..]``, as the prefix sum
    ``H[..s..] = X[..u..] where u <= s`` (:mod:`.prefix`, one mechanism for
    both spellings); SymflopsError at the place of anything else that reads
    the output."""
    at, name, example = scope.at, out.tensor, EXAMPLE
    if solve_form(st, name):  # U[..l..] = X[..l..] - T[..l,m..] U[..m..] where m < l
        return lower_solve(st, out, scope)
    for t in st.terms:
        for f in t.factors:
            ref = getattr(f, "ref", None)
            if ref is not None and ref.name == name:
                raise SymflopsError(f"the output {name} read under {f.name}(...)", at(f.column),
                                    "a linear recurrence reads its previous state as a plain "
                                    f"factor, e.g. {example}; a nonlinear one is not supported")
    states = state_refs(st)
    if len(states) > 1:
        raise SymflopsError(f"the output {name} is read {len(states)} times", at(states[1].column),
                            f"a linear recurrence reads its previous state once, e.g. {example}")
    (ref,) = states
    moved = [k for k in range(len(ref.indices)) if _offset(ref, k) != 0]
    if len(moved) != 1:
        raise SymflopsError(
            f"{name} must be read one step back along one letter, here along {len(moved)}",
            at(ref.column), f"write one index as a letter minus 1, e.g. {example}")
    (k,) = moved
    offset = _offset(ref, k)
    time, column = _letter(ref, k)
    if offset != OFFSET:
        got = "a shift by another letter" if offset is None else f"an offset of {offset:+d}"
        raise SymflopsError(f"{name}[...] read at {got} along {time!r}", at(column),
                            f"only the previous step, {time}-1, is supported: {example}")
    letters = tuple(time if j == k else i for j, i in enumerate(ref.indices))
    summed = [i for i in letters if i not in out.indices]
    if summed and len(letters) == len(out.indices):
        # S[c,e,p] = M[c,e,f] S[c-1,f,p] + X[c,e,p]: the state through a matrix
        raise SymflopsError(
            f"the previous state {name} is read through the summed letter {summed[0]!r}: a "
            "recurrence through a matrix is not supported in one statement", at(ref.column),
            f"a linear recurrence multiplies its previous state by an elementwise gate, e.g. "
            f"{example}; a state through a matrix is supported in a loop, a run of statements "
            f"with an output of its own (docs/declarations.md), e.g. {LOOP_EXAMPLE}")
    if letters != out.indices:
        raise SymflopsError(f"the previous state {name} must carry the output's letters in order",
                            at(ref.column), f"write {name}[{','.join(out.indices)}] with "
                            f"{time}-1 in place of {time}")
    if len(st.terms) != 2 or st.where or any(t.negative for t in st.terms):
        raise SymflopsError("a recurrence is 'gate * previous state + drive'",
                            scope.at(st.terms[0].column), f"write it as {example}; compute "
                            "anything else in ops of their own")
    with_state = [t for t in st.terms if any(f is ref for f in t.factors)][0]
    drive_term = [t for t in st.terms if t is not with_state][0]
    gates = [f for f in with_state.factors if f is not ref]
    if len(gates) > 1 or gates and (not hasattr(gates[0], "indices") or gates[0].gathers
                                    or gates[0].shifts):
        raise SymflopsError("the previous state must be multiplied by one tensor, the gate",
                            at(with_state.column), f"e.g. {example}, or by nothing (a "
                            "prefix sum); compute a product of several tensors or a scaled "
                            "gate in an op of its own")
    drives = drive_term.factors
    plain = len(drives) == 1 and hasattr(drives[0], "indices") and not drives[0].shifts \
        and not drives[0].gathers
    if not plain or tuple(drives[0].indices) != out.indices:
        raise SymflopsError("the drive must be one tensor with the output's letters in order",
                            at(drive_term.column), f"e.g. {example}; compute it in an op "
                            "of its own")
    drive = drives[0]
    if not gates:  # H[b,s,d] = H[b,s-1,d] + X[b,s,d]: the prefix sum of X along s
        letter = fresh_summed(set(out.indices), scope.dims)
        return gateless(out, Factor(drive.name, drive.indices, at(drive.column)), time,
                        {**scope.extents}, letter, scope.text, scope.span)
    gate = gates[0]
    if len(set(gate.indices)) != len(gate.indices) or not set(gate.indices) <= set(out.indices):
        raise SymflopsError(f"the gate {gate.name} must carry distinct letters of the output",
                            at(gate.column), f"e.g. A[d] or G[{','.join(out.indices)}]")
    for taken in (prev_name(name), total_name(name)):
        # the derivation and the sheet name the previous state and the total gradient so
        if taken in scope.known:
            raise SymflopsError(f"the name {taken!r} is taken", at(ref.column),
                                f"rename the tensor {taken!r}: the recurrence of {name} names "
                                "its previous state and its total gradient "
                                f"{prev_name(name)} and {total_name(name)}")
    return Recurrence(out, Factor(gate.name, gate.indices, at(gate.column)),
                      Factor(drive.name, drive.indices, at(drive.column)), time,
                      tuple((i, scope.extents[i]) for i in out.indices), scope.text, scope.span)
