"""Where one term of a sharded einsum starts and where it must end: the
state of each array along each mesh axis (whole, split along a letter,
partial sums, or ZeRO's flat shards), for the output as it is placed and for
each operand as it is read (a mixin of the term's analysis in :mod:`.split`).

An operand split along its own letters starts split there; one stored in
flat shards is gathered first (AllGather).  An operand read through a lookup
(``E[tok[b], d]``) whose selected letter is split holds partial sums where
the index is whole (each device reads the rows it holds), and its rows
travel (AllToAll) where the index is split along another letter, unless
both letters count rows of tokens split alike (``Layout.rows``).  A shifted
or offset index along a split letter is refused.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import sympy

from ...core.ir import Einsum, Factor
from ...core.sharding import Layout, NotSplittable, Width

#: Along one mesh axis, an array is whole (None), split along a letter, holds
#: partial sums, or (a leaf only) is split along no letter (ZeRO's flat shards).
PARTIAL = "\x00partial"
FLAT = "\x00flat"


@dataclass
class _Node:
    name: str                      # a tensor, or the product of the leaves below it
    letters: frozenset[str]
    width: Width
    state: dict[str, str | None]   # per mesh axis, at the time of its step


class _Placement:
    """The output's placement and each leaf's; the term's analysis provides
    the term, its layout, its nodes, ``_node`` and ``_act``."""

    e: Einsum
    extents: Mapping[str, sympy.Expr]
    layout: Layout
    widths: Mapping[str, Width]
    pattern: Any
    chosen: Any
    factors: Any
    nodes: list[_Node]
    masked: dict[int, str]
    _node: Any
    _act: Any

    # -- the output's placement, per axis --------------------------------------------
    def _target(self) -> dict[str, str | None]:
        out = self.e.output
        letters = self.layout.letters(out)
        flat = self.layout.flat(out.tensor)
        state: dict[str, str | None] = {a: None for a in self.layout.axes}
        for letter, axes in letters.items():
            for a in axes:
                state[a] = letter
        for a in flat:
            state[a] = FLAT
        return state

    # -- leaves --------------------------------------------------------------------------
    def _width(self, tensor: str) -> Width:
        return self.widths.get(tensor, "activations")

    def _leaf(self, k: int) -> int:
        f = self.factors[k]
        letters = self.layout.letters(f)
        flat = self.layout.flat(f.tensor)
        on = {a: x for x, axes in letters.items() for a in axes}
        select = {i: g for g in self.e.operands if g.is_select for i in g.indices[:1]}
        name = f.tensor
        picked = [i for i in f.indices if i in self.chosen]
        if picked and all(i in select for i in picked):
            name = f"{f.tensor}[{','.join(select[i].tensor for i in picked)}]"
        node = self._node(name, self.pattern.leaves[k], self._width(f.tensor), {})
        for a in self.layout.axes:
            x = on.get(a)
            if a in flat:
                self._act(node, "AllGather", a, f"{f.tensor} is stored in shards over {a} "
                                                 f"(ZeRO-3, FSDP) and used whole")
                state = None
            elif x is not None and x in self.chosen:
                if x not in select:
                    raise NotSplittable(f"the letter {x} of {f.tensor} is split over {a}, and "
                                        f"{f.tensor} is read at a shifted or offset position "
                                        f"along it (a halo or a part of a concatenation), "
                                        f"which symflops does not model")
                index = select[x]
                y = self._index_letter(index, a)
                if y is None:
                    state = PARTIAL
                    self.masked[len(self.nodes) - 1] = (f"{f.tensor}'s selected letter {x} is "
                                                        f"split over {a}")
                elif self._aligned(x, y):
                    state = y
                else:
                    self._act(node, "AllToAll", a,
                              f"the rows of {f.tensor} that {index.tensor} selects live where "
                              f"{f.tensor}'s {x} is split over {a}, and are wanted where "
                              f"{index.tensor}'s {y} is")
                    state = y
            elif x is not None:
                state = x
            else:
                state = None
                for i in picked:
                    if i in select:
                        y = self._index_letter(select[i], a)
                        if y is not None:
                            state = y  # the table is whole: each device reads the rows it asks for
            node.state[a] = state
        return len(self.nodes) - 1

    def _index_letter(self, index: Factor, axis: str) -> str | None:
        """The letter of an index tensor (``tok[b,s]``) split over ``axis``."""
        letters = self.layout.letters(Factor(index.tensor, index.indices[1:]))
        for x, axes in letters.items():
            if axis in axes:
                return x
        return None

    def _aligned(self, x: str, y: str) -> bool:
        rows = self.layout.rows

        def is_row(letter: str) -> bool:
            extent = self.extents.get(letter)
            return extent is not None and bool(sympy.sympify(extent).free_symbols & rows)
        return is_row(x) and is_row(y)
