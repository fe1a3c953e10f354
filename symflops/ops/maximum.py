"""The maximum over named letters: ``Y[s] = max_t(A[s,t])``, and max-pooling
``Y[b,c,p] = max_k(X[b,c,p+k])`` over a window.

The argument is one tensor read as the einsum lowering reads it: plain
letters, and shifted positions ``p+k`` (lowered to a fresh letter ``q`` and the
indicator ``[q = p + k]``, kept in :attr:`Maximum.selections`; any other
indicator the lowering makes for an index expression is carried the same
way, never interpreted here except through the einsum's own NumPy
evaluation).  The reduced letters are ``max_t`` or, over several,
``max_{u,v}``; a reduced letter that only a shift carries (the window ``k``)
ranges over the dim of its upper-cased name (:mod:`symflops.declaration.letters`).
The output has the argument's other letters, in any order.

**Backward, derived by SymPy.**  For an element ``X[b,c,q]`` of the window of
``Y[b,c,p]``, ``Y[b,c,p] = Max(X[b,c,q], m)`` with ``m`` the maximum of the
window's other elements (independent of ``X[b,c,q]``); SymPy differentiates
it to ``Heaviside(X[b,c,q] - m)``: 1 where ``X[b,c,q]`` is the window's
maximum, 0 elsewhere.  That indicator is read off as ``[q = I_Y[b,c,p]]``,
with ``I_Y`` the position of the maximum on the input's axis, saved by the
forward pass; the chain rule sums over the outputs, and the rule is the
scatter ``dX[b,c,q] = dY[b,c,p] [q = I_Y[b,c,p]]``.

**Ties.**  Where several elements are equal to the maximum, ``Heaviside(0)``
is no answer; the convention is PyTorch's ``torch.max(dim)`` and
``F.max_pool1d``'s: the whole gradient goes to one element, the *first*
maximum (lowest position in the order of the reduced letters, the first
listed slowest), which is what ``I_Y`` holds.  ``torch.amax`` splits it evenly
among the ties instead; the indicator ``[X[b,c,q] = Y[b,c,p]]`` would give
each tie the whole gradient (neither).  ``verify``'s PyTorch forward uses
``torch.max(dim)``.

**Saved.**  One integer per output element and per input letter that the
output lacks (``I_Y``; ``I_Y_q``, ``I_Y_r`` when there are several, by letter),
not the input and the output: ``B·C·P`` integers against
``B·C·(P + K - 1) + B·C·P`` numbers.  Memory counts them as elements at the
policy's activation width, as it counts a lookup's ids; PyTorch keeps int64,
8 bytes each.

**Cost.**  A row of ``N`` elements (``N`` the product of the reduced letters'
extents, the window) takes ``N - 1`` comparisons, each one FLOP in the
elementwise bucket; keeping the argmax is bookkeeping, counted 0.  The
backward is counted from the derived rule by the einsum machinery: a scatter
adds each element of ``dY`` into ``dX`` (``B·C·P`` adds for the pooling, 0 for
``Y[s] = max_t(A[s,t])`` where every gradient lands on an element of its own).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from typing import Any, Mapping, NoReturn, Sequence

from ..core.lazy import numpy as np
import sympy

from ..core.errors import Span, SymflopsError
from ..core.ir import SELECT, Einsum, Factor, Order
from ..core.records import IndexTerm, OpCost, Rule
from .base import Choice, Scope, Unit
from .derivation import Reduction, ReductionOp, index_symbol, reduction_rule
from .einsum.lower import _lookups as index_factors  # the lowering's own: strides come with it
from .einsum.numeric import run_einsum
from .reductions import unused_name


# -------------------------------------------------------- the derivation --

@functools.lru_cache(maxsize=None)
def max_rule(out: Factor, inp: Factor, index: tuple[str, ...], saved: tuple[Factor, ...],
             index_dims: tuple[tuple[str, sympy.Expr], ...]) -> Reduction:
    """The backward rule of ``out = max over index of inp``, derived by SymPy.
    ``saved`` are the argmax positions, one per letter of ``inp`` not on
    ``out``, each indexed by ``out``'s letters."""
    X = sympy.IndexedBase(inp.tensor, real=True)
    element = X[tuple(index_symbol(i) for i in inp.indices)]
    generic = {i: f"{i}'" for i in inp.indices}
    wrt = X[tuple(index_symbol(generic[i]) for i in inp.indices)]
    # m: the maximum of the window's other elements, a function of theirs only.
    m = sympy.IndexedBase(unused_name("m", (out.tensor, inp.tensor, *(f.tensor for f in saved))),
                          real=True)[tuple(index_symbol(i) for i in (*out.indices, *index))]
    forward = sympy.Max(element, m)
    derivative = forward.diff(wrt)
    positions = tuple(i for i in inp.indices if i not in out.indices)
    at_max = sympy.Mul(*(sympy.KroneckerDelta(index_symbol(i), _element(f))
                         for i, f in zip(positions, saved)))
    # Heaviside(x - m) is 1 exactly where x is the maximum: at the saved argmax.
    substituted = derivative.replace(lambda e: isinstance(e, sympy.Heaviside), lambda e: at_max)
    if substituted.has(sympy.Heaviside, sympy.Max) or not substituted.has(sympy.KroneckerDelta):
        raise AssertionError(f"max: unexpected derivative {derivative}")
    upstream = Factor("d" + out.tensor, out.indices)
    picks = tuple(Factor(f.tensor, (i, *f.indices), fn=SELECT) for i, f in zip(positions, saved))
    # The chain rule sums over every output and every element of its window.
    summed = tuple(dict.fromkeys((*out.indices, *positions)))
    scalar = (IndexTerm(sympy.Integer(1), (upstream, *picks),
                        tuple((i, generic[i]) for i in inp.indices), summed),)
    prime = {i: generic[i] for i in inp.indices}
    contracted = (IndexTerm(sympy.Integer(1), tuple(_renamed(f, prime) for f in (upstream, *picks)),
                            (), tuple(i for i in out.indices if i not in inp.indices)),)
    rule = (IndexTerm(sympy.Integer(1), (upstream, *picks), (), contracted[0].summed),)
    stages = (("forward", forward), ("derivative", derivative), ("substituted", substituted),
              ("scalar", scalar), ("contracted", contracted), ("rule", rule))
    lhs = Factor("d" + inp.tensor, inp.indices)
    return Reduction("max", out, inp, Factor(lhs.tensor, tuple(generic.values())), lhs, stages,
                     rule, saved, saved, (), index_dims)


