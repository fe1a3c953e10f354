"""What a sum of einsum products needs when its letters are split over a mesh.

Each term is contracted pairwise, in the order its cost is counted in
(:mod:`.orders`), and every pairwise step is one sharded product.  Along each
mesh axis, an operand of a step is *whole*, *split along a letter*, or holds
*partial sums* (each device a part of a sum over a letter split there); the
step follows the four cases of "How to Scale Your Model" (jax-ml/scaling-book
at 0819a7d, chapter 3, *Sharded Matrices and How to Multiply Them*):

1. no summed letter is split: each device multiplies its shards, and the
   result is split as its operands are (no communication);
2. a summed letter is split on one operand and the other carries it whole:
   that operand is gathered first (AllGather), as the book does;
3. a summed letter is split alike on both: each device sums its part, and the
   result holds partial sums (reduced at the end by an AllReduce, or by a
   ReduceScatter when the output is split along that axis);
4. the two operands are split along different letters over one axis: one of
   them is gathered, the one whose letter the output is not split along (the
   book: "which one we pick will be based on what sharding the following
   operations need").

Partial sums flow through later products linearly while the other operand is
whole along the axis; a product with an operand split along that axis needs
them reduced first.  At the end the result is brought to the output's
placement: gathered (AllGather), moved to another letter (AllToAll),
reduced (AllReduce, ReduceScatter), or sliced (free).

A lookup ``E[tok[b], d]`` reads rows by value.  Along an axis over which the
table's selected letter is split: with the index whole there, each device
reads the rows it holds and zeros elsewhere (partial sums: Megatron's
vocabulary-parallel embedding); with the index split along another letter,
the rows travel to the devices that asked for them (an AllToAll: an MoE's
dispatch and combine), unless both letters count rows of tokens split alike
(``Layout.rows``: each device's slots hold its own tokens).  A shifted or
offset index along a split letter (a convolution's halo, a concatenation's
part) is refused: not modelled.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import sympy

from ...core.ir import Einsum, selections
from ...core.records import Tree
from ...core.sharding import Axes, Collective, Layout, Need, OpSplit, Width
from ..base import Unit
from .cost import _joins, einsum_elementwise
from .orders import _kept, pattern, steps, written
from .placement import FLAT, PARTIAL, _Node, _Placement
from .search import cheapest

#: The collectives that sum partial sums.
REDUCE = ("AllReduce", "ReduceScatter")


class _Term(_Placement):
    """The analysis of one term: leaves, steps, then the root against the output."""

    def __init__(self, e: Einsum, extents: Mapping[str, sympy.Expr], layout: Layout,
                 widths: Mapping[str, Width], unit: Unit, tree: Tree | None) -> None:
        self.e, self.extents, self.layout, self.widths = e, extents, layout, widths
        self.sizes = layout.size_map
        self.pattern = pattern(e)
        self.chosen = selections(e.operands)
        self.factors = e.factors
        n = len(self.factors)
        self.tree = tree if tree is not None else written(n) if n else 0
        self.steps = steps(e, extents, unit, self.tree) if n else ()
        self.actions: dict[tuple[int, Collective], list[tuple[str, str]]] = {}
        self.nodes: list[_Node] = []
        self.masked: dict[int, str] = {}   # leaves read through a lookup of rows split elsewhere
        self.summed: dict[int, dict[str, str]] = {}  # node -> axis -> the letter it holds partial sums of
        self.split: dict[str, set[str]] = {}
        self.target = self._target()

    def _node(self, name: str, letters: frozenset[str], width: Width,
              state: dict[str, str | None]) -> _Node:
        node = _Node(name, letters, width, state)
        self.nodes.append(node)
        return node

    def _act(self, node: _Node | int, kind: Collective, axis: str, reason: str) -> None:
        index = node if isinstance(node, int) else self.nodes.index(node)
        self.actions.setdefault((index, kind), []).append((axis, reason))

    # -- steps ---------------------------------------------------------------------------
    def run(self) -> tuple[sympy.Expr, sympy.Expr, int | None]:
        """Walk the tree (children before parents, as :func:`.orders.steps`
        counts them); the per-device FLOPs and the root node."""
        if not self.factors:
            return sympy.Integer(0), sympy.Integer(0), None
        flops = elementwise = sympy.Integer(0)
        cursor = iter(self.steps)
        if len(self.factors) == 1:
            root = self._leaf(0)
            step = next(cursor, None)
            if step is not None:  # a lone reduction (or scatter) of the one operand
                root, divisor = self._reduce(root, step.summed)
                flops, elementwise = self._add(step, divisor, flops, elementwise)
            return flops, elementwise, root

        def walk(t: Tree) -> tuple[frozenset[int], int]:
            if isinstance(t, int):
                return frozenset((t,)), self._leaf(t)
            (a, left), (b, right) = walk(t[0]), walk(t[1])
            step = next(cursor)
            kept = _kept(self.pattern, a | b)
            node, divisor = self._step(left, right, kept)
            nonlocal flops, elementwise
            flops, elementwise = self._add(step, divisor, flops, elementwise)
            return a | b, node

        _, root = walk(self.tree)
        return flops, elementwise, root

    @staticmethod
    def _add(step, divisor, flops, elementwise):
        if step.bucket == "flops":
            return flops + step.cost / divisor, elementwise
        return flops, elementwise + step.cost / divisor

    def _reduce(self, index: int, summed: frozenset[str]) -> tuple[int, sympy.Expr]:
        """A one-operand step that sums ``summed`` away."""
        leaf = self.nodes[index]
        state: dict[str, str | None] = {}
        divisor = sympy.Integer(1)
        for a in self.layout.axes:
            s = leaf.state[a]
            if s is not None and s not in (PARTIAL, FLAT):
                divisor *= self.sizes[a]
                self.split.setdefault(s, set()).add(a)
                # a scatter's position letters stay: rows that land by value (finish)
                if s in summed - self.pattern.scatter:
                    self.summed.setdefault(len(self.nodes), {})[a] = s
                    s = PARTIAL
            elif s == PARTIAL and a in self.summed.get(index, {}):
                self.summed.setdefault(len(self.nodes), {})[a] = self.summed[index][a]
            state[a] = s
        node = self._node(f"Σ {leaf.name}", leaf.letters - summed, "activations", state)
        return self.nodes.index(node), divisor

    def _coherent(self, left: int, right: int) -> None:
        """A letter split over several axes must be split alike on both
        operands (the same axes, hence the same blocks): where the two split it
        over different sets of axes, the one split over fewer is gathered
        over those (its blocks would not nest in the other's)."""
        L, R = self.nodes[left], self.nodes[right]
        cover = [{}, {}]
        for k, node in enumerate((L, R)):
            for a in self.layout.axes:
                x = node.state[a]
                if x not in (None, PARTIAL, FLAT):
                    cover[k].setdefault(x, set()).add(a)
        for x in set(cover[0]) & set(cover[1]):
            if cover[0][x] == cover[1][x]:
                continue
            side = right if len(cover[1][x]) <= len(cover[0][x]) else left
            other = cover[0][x] if side == right else cover[1][x]
            node = self.nodes[side]
            for a in sorted(cover[1][x] if side == right else cover[0][x]):
                self._act(side, "AllGather", a,
                          f"{node.name} splits {x} over {a}, the other operand over "
                          f"{', '.join(sorted(other))}: blocks that do not nest")
                node.state[a] = None

    def _step(self, left: int, right: int, kept: frozenset[str]) -> tuple[int, sympy.Expr]:
        self._coherent(left, right)
        L, R = self.nodes[left], self.nodes[right]
        state: dict[str, str | None] = {}
        divisor = sympy.Integer(1)
        here = len(self.nodes)  # the index the step's node will take
        for a in self.layout.axes:
            s, split = self._resolve(a, left, right, kept)
            state[a] = s
            # the letter summed here, or carried from an operand
            letter = split or self.summed.get(left, {}).get(a) or self.summed.get(right, {}).get(a)
            if s == PARTIAL and letter:
                self.summed.setdefault(here, {})[a] = letter
            if split is not None:
                divisor *= self.sizes[a]
                self.split.setdefault(split, set()).add(a)
        name = f"{L.name} {R.name}" if " " not in L.name + R.name else f"({L.name}) ({R.name})"
        node = self._node(name, kept, "activations", state)
        return self.nodes.index(node), divisor

    def _resolve(self, a: str, left: int, right: int, kept: frozenset[str]
                 ) -> tuple[str | None, str | None]:
        """The state of the step's result along ``a`` and the letter its work
        is split along there (None: every device does all of it)."""
        L, R = self.nodes[left], self.nodes[right]
        sl, sr = L.state[a], R.state[a]
        # partial sums meet a split operand: reduce them first
        if sl == PARTIAL and sr == PARTIAL:
            self._act(right, "AllReduce", a, f"two partial sums over {a} cannot be multiplied: "
                                            f"one is summed first")
            sr = None
        for mine, other, side in ((sl, sr, left), (sr, sl, right)):
            if mine == PARTIAL and other not in (None, PARTIAL):
                node = self.nodes[side]
                if other in node.letters:
                    self._act(side, "ReduceScatter", a, f"partial sums over {a} meet an operand "
                                                       f"split along {other}: summed and split")
                    mine = other
                else:
                    self._act(side, "AllReduce", a, f"partial sums over {a} meet an operand "
                                                   f"split along {other}: summed first")
                    mine = None
                if side == left:
                    sl = mine
                else:
                    sr = mine
        if PARTIAL in (sl, sr):  # the other operand is whole along a: linear, stays partial
            return PARTIAL, None
        if sl is None and sr is None:
            return None, None
        target = self.target[a]
        if sl is not None and sr is not None and sl != sr:
            keep_left = (sl == target or (sr != target and (sl in kept or sr not in kept)))
            gone, kept_letter, gone_letter = (right, sl, sr) if keep_left else (left, sr, sl)
            self._act(gone, "AllGather", a,
                      f"{self.nodes[gone].name} is split along {gone_letter} over {a}, the "
                      f"other operand along {kept_letter}: one axis cannot split both")
            if keep_left:
                sr = None
            else:
                sl = None
        x = sl if sl is not None else sr
        if sl == sr:  # both split alike along x
            return (x if x in kept else PARTIAL), x
        whole = R if sl is not None else L
        if x in kept:
            return x, x
        if x in whole.letters:  # case 2: gather the split operand
            side = left if sl is not None else right
            self._act(side, "AllGather", a,
                      f"the summed letter {x} of {self.nodes[side].name} is split over {a}, and "
                      f"{whole.name} holds it whole")
            return None, None
        return PARTIAL, x

    # -- the root against the output ----------------------------------------------------
    def finish(self, root: int | None) -> None:
        out = self.e.output.tensor
        if root is None:
            return
        why = self.masked.get(root)
        if why is None and self.factors and len(self.steps) <= 1:
            why = self.masked.get(0)
        node = self._node(out, frozenset(self.e.output.indices), self._width(out),
                          dict(self.nodes[root].state))
        source, root = self.summed.get(root, {}), len(self.nodes) - 1
        for a in self.layout.axes:
            s, t = node.state[a], self.target[a]
            if s in self.pattern.scatter:
                # rows split along a letter that picks their place in the output
                # through a lookup (a scatter-add): they add into the same output
                # rows on every device, unless the output is split along the
                # letter they pick, where they travel to the rows' owners
                picked = [y for y, by in self.chosen.items() if s in by]
                if t is None or t == FLAT:
                    s = PARTIAL
                elif t in picked and self._aligned(s, t):
                    continue
                else:
                    rows = self._node(f"rows of {out}", (self.nodes[root - 1].letters
                                                         | self.pattern.scatter)
                                      - frozenset(self.chosen), "activations", dict(node.state))
                    rows.width = node.width
                    self._act(rows, "AllToAll", a,
                              f"each row adds into the place its lookup picks: the rows split "
                              f"along {s} over {a} travel to where {out}'s {t} is")
                    continue
            if s == PARTIAL:
                # scattered along t only where the result's other splits of t stay: a
                # block of t cut again over a does not nest in the blocks a later
                # gather or move of t wants (then summed whole here, sliced after)
                kind: Collective = "ReduceScatter" if t is not None and not any(
                    node.state[b] == t and self.target[b] != t
                    for b in self.layout.axes if b != a) else "AllReduce"
                letter = source.get(a)
                self._act(root, kind, a, (why + ": each device reads the rows it holds, zeros "
                                          "elsewhere") if why else
                          f"the sum over {letter}, split over {a}, leaves each device a "
                          f"partial sum" if letter else f"partial sums over {a}")
                # reduced before the gathers and moves below (their sizes count it)
                node.state[a] = t if kind == "ReduceScatter" else None
            elif s is not None and t != s and t != FLAT:
                if t is None:
                    self._act(root, "AllGather", a, f"the product is split along {s} over {a}; "
                                                    f"{out} is wanted whole")
                else:
                    self._act(root, "AllToAll", a, f"the product is split along {s} over {a}, "
                                                   f"{out} along {t}")

    def root_divisor(self, root: int | None) -> sympy.Expr:
        if root is None:  # a term of no tensor (a constant, an indicator): made in place
            return sympy.Mul(*(self.sizes[a] for a in self.layout.axes
                               if self.target[a] is not None))
        node = self.nodes[root]
        return sympy.Mul(*(self.sizes[a] for a in self.layout.axes
                           if node.state[a] not in (None, PARTIAL, FLAT)))

    def needs(self) -> list[Need]:
        out = []
        target = self.e.output.tensor
        for (index, kind), acts in self.actions.items():
            node = self.nodes[index]
            axes = tuple(dict.fromkeys(a for a, _ in acts))
            # the reductions of one node run first, each on its partial block
            skip = set(axes) | ({b for (i, k), more in self.actions.items() if i == index
                                 and k in REDUCE for b, _ in more} if kind in REDUCE else set())
            kept_split = sympy.Mul(*(self.sizes[b] for b in self.layout.axes if b not in skip
                                     and node.state.get(b) not in (None, PARTIAL, FLAT)))
            elements = sympy.Mul(*(self.extents[x] for x in sorted(node.letters))) / kept_split
            out.append(Need(kind, axes, node.name, tuple(sorted(node.letters)),
                            sympy.expand(elements), acts[0][1], node.width,
                            target if kind in ("AllReduce", "ReduceScatter") else ""))
        return out


def split_terms(terms: Sequence[Einsum], extents: Mapping[str, sympy.Expr], layout: Layout,
                widths: Mapping[str, Width] | None = None, unit: Unit = "FLOPs",
                trees: Sequence[Tree | None] | None = None) -> OpSplit:
    """One device's share of the work of ``sum(terms)`` and the collectives it
    needs under ``layout``; each term contracted in its tree (default: as written)."""
    widths = widths or {}
    flops = elementwise = sympy.Integer(0)
    needs: list[Need] = []
    split: dict[str, set[str]] = {}
    for k, e in enumerate(terms):
        term = _Term(e, extents, layout, widths, unit, trees[k] if trees else None)
        f, w, root = term.run()
        term.finish(root)
        flops += f
        elementwise += w + einsum_elementwise(e, extents) / term.root_divisor(root)
        needs += term.needs()
        for letter, axes in term.split.items():
            split.setdefault(letter, set()).update(axes)
    if len(terms) > 1:
        out = terms[0].output
        p = layout.placement(out.tensor)
        divisor = p.divisor(layout.size_map) if p is not None else sympy.Integer(1)
        elementwise += _joins(terms, extents) / divisor
    order = layout.axes
    return OpSplit(sympy.expand(flops), sympy.expand(elementwise), tuple(needs),
                   tuple((x, tuple(a for a in order if a in axes)) for x, axes in split.items()))


def term_trees(terms: Sequence[Einsum], extents: Mapping[str, sympy.Expr], unit: Unit,
               order: str) -> tuple[Tree, ...]:
    """The order each term is contracted in, as its cost counts it: as
    written, or (``cheapest``, and always for a rule) the cheapest order, the
    first candidate where the cheapest orders cross."""
    out = []
    for e in terms:
        n = len(e.factors)
        if order == "written" or n <= 2:
            out.append(written(n) if n else 0)
        else:
            out.append(cheapest(e, extents, unit)[0][0].tree)
    return tuple(out)
