"""Which statements form a loop (:mod:`.loop`), checked where they are written.

A *loop group* is a run of consecutive statements (as written) in which some
statement reads a tensor one step back along a letter (``S[h,c-1,e,p]``)
before a later statement of the run writes it; the run ends at that writer.
:func:`loop_groups`, a pre-pass over the parsed statements, replaces each
run by one :class:`LoopGroup` item, which the ordering of the ops treats as
one item (its writes: all its outputs; its reads: its operands from outside).
A single statement that reads itself one step back stays what it was (a
recurrence, a prefix sum: :mod:`.recurrence_statement`).

The rules, each refused by name at its column otherwise: one state per
group, read only one step back along the loop letter, at most once per
product, never under a function; every statement carries the loop letter on
its output; the group's other tensors are read at the same step, after they
are written; no lookup, shifted index or where-clause on the loop letter
inside the loop; exactly one tensor of the group is read by no statement of
the group (the output); nothing after the group reads the others (the loop
keeps them for its backward pass).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

from ..core.errors import Span, SymflopsError
from .loop import EXAMPLE


@dataclass(frozen=True)
class LoopGroup:
    """A run of statements lowered to one loop op: the parsed statements with
    their ``ops:`` items, the state, the loop letter, and the output."""

    items: tuple[tuple[Any, Any], ...]
    state: str
    time: str
    output: str

    @property
    def outputs(self) -> tuple[str, ...]:
        return tuple(st.lhs.name for st, _ in self.items)

    @property
    def reads(self) -> tuple[str, ...]:
        """The tensors it reads from outside (a call's further tensors too)."""
        mine = set(self.outputs)
        return tuple(dict.fromkeys(r.name for st, _ in self.items for r in st.refs
                                   if r.name not in mine))

    @property
    def span(self) -> Span | None:
        return self.items[0][1].span


def _at(node: Any) -> Callable[[int], Span | None]:
    return lambda col: node.span.shifted(col) if node.span else None


def _offset(ref: Any, position: int) -> int | None:
    """The constant offset of an index from one letter (``c-1``: -1), None
    for another affine form, 0 for a plain letter."""
    s = next((s for s in ref.shifts if s.position == position), None)
    if s is None:
        return 0
    if len(s.terms) == 1 and s.terms[0].coefficient == 1 and not s.terms[0].negative \
            and not s.named:
        return int(s.constant)
    return None


def _factors(st: Any) -> list[tuple[Any, Any, Any]]:
    """``(term, factor, ref)`` for each factor of each term with a tensor."""
    out = []
    for t in st.terms:
        for f in t.factors:
            ref = f if hasattr(f, "indices") else getattr(f, "ref", None)
            if ref is not None:
                out.append((t, f, ref))
    return out


def loop_groups(parsed: list[tuple[Any, Any]]) -> list[tuple[Any, Any]]:
    """``parsed`` with each loop group as one item (see the module doc)."""
    writer = {st.lhs.name: k for k, (st, _) in enumerate(parsed) if hasattr(st, "lhs")}
    out: list[tuple[Any, Any]] = []
    k = 0
    while k < len(parsed):
        st, node = parsed[k]
        end = _reach(st, k, writer)
        if end is None:
            out.append(parsed[k])
            k += 1
            continue
        j = k
        while j <= end:
            if not hasattr(parsed[j][0], "lhs"):
                raise SymflopsError("an include inside a loop over statements", parsed[j][1].span,
                                    "include the block before or after the loop's statements")
            end = max(end, _reach(parsed[j][0], j, writer) or end)
            j += 1
        group = check_group(parsed[k:end + 1])
        out.append((group, node))
        _after(group, parsed[end + 1:])
        k = end + 1
    return out


def _reach(st: Any, k: int, writer: dict[str, int]) -> int | None:
    """The last statement a loop starting at statement ``k`` reaches: the
    writer of a tensor it reads shifted, written later."""
    if not hasattr(st, "lhs"):
        return None
    later = [writer[r.name] for r in st.refs if r.shifts and writer.get(r.name, -1) > k]
    return max(later) if later else None


def check_group(items: Sequence[tuple[Any, Any]]) -> LoopGroup:
    """The group's state, loop letter and output, or SymflopsError at the
    place of what breaks a rule of the module doc."""
    outputs = [st.lhs.name for st, _ in items]
    mine = set(outputs)
    last_st, last_node = items[-1]
    # The state: the group's tensors read with a shifted index.
    shifted = [(st, node, ref) for st, node in items for _, _, ref in _factors(st)
               if ref.name in mine and ref.shifts]
    state = shifted[0][2].name
    for st, node, ref in shifted:
        if ref.name != state:
            raise SymflopsError(f"{ref.name} and {state} are both read one step back in one "
                                "loop", _at(node)(ref.column),
                                "a loop has one state; read the other tensor at the step, "
                                f"or write its loop apart, e.g. {EXAMPLE}")
    if last_st.lhs.name != state:
        raise SymflopsError(f"the loop's last statement writes {last_st.lhs.name}, not its "
                            f"state {state}", _at(last_node)(last_st.lhs.column),
                            f"end the loop with the statement that writes {state}")
    position, time = _loop_letter(shifted[0][2], shifted[0][1])
    for st, node in items:
        at = _at(node)
        if time not in st.lhs.indices or st.lhs.shifts or st.lhs.gathers or st.accumulate:
            raise SymflopsError(f"{st.lhs.name} does not carry the loop letter {time!r} on its "
                                "output", at(st.lhs.column),
                                f"every statement of the loop writes one step of its output "
                                f"along {time}, e.g. {EXAMPLE}")
        if st.lhs.indices.count(time) != 1:
            raise SymflopsError(f"the loop letter {time!r} twice on {st.lhs.name}",
                                at(st.lhs.column), "write it once")
        for c in st.where:
            if time in (c.left, c.right):
                raise SymflopsError(f"a condition on the loop letter {time!r}", at(c.column),
                                    "a loop's statements restrict letters of one step only")
    where = {st.lhs.name: st.lhs.indices.index(time) for st, _ in items}
    readers: dict[str, int] = {}
    for k, (st, node) in enumerate(items):
        at = _at(node)
        for term, f, ref in _factors(st):
            if ref.name == state:
                _check_state_read(st, term, f, ref, state, time, where[state], at)
            elif ref.name in mine:
                if ref.shifts or ref.gathers or ref.indices[where[ref.name]] != time:
                    raise SymflopsError(f"{ref.name} read at another step than {time}",
                                        at(ref.column), f"only the state {state} is read one "
                                        f"step back; read {ref.name} at the step, "
                                        f"{ref.name}[..{time}..]")
                if outputs.index(ref.name) >= k:
                    raise SymflopsError(f"{ref.name} is read before the loop writes it",
                                        at(ref.column), "write the loop's statements in the "
                                        "order they run within a step")
            else:
                if ref.shifts or ref.gathers:
                    raise SymflopsError(f"a lookup or shifted index of {ref.name} inside a loop",
                                        at(ref.column), "compute it in an op before the loop; "
                                        f"the loop reads its inputs at the step {time}")
            if ref.name != state and ref.name in mine:
                readers[ref.name] = readers.get(ref.name, 0) + 1
            if hasattr(ref, "indices") and ref.indices.count(time) > 1:
                raise SymflopsError(f"the loop letter {time!r} twice on {ref.name}",
                                    at(ref.column), "read one step of it")
    unread = [n for n in outputs if n != state and n not in readers]
    if len(unread) != 1:
        st, node = items[0]
        what = ("every tensor the loop writes is read inside it" if not unread else
                f"{' and '.join(unread)} are read by no statement of the loop")
        raise SymflopsError(f"a loop has one output: {what}", _at(node)(st.lhs.column),
                            "the one tensor no statement of the loop reads is its output; "
                            f"the others it keeps for its backward pass, e.g. {EXAMPLE}")
    return LoopGroup(tuple(items), state, time, unread[0])


def _loop_letter(ref: Any, node: Any) -> tuple[int, str]:
    """The position and the letter of the state's step back, ``c`` of ``c-1``."""
    for k in range(len(ref.indices)):
        if _offset(ref, k) != 0:
            s = next(s for s in ref.shifts if s.position == k)
            return k, s.terms[0].letter
    raise AssertionError("a shifted reference without a shift")


def _check_state_read(st: Any, term: Any, f: Any, ref: Any, state: str, time: str,
                      position: int, at: Callable[[int], Span | None]) -> None:
    """The state read as the loop reads it: one step back, plainly, once per product."""
    if f is not ref:
        raise SymflopsError(f"the state {state} read under {f.name}(...)", at(f.column),
                            "a loop reads its state linearly, as a plain factor, e.g. "
                            f"{state}[..{time}-1..]")
    if not ref.shifts:
        raise SymflopsError(f"the state {state} read at the step {time} itself",
                            at(ref.column), f"a loop reads its state one step back, "
                            f"{state}[..{time}-1..]; the state of the step is read by the "
                            "next step")
    if ref.gathers:
        raise SymflopsError(f"a lookup in the state {state}", at(ref.column),
                            f"read it one step back with letters, {state}[..{time}-1..]")
    moved = [k for k in range(len(ref.indices)) if _offset(ref, k) != 0] or [ref.shifts[0].position]
    s = next(s for s in ref.shifts if s.position == moved[0])
    if len(moved) != 1 or moved[0] != position or _offset(ref, moved[0]) != -1 \
            or s.terms[0].letter != time:
        raise SymflopsError(f"{state}[...] read at {s.text}", at(s.column),
                            f"a loop reads its state at the previous step only, {time}-1 in "
                            f"the place of {time} on {state}'s output")
    if sum(1 for g in term.factors if getattr(g, "name", None) == state) > 1:
        raise SymflopsError(f"the state {state} read twice in one product", at(ref.column),
                            "a loop's step is linear in its state: read it once per product")


def _after(group: LoopGroup, rest: Sequence[tuple[Any, Any]]) -> None:
    """Nothing after the loop reads its state or what it keeps."""
    kept = set(group.outputs) - {group.output}
    for st, node in rest:
        refs = st.refs if hasattr(st, "lhs") else ()
        for ref in refs:
            if ref.name in kept:
                what = ("the loop's state" if ref.name == group.state
                        else f"kept by the loop over {group.time}")
                raise SymflopsError(f"{ref.name} is {what}: only the loop reads it",
                                    _at(node)(ref.column),
                                    f"read the loop's output {group.output}, or write another "
                                    f"statement of the loop")
        if not hasattr(st, "lhs"):
            for name in getattr(st, "reads", ()):
                if name in kept:
                    raise SymflopsError(f"{name} is kept by the loop over {group.time}: only "
                                        "the loop reads it", node.span,
                                        f"read the loop's output {group.output}")