def _element(f: Factor) -> sympy.Expr:
    """A saved position as SymPy reads it: ``I_Y[b,c,p]``, or a symbol for a scalar output."""
    if not f.indices:
        return sympy.Symbol(f.tensor, integer=True)
    return sympy.IndexedBase(f.tensor)[tuple(index_symbol(j) for j in f.indices)]


def _renamed(f: Factor, mapping: Mapping[str, str]) -> Factor:
    return Factor(f.tensor, tuple(mapping.get(i, i) for i in f.indices), fn=f.fn)


# -------------------------------------------------------------- the nodes --

class OverLetters(ReductionOp):
    """What the reductions over named letters share (max here, mean in
    :mod:`symflops.ops.mean`): fields ``out``, ``inp`` (one input) and
    ``index`` (the reduced letters), and a ``reduction()`` giving the rule."""

    @property
    def inputs(self) -> tuple[str, ...]:
        return (self.inp.tensor,)  # type: ignore[attr-defined]

    def called(self, stem: str) -> str:
        """The call's name as a statement writes it: ``max_k``, ``max_{u,v}``."""
        index = self.index  # type: ignore[attr-defined]
        return f"{stem}_" + (index[0] if len(index) == 1 else "{" + ",".join(index) + "}")

    def rows_and_window(self) -> tuple[sympy.Expr, sympy.Expr]:
        """How many output elements, and how many elements each reduces."""
        d = self.dims()
        return (sympy.Mul(*(d[i] for i in self.out.indices)),  # type: ignore[attr-defined]
                sympy.Mul(*(d[i] for i in self.index)))  # type: ignore[attr-defined]

    def rules(self, number: int, targets: Sequence[str] = ()) -> tuple[Rule, ...]:
        """The rule for its one input, with the derivation's stages as steps."""
        red = self.reduction()  # type: ignore[attr-defined]
        return (reduction_rule(red, self.inp.tensor, number, red.einsums(), self.dims()),)  # type: ignore[attr-defined]


