"""Concatenation along one axis: ``K[b,t,e] = concat_t(K_mem[b,m,e], K_new[b,s,e])``.

The output letter ``t`` runs over the sum of the parts' extents along the
joined axis (``M + S``); each part carries the output's other letters, in any
order, and one letter of its own for the joined axis (``m``, ``s``).  Any
number of parts (at least two), along any axis.  A part may lack some of the
output's other letters: it is broadcast along them (MLA's rotary key
``kr[t,r]``, shared by the heads of ``K[t,n,e] = concat_e(Kc[t,n,c], kr[t,r])``);
its gradient then sums over them, ``dkr[t,r] = sum_n dK[t,n,C+r]``, one add
per element read (elementwise, as every lone reduction).

Invariants:

* the joined letter's extent is the sum of the parts' (bound here, before the
  statement's other letters; a part that reuses the joined letter, or a later
  op that reads the output over another extent, is refused with its position
  by the letter binding), and every other letter ranges as on the output;
* the op is written, for its rules, as a sum of selections, one per part:
  ``K[b,t,e] = K_mem[b,m,e] [t = m] + K_new[b,s,e] [t = s + M]`` with the
  offset indicator :class:`~symflops.core.factors.Slot` (never
  differentiated); the einsum machinery (:func:`symflops.ops.einsum.rules.term_rules`,
  the chain rule and Kronecker deltas in SymPy) derives each part's gradient
  from it, the slice of the output's gradient at the part's place,
  ``dK_mem[b,m,e] = dK[b,m,e]``, ``dK_new[b,s,e] = dK[b,M+s,e]``; nothing is
  typed in;
* cost: 0 FLOPs forward, in both buckets: the parts land on disjoint
  positions, so nothing is added (a sum of the selections as an einsum would
  count one add per element).  Each rule is counted like any einsum: a copy,
  0 (its summed letter is determined by the part's letter), or for a
  broadcast part the reduction over the letters it lacks.  The copy's bytes are counted
  nowhere: symflops counts no memory traffic; the output is an activation
  like any other (saved only when a rule reads it, live in the inference peak);
* saved tensors: none (no rule reads a part or the output).

NumPy's ``np.concatenate`` and PyTorch's ``torch.cat`` are the forwards.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field, replace
from typing import Any, Mapping, Sequence

from ..core.lazy import numpy as np
import sympy

from ..core.errors import Span, SymflopsError
from ..core.factors import Slot
from ..core.ir import Einsum, Factor, Order, Tensor
from ..core.records import OpCost, PatternTerm, Rule
from ..lang.statement import Ref
from .base import Access, Choice, Scope, Unit, accesses
from .einsum.node import Contraction
from .einsum.rules import term_rules

#: More parts than this is refused (an op's limit of factors in one product).
MAX_PARTS = 16


@dataclass(frozen=True)
class Concat:
    """``out = concat_index(parts)``: ``joined[k]`` is the letter of part ``k``
    along the joined axis, whose place on the output starts at ``offsets()[k]``."""

    out: Factor
    parts: tuple[Factor, ...]
    index: str
    joined: tuple[str, ...]
    index_dims: tuple[tuple[str, sympy.Expr], ...]
    text: str = ""
    span: Span | None = field(default=None, compare=False)
    kind = "concat"
    aux_description = ""

    @property
    def output(self) -> str:
        return self.out.tensor

    @property
    def inputs(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(p.tensor for p in self.parts))

    @property
    def terms(self) -> tuple[Einsum, ...]:
        """None: a concatenation is no sum of products (its parts are placed,
        not added); :meth:`selections` are the products its rules come from."""
        return ()

    @property
    def aux(self) -> tuple[Factor, ...]:
        return ()

    def dims(self) -> dict[str, sympy.Expr]:
        return dict(self.index_dims)

    def offsets(self) -> tuple[sympy.Expr, ...]:
        """Where each part starts along the joined axis: 0, M, M + S, ..."""
        d, start, out = self.dims(), sympy.Integer(0), []
        for letter in self.joined:
            out.append(start)
            start = start + d[letter]
        return tuple(out)

    def selections(self) -> tuple[Einsum, ...]:
        """Each part at its place: ``K[b,t,e] = K_new[b,s,e] [t = s + M]``."""
        return tuple(Einsum(self.out, (p, Factor("", (self.index, j), fn=Slot(o))))
                     for p, j, o in zip(self.parts, self.joined, self.offsets()))

    def statement(self) -> str:
        return f"{self.out} = concat_{self.index}({', '.join(str(p) for p in self.parts)})"

    def reads(self) -> tuple[Einsum, ...]:
        """It reads every element of each part once, at its place."""
        return self.selections()

    def split(self, layout: Any, widths: Any, unit: str = "FLOPs", order: str = "written") -> Any:
        """A copy, split along any letter but the joined one, which is refused."""
        from .split import along

        return along(self, self.index, "places its parts", layout, widths, unit)

    def moved(self, rule: Rule | None = None) -> Access:
        """Each part read once; the whole output written (the parts fill it)."""
        if rule is not None:
            return accesses(self, rule)  # type: ignore[arg-type]
        return Access(self.selections(), (Einsum(self.out, ()),))

    def rules(self, number: int, targets: Sequence[str] = ()) -> tuple[Rule, ...]:
        """Each target's slices of the output's gradient, derived from the selections."""
        return _rules(self, number, tuple(targets))

    def cost(self, unit: Unit, order: Order = "written", sizes: tuple[tuple[str, int], ...] = (),
             choice: Choice = "declared") -> OpCost:
        """A copy: nothing is multiplied or added."""
        return OpCost(sympy.Integer(0), sympy.Integer(0))

    def _arranged(self, k: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """Part ``k``'s axes in the output's order (its joined letter in
        ``index``'s place, the letters it lacks left out), and where the
        output's letters it lacks go (to be broadcast)."""
        letters = [self.joined[k] if i == self.index else i for i in self.out.indices]
        own = self.parts[k].indices
        return (tuple(own.index(i) for i in letters if i in own),
                tuple(a for a, i in enumerate(letters) if i not in own))

    def _sizes(self, k: int, extents: Mapping[str, int]) -> tuple[int, ...]:
        return tuple(extents[self.joined[k] if i == self.index else i] for i in self.out.indices)

    def run(self, values: Mapping[str, np.ndarray], extents: Mapping[str, int] | None = None,
            dims: Mapping[str, int] | None = None) -> dict[str, np.ndarray]:
        axis, arrays = self.out.indices.index(self.index), []
        for k, p in enumerate(self.parts):
            order, missing = self._arranged(k)
            a = np.expand_dims(np.transpose(values[p.tensor], order), missing)
            sizes = self._sizes(k, extents) if extents else a.shape
            arrays.append(np.broadcast_to(a, sizes))
        return {self.output: np.concatenate(arrays, axis=axis)}

    def torch(self, torch: Any, values: Mapping[str, Any],
              dims: Mapping[str, int] | None = None) -> dict[str, Any]:
        """PyTorch's own ``torch.cat`` (after ``expand`` for a broadcast part), for the verifier."""
        axis, arrays = self.out.indices.index(self.index), []
        extents = {i: int(e.subs({s: (dims or {})[str(s)] for s in e.free_symbols}))
                   for i, e in self.index_dims}
        for k, p in enumerate(self.parts):
            order, missing = self._arranged(k)
            a = values[p.tensor].permute(order)
            for m in missing:
                a = a.unsqueeze(m)
            arrays.append(a.expand(self._sizes(k, extents)))
        return {self.output: torch.cat(arrays, dim=axis)}

    def latex(self, m: Any) -> str:
        r"""``K_{bte} = \operatorname{concat}_t(K_{bme}, N_{bse})``."""
        parts = ", ".join(m.ix(p) for p in self.parts)
        return rf"{m.ix(self.out)} = \operatorname{{concat}}_{{{self.index}}}({parts})"

    def formula(self) -> None:
        return None

    def shown(self) -> None:
        return None

    def patterns(self) -> tuple[PatternTerm, ...]:
        return ()


@functools.lru_cache(maxsize=1024)
def _rules(op: Concat, number: int, targets: tuple[str, ...]) -> tuple[Rule, ...]:
    """Through the einsum machinery, one selection at a time; each rule is a
    copy, not matmul-type work."""
    placed = Contraction(op.selections(), op.index_dims, op.text, op.span)
    return tuple(replace(r, matmul=False) for name in targets
                 for k, p in enumerate(op.parts) if p.tensor == name
                 for r in term_rules(placed, k, number, name, False))


_NAME = re.compile(r"concat_([A-Za-z_][A-Za-z0-9_]*|\{[^{}]*\})\Z")


class ConcatCall:
    """The statement form ``K[b,t,e] = concat_t(K_mem[b,m,e], K_new[b,s,e])``,
    checked with positions: the whole right side, at least two plain parts,
    each with the output's other letters and one letter of its own."""

    usage = "concat_i(A[..], B[..], ...) as a whole statement (the parts joined along i)"

    def claims(self, name: str) -> bool:
        return _NAME.match(name) is not None

    def _index(self, call: Any, at: Any) -> str:
        if len(call.reduced) > 1:
            raise SymflopsError(f"{call.name}(...) over {len(call.reduced)} indices is not supported",
                                at(call.column), "join along one axis, e.g. "
                                "'K[b,t,e] = concat_t(K_mem[b,m,e], K_new[b,s,e])'")
        m = _NAME.match(call.name)
        assert m is not None
        return call.reduced[0].letter if call.reduced else m.group(1)

    def binding(self, call: Any, statement: Any, known: Mapping[str, Tensor], at: Any
                ) -> tuple[tuple[Any, ...], dict[str, sympy.Expr]]:
        """The parts after the first, to be bound like operands, and the
        joined letter's extent: the sum of the parts' extents along it (empty
        when a part is unknown, which the binding then reports)."""
        whole = (len(statement.terms) == 1 and not statement.terms[0].negative
                 and statement.terms[0].factors == (call,))
        if not whole:
            raise self._not_whole(call, at)
        index, out = self._index(call, at), statement.lhs
        hint = ("write e.g. 'K[b,t,e] = concat_t(K_mem[b,m,e], K_new[b,s,e])': the output's "
                "letters, with one letter of each part's own in place of the joined one")
        if call.argument is not None and not isinstance(call.argument, Ref):
            raise SymflopsError(f"{call.name} joins tensors, not constants", at(call.argument.column),
                                hint)
        parts = call.tensors
        if len(parts) < 2:
            raise SymflopsError(f"{call.name}(...) needs at least two parts", at(call.column), hint)
        if len(parts) > MAX_PARTS:
            raise SymflopsError(f"{call.name}(...) of {len(parts)} parts, more than the limit of "
                                f"{MAX_PARTS}", at(parts[MAX_PARTS].column),
                                "join them in several ops")
        if index not in out.indices:
            raise SymflopsError(f"concat along {index!r}, a letter the output {out.name} does not "
                                "have", at(call.column), hint)
        others = [i for i in out.indices if i != index]
        total = sympy.Integer(0)
        for ref in parts:
            if ref.gathers or ref.shifts:
                raise SymflopsError(f"a lookup or shift inside {call.name}(...)", at(ref.column),
                                    "write it as an op of its own and join its result")
            if index in ref.indices:
                k = ref.indices.index(index)
                raise SymflopsError(
                    f"the part {ref.name} indexes the joined axis with the output's letter "
                    f"{index!r}, which ranges over the sum of the parts", at(ref.index_columns[k]),
                    f"give {ref.name}'s axis a letter of its own, e.g. "
                    f"{ref.name}[{','.join('m' if i == index else i for i in ref.indices)}]")
            own = [i for i in ref.indices if i not in others]
            if len(own) != 1 or len(set(ref.indices)) != len(ref.indices):
                raise SymflopsError(
                    f"the part {ref.name}[{','.join(ref.indices)}] must carry one letter of its own "
                    f"for the joined axis and otherwise only the output's letters other than "
                    f"{index!r} ({','.join(others) or 'none'}), each once; it has "
                    f"{len(own)} letter(s) the output lacks: {','.join(own) or 'none'}",
                    at(ref.column), hint + "; a part without some of the output's letters is "
                    "broadcast along them")
            shape = known[ref.name].shape if ref.name in known else None
            if shape is None or len(shape) != len(ref.indices):
                return tuple(parts[1:]), {}  # the binding reports it, at the part
            total = total + shape[ref.indices.index(own[0])]
        return tuple(parts[1:]), {index: sympy.expand(total)}

    def whole(self, call: Any, statement: Any, out: Factor, scope: Scope) -> Concat:
        at = scope.at
        if len(statement.terms) != 1 or statement.terms[0].negative:
            self.inline(call, out, scope)
        if statement.where:
            raise SymflopsError(f"a where-clause on {call.name}(...) is not supported",
                                at(statement.where[0].column), "remove it; join whole tensors")
        index = self._index(call, at)
        others = set(out.indices) - {index}
        parts = tuple(Factor(r.name, r.indices, at(r.column)) for r in call.tensors)
        joined = tuple(next(i for i in p.indices if i not in others) for p in parts)
        letters = dict.fromkeys([*out.indices, *(i for p in parts for i in p.indices)])
        return Concat(out, parts, index, joined, tuple((i, scope.extents[i]) for i in letters),
                      scope.text, scope.span)

    def inline(self, call: Any, out: Factor, scope: Scope) -> Concat:
        raise self._not_whole(call, scope.at)

    @staticmethod
    def _not_whole(call: Any, at: Any) -> SymflopsError:
        return SymflopsError(f"{call.name}(...) must be the whole right side", at(call.column),
                             f"write it as an op of its own, e.g. 'K[b,t,e] = {call.name}("
                             "K_mem[b,m,e], K_new[b,s,e])', and use K in the next op")


CONCAT = ConcatCall()