@dataclass(frozen=True)
class Maximum(OverLetters):
    """``out = max_index(inp ...)``: ``inp`` is the argument with its fresh
    letters and ``selections`` the indicators its index expressions lowered
    to; ``aux`` are the argmax positions it saves."""

    out: Factor
    inp: Factor
    index: tuple[str, ...]
    selections: tuple[Factor, ...]
    index_dims: tuple[tuple[str, sympy.Expr], ...]
    text: str = ""
    span: Span | None = field(default=None, compare=False)
    kind = "max"

    @property
    def positions(self) -> tuple[str, ...]:
        """The input's letters the output lacks: where each maximum sits."""
        return tuple(i for i in self.inp.indices if i not in self.out.indices)

    @property
    def aux(self) -> tuple[Factor, ...]:
        one = len(self.positions) == 1
        return tuple(Factor(f"I_{self.output}" + ("" if one else f"_{i}"), self.out.indices)
                     for i in self.positions)

    @property
    def aux_description(self) -> str:
        axes = ", ".join(self.positions)
        return (f"argmax saved by max: where each {self.output} element's first maximum is on "
                f"{self.inp.tensor}'s {'axis' if len(self.positions) == 1 else 'axes'} {axes} "
                "(integers)")

    def _window(self) -> Einsum:
        """The argument as an einsum over the output's and the reduced letters."""
        return Einsum(Factor("W", (*self.out.indices, *self.index)), (self.inp, *self.selections))

    def statement(self) -> str:
        argument = self._window().statement(where=False).split(" = ", 1)[1]
        return f"{self.out} = {self.called('max')}({argument})"

    def reduction(self) -> Reduction:
        return max_rule(self.out, Factor(self.inp.tensor, self.inp.indices), self.index, self.aux,
                        self.index_dims)

    def reads(self) -> tuple[Einsum, ...]:
        """It reads its argument window by window."""
        return (Einsum(self.out, (self.inp, *self.selections)),)

    def cost(self, unit: Unit, order: Order = "written", sizes: tuple[tuple[str, int], ...] = (),
             choice: Choice = "declared") -> OpCost:
        """``N - 1`` comparisons per output element, ``N`` the window."""
        rows, window = self.rows_and_window()
        return OpCost(sympy.Integer(0), sympy.expand(rows * (window - 1)))

    # ------------------------------------------------------- forwards --

    @property
    def _letters(self) -> tuple[str, ...]:
        """The window's letters: the output's, then the reduced ones."""
        return (*self.out.indices, *self.index)

    def _grids(self, extents: Mapping[str, int]) -> dict[str, np.ndarray]:
        """For each input letter the output lacks, its value at each (output,
        reduced) tuple, as integers over the window's letters (extent 1 along
        those it does not depend on): the letter itself when it is reduced,
        else the position its indicators give (``q = p + k``)."""
        out: dict[str, np.ndarray] = {}
        for x in self.positions:
            if x in self.index:
                grid, on = np.arange(extents[x]), (x,)
            else:
                ramp = unused_name("ramp", (self.inp.tensor,))
                mine = tuple(f for f in self.selections if x in f.indices)
                on = tuple(dict.fromkeys(i for f in mine for i in f.indices if i != x))
                e = Einsum(Factor("G", on), (Factor(ramp, (x,)), *mine))
                grid = np.rint(run_einsum(e, {ramp: np.arange(extents[x], dtype=float)}, extents))
            order = sorted(on, key=self._letters.index)
            grid = np.transpose(grid, [on.index(i) for i in order])
            out[x] = grid.reshape([extents[i] if i in on else 1 for i in self._letters]).astype(np.int64)
        return out

    def _at_max(self, lib: Any, grid: Any, arg: Any, extents: Mapping[str, int]) -> Any:
        """``grid`` (over the window's letters) at each output's argmax ``arg``
        (flat over the reduced letters), with NumPy or PyTorch (``lib``)."""
        rows = self.out.indices
        if not rows:  # a 0-d index would be read as a number (torch: .item(), not on meta)
            arg = arg.reshape(1)
        chosen = lib.unravel_index(arg, tuple(extents[i] for i in self.index))
        where = []
        for k, letter in enumerate(self._letters):
            if grid.shape[k] == 1:
                where.append(0)
            elif letter in rows:
                where.append(lib.arange(extents[letter]).reshape(
                    [extents[letter] if j == letter else 1 for j in rows]))
            else:
                where.append(chosen[self.index.index(letter)])
        return grid[tuple(where)] if rows else grid[tuple(where)].reshape(())

    def _extents(self, dims: Mapping[str, int] | None) -> dict[str, int]:
        if dims is None:
            raise ValueError("max needs the dims to size its window")
        return {i: int(e.subs({s: dims[str(s)] for s in e.free_symbols})) for i, e in self.index_dims}

    def run(self, values: Mapping[str, np.ndarray], extents: Mapping[str, int] | None = None,
            dims: Mapping[str, int] | None = None) -> dict[str, np.ndarray]:
        """The window of every output element, its maximum and the first argmax."""
        extents = dict(extents) if extents is not None else self._extents(dims)
        window = run_einsum(self._window(), values, extents, dims)
        flat = window.reshape(*window.shape[:len(self.out.indices)], -1)
        arg = flat.argmax(axis=-1)  # NumPy's argmax: the first maximum
        result = {self.output: np.take_along_axis(flat, arg[..., None], -1)[..., 0]}
        for grid, f in zip(self._grids(extents).values(), self.aux):
            result[f.tensor] = np.broadcast_to(self._at_max(np, grid, arg, extents), arg.shape).copy()
        return result

    def torch(self, torch: Any, values: Mapping[str, Any],
              dims: Mapping[str, int] | None = None) -> dict[str, Any]:
        """PyTorch's own gather and ``torch.max(dim)`` (its backward sends the
        gradient to the index it returns), for the verifier."""
        extents = self._extents(dims)
        x = values[self.inp.tensor]
        grids = {k: torch.as_tensor(g, device=x.device) for k, g in self._grids(extents).items()}
        if self.selections:
            window = x[tuple(grids[i] if i in grids else torch.arange(extents[i], device=x.device)
                             .reshape([extents[i] if j == i else 1 for j in self._letters])
                             for i in self.inp.indices)]
        else:  # plain letters: a view of the input
            window = x.permute([self.inp.indices.index(i) for i in self._letters])
        flat = window.reshape(*window.shape[:len(self.out.indices)], -1)
        y, arg = torch.max(flat, dim=-1)
        result = {self.output: y}
        for grid, f in zip(grids.values(), self.aux):
            result[f.tensor] = self._at_max(torch, grid, arg, extents).expand(arg.shape)
        return result

    def latex(self, m: Any) -> str:
        """``Y_{bcp} = \\max_{k} X_{b,c,p+k}``."""
        return (rf"{m.ix(self.out)} = \max_{{{','.join(self.index)}}} "
                + m.einsum_rhs(self._window()))


# ------------------------------------------------------- the statement --

_NAME = re.compile(r"max_([A-Za-z_][A-Za-z0-9_]*|\{[^{}]*\})\Z")


def reduced_letters(call: Any, pattern: re.Pattern[str]) -> tuple[str, ...]:
    """The letters a call reduces: its braced list, or what follows its stem."""
    if call.reduced:
        return tuple(r.letter for r in call.reduced)
    found = pattern.match(call.name)
    assert found is not None
    return (found.group(found.lastindex or 0),)


def not_inline(call: Any, scope: Scope, example: str) -> NoReturn:
    """Refuse a reduction call inside a product or a sum."""
    raise SymflopsError(f"{call.name}(...) must be the whole right side", scope.at(call.column),
                        f"write it as an op of its own, e.g. '{example}', and use its output "
                        "in the next op")


def check_whole(call: Any, statement: Any, out: Factor, scope: Scope, index: tuple[str, ...],
                what: str, example: str) -> tuple[str, ...]:
    """The checks a reduction call takes as a whole statement: alone on the
    right side, no where-clause, one tensor without lookups, each reduced
    letter one the argument reads, the output its other letters.  Returns
    the argument's letters as written (a shift's two letters in place of its
    fresh one)."""
    at, ref = scope.at, call.ref
    if len(statement.terms) != 1 or statement.terms[0].negative or len(statement.terms[0].factors) != 1:
        not_inline(call, scope, example)
    if statement.where:
        raise SymflopsError(f"a where-clause on {call.name}(...) is not supported",
                            at(statement.where[0].column),
                            f"{what} takes every element of its rows; a restricted row (a causal "
                            "mask, a sliding window) cannot be written for it yet")
    if call.argument is not None:
        raise SymflopsError(f"{call.name} takes one tensor", at(call.argument.column),
                            f"write {call.name}({ref.name}[...])")
    if ref.gathers:
        raise SymflopsError(f"a lookup inside {call.name}(...)", at(ref.gathers[0].ref.column),
                            "write the lookup as an op of its own, e.g. 'X[b,d] = E[tok[b], d]', "
                            f"and apply {call.name} to X")
    fresh = {ref.indices[s.position] for s in ref.shifts}
    written = [i for i in ref.indices if i not in fresh]
    written += [x for s in ref.shifts for x in (s.left, s.right)]
    if len(set(written)) != len(written):
        raise SymflopsError(f"{call.name} of a diagonal is not supported", at(ref.column),
                            "take the diagonal in an op of its own (e.g. 'D[i] = A[i,i]') and "
                            f"apply {call.name} to it")
    for letter in index:
        if letter not in written:
            raise SymflopsError(
                f"{what} over {letter!r}, an index {ref.name}[...] does not have", at(call.column),
                f"reduce over letters of {ref.name}[...]: one of {', '.join(written)}")
    rows = [i for i in written if i not in index]
    if sorted(out.indices) != sorted(rows):
        lhs = f"{out.tensor}[{','.join(out.indices)}]"
        kept = [i for i in index if i in out.indices]
        problem = (f"keeps the reduced index {kept[0]!r}" if kept
                   else f"must carry the argument's letters other than {', '.join(index)}: "
                        f"{','.join(rows) or '(none)'}")
        raise SymflopsError(f"the output {lhs} {problem}", out.span,
                            f"write '{out.tensor}[{','.join(rows)}] = {call.name}(...)': the "
                            "reduced letters leave the output")
    return tuple(written)


class MaxCall:
    """The statement form ``Y[s] = max_t(A[s,t])`` (``max_{t,u}`` over several
    letters; ``Y[b,c,p] = max_k(X[b,c,p+k])`` over a window), checked."""

    usage = "max_i as a whole statement (max_{i,j} over several; max_k(X[b,c,p+k]) pools)"

    def claims(self, name: str) -> bool:
        return _NAME.match(name) is not None

    def window_letters(self, call: Any) -> tuple[str, ...]:
        """The letters it reduces, which may be a window's (read by
        :mod:`symflops.declaration.letters`)."""
        return reduced_letters(call, _NAME)

    def whole(self, call: Any, statement: Any, out: Factor, scope: Scope) -> Maximum:
        index = reduced_letters(call, _NAME)
        check_whole(call, statement, out, scope, index, "max",
                    f"Y[s] = {call.name}(A[s,{index[0]}])")
        ref, at = call.ref, scope.at
        # The indicators the einsum lowering reads the argument's index expressions as.
        selections = tuple(index_factors(ref, scope))
        letters = dict.fromkeys((*out.indices, *index, *ref.indices))
        return Maximum(out, Factor(ref.name, ref.indices, at(ref.column)), index, selections,
                       tuple((i, scope.extents[i]) for i in letters), scope.text, scope.span)

    def inline(self, call: Any, out: Factor, scope: Scope) -> Maximum:
        not_inline(call, scope, f"Y[s] = {call.name}(A[s,t])")


MAX = MaxCall()
