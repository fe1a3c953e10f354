"""A prefix sum: a sum over a where-domain that an output letter bounds.

``Cs[b,s,h] = La[b,u,h] where u <= s`` writes, for every ``s``, the sum of
``La`` over ``u <= s``: the output letter ``s`` is on no operand, and its
extent is that of the letter it bounds (:mod:`.prefix_statement` binds it).
The same form writes a suffix sum (``u >= s``), an exclusive one (``u < s``),
a window (``u <= s, s - u < W``) and Mamba-2's segment sums
(``Seg[l,m] = A[u] where m < u, u <= l``, two output letters bounding one
summed letter from both sides); the gate-less recurrence
``H[b,s,d] = H[b,s-1,d] + X[b,s,d]`` is lowered to it
(:mod:`.recurrence_statement`).

The op is the einsum ``out = X * [conditions]`` (an inner
:class:`~.einsum.node.Contraction`): its backward rules are that einsum's,
derived by the einsum machinery, never typed in (``dLa[b,u,h] = dCs[b,s,h]
where u <= s``, a suffix sum), and its NumPy forward is that einsum's with the
conditions as 0/1 masks.  What differs is the count: not one add per term of
the domain (``S(S+1)/2`` a row for a prefix sum) but running sums and their
differences (:mod:`.prefix_count`, ``S - 1`` a row), for the op and for each
of its rules (a :class:`PrefixRule` counts itself).  Its PyTorch forward, the
oracle of ``verify``, is that algorithm: ``torch.cumsum`` along each summed
letter and the differences at each output element's limits.

It lists no einsum ``terms`` (as a recurrence does): the stages that read
products (the key/value cache, the parameters a token reads) must not take
``La[b,u,h] where u <= s`` for attention's keys.
"""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar, Mapping, Sequence

import sympy

from ..core.errors import Span
from ..core.domain import domain_size
from ..core.ir import Einsum, Factor, Order, comparison, dim_symbol
from ..core.records import OpCost, PatternTerm, Rule
from .base import Access, Choice, Unit, accesses
from .einsum.node import Contraction
from .einsum.numeric import extents_at
from .einsum.rules import contraction_rules
from .prefix_count import Running, box, prefix_count


def _cost(term: Einsum, extents: Mapping[str, sympy.Expr]) -> OpCost:
    """All elementwise: adds and subtractions only."""
    return OpCost(sympy.Integer(0), prefix_count(term, extents).total)


@dataclass(frozen=True)
class PrefixRule(Rule):
    """A rule that is itself a prefix sum (the gradient of one): evaluated as
    its einsum, counted by the prefix-sum convention (:meth:`own_cost`, which
    the cost model asks of a rule that has it)."""

    def own_cost(self, unit: Unit) -> OpCost:
        (term,) = self.terms
        return _cost(term, self.dims())


def prefix_rule(rule: Rule) -> PrefixRule:
    """``rule`` counted as a prefix sum."""
    return PrefixRule(**{f.name: getattr(rule, f.name) for f in fields(Rule)})


@dataclass(frozen=True)
class PrefixSum:
    """``out = sum over the domain of X``, the domain bounded by output letters."""

    term: Einsum
    index_dims: tuple[tuple[str, sympy.Expr], ...]
    text: str = ""
    span: Span | None = field(default=None, compare=False)
    kind = "prefix sum"
    aux_description = ""
    #: it saves nothing besides its output (its rule reads only the upstream gradient)
    aux: ClassVar[tuple[Factor, ...]] = ()

    @property
    def output(self) -> str:
        return self.term.output.tensor

    @property
    def out(self) -> Factor:
        return self.term.output

    @property
    def operand(self) -> Factor:
        return self.term.factors[0]

    @property
    def inputs(self) -> tuple[str, ...]:
        return (self.operand.tensor,)

    @property
    def terms(self) -> tuple[Einsum, ...]:
        """None: see the module's docstring."""
        return ()

    @property
    def inner(self) -> Contraction:
        """The einsum the op is, ``Cs[b,s,h] = La[b,u,h] [u <= s]``."""
        return Contraction((self.term,), self.index_dims, self.text, self.span)

    def dims(self) -> dict[str, sympy.Expr]:
        return dict(self.index_dims)

    def running(self) -> Running:
        """What a sheet says of it: its scans and combines
        (:mod:`.prefix_count`) beside one add per term of its domain."""
        b, dims = box(self.term), self.dims()
        letters = set(self.term.indices)
        bounds = [comparison(f) for f in self.term.operands if f.is_comparison]
        direct = domain_size({x: dims[x] for x in letters}, bounds)
        return Running(self.operand.tensor, b.summed, prefix_count(self.term, dims), direct)

    def statement(self) -> str:
        return self.inner.statement()

    def reads(self) -> tuple[Einsum, ...]:
        """Each element of ``X`` for the output elements along the letter that
        bounds it: ``X[b,u,h]`` read at ``Cs[b,s,h]`` as ``X[b,s,h]`` (each
        summed letter stands for the first output letter that bounds it)."""
        b = box(self.term)
        stands = {x: (lows + highs)[0][0] for (x, lows), (_, highs) in zip(b.lowers, b.uppers)}
        read = Factor(self.operand.tensor, tuple(stands.get(i, i) for i in self.operand.indices))
        return (Einsum(self.out, (read,)),)

    def moved(self, rule: Rule | None = None) -> Access:
        """Forward: each element of ``X`` read once (:meth:`reads`), the output
        written; a rule, itself a prefix sum, reads its upstream gradient and
        writes its own (:func:`~symflops.ops.base.accesses`)."""
        return accesses(self, rule)  # type: ignore[arg-type]

    def split(self, layout: Any, widths: Any, unit: str = "FLOPs", order: str = "written") -> Any:
        """Split along any letter but the output letters that bound the sum
        (the running sum's direction), which are refused, as a recurrence's
        time letter is (:func:`~symflops.ops.split.along`)."""
        from .split import along

        b = box(self.term)
        bounding = dict.fromkeys(bound[0] for (_, lows), (_, highs) in zip(b.lowers, b.uppers)
                                 for bound in (*lows, *highs))
        result = None
        for letter in bounding:
            result = along(self, letter, "sums", layout, widths, unit)
        return result

    def formula(self) -> None:
        return None

    def shown(self) -> None:
        return None

    def patterns(self) -> tuple[PatternTerm, ...]:
        """None: it lists no ``terms`` (its rules' derivation steps are in the rules)."""
        return ()

    def rules(self, number: int, targets: Sequence[str]) -> tuple[Rule, ...]:
        """The einsum machinery's rules, each counted as the prefix sum it is."""
        return tuple(prefix_rule(r) for name in targets
                     for r in contraction_rules(self.inner, number, name))

    def cost(self, unit: Unit, order: Order = "written", sizes: tuple[tuple[str, int], ...] = (),
             choice: Choice = "declared") -> OpCost:
        return _cost(self.term, self.dims())

    def run(self, values: Mapping[str, Any], extents: Mapping[str, int],
            dims: Mapping[str, int] | None = None) -> dict[str, Any]:
        """The einsum with the conditions as 0/1 masks, in NumPy."""
        return self.inner.run(values, extents, dims)

    def torch(self, torch: Any, values: Mapping[str, Any],
              dims: Mapping[str, int] | None = None) -> dict[str, Any]:
        """Running sums (``torch.cumsum``) and their differences at each output
        element's limits, as a PyTorch model computes a prefix sum."""
        return {self.output: running_sums(torch, self.term, values[self.operand.tensor],
                                          extents_at(self.index_dims, dims or {}), dims)}

    def latex(self, m: Any) -> str:
        return self.inner.latex(m)


def limits_at(torch: Any, term: Einsum, extents: Mapping[str, int],
              dims: Mapping[str, int] | None, device: Any
              ) -> tuple[dict[str, Any], dict[str, Any], Any]:
    """Over the grid of output elements: each summed letter's first and last
    value (clipped to its axis) and whether the element's domain is non-empty
    (the bounds between output letters included), as PyTorch tensors on
    ``device``: on the meta device (FLOP counts at medium sizes) they hold no
    memory, where arrays of the output's shape could take gigabytes."""
    b = box(term)
    values = {dim_symbol(k): v for k, v in (dims or {}).items()}
    axes = [torch.arange(extents[y], device=device) for y in b.output]
    grid = dict(zip(b.output, torch.meshgrid(*axes, indexing="ij"))) if axes else {}
    shape = tuple(extents[y] for y in b.output)
    valid = torch.ones(shape, dtype=torch.bool, device=device)
    for a in b.among:
        valid = valid & (grid[a.low] <= grid[a.high] + int(a.offset.xreplace(values))
                         - int(a.strict))
    low: dict[str, Any] = {}
    high: dict[str, Any] = {}
    for (x, lows), (_, highs) in zip(b.lowers, b.uppers):
        lo = torch.zeros(shape, dtype=torch.int64, device=device)
        hi = torch.full(shape, extents[x] - 1, dtype=torch.int64, device=device)
        for y, c in lows:
            lo = torch.maximum(lo, grid[y] + int(c.xreplace(values)))
        for y, c in highs:
            hi = torch.minimum(hi, grid[y] + int(c.xreplace(values)))
        valid = valid & (lo <= hi)
        low[x], high[x] = torch.where(valid, lo, 0), torch.where(valid, hi, 0)
    for x in low:  # an element found empty by a later letter
        low[x], high[x] = torch.where(valid, low[x], 0), torch.where(valid, high[x], 0)
    return low, high, valid


def running_sums(torch: Any, term: Einsum, x: Any, extents: Mapping[str, int],
                 dims: Mapping[str, int] | None) -> Any:
    """``term`` with PyTorch: ``P`` the running sums of ``x`` along each summed
    letter, with a 0 in front (``P[k] = sum_{v < k} x[v]``), then each output
    element ``sum over its box = sum over corners of +- P`` (``P[hi + 1] - P[lo]``
    per letter)."""
    b = box(term)
    letters = list(term.factors[0].indices)
    p = x
    for s in b.summed:
        axis = letters.index(s)
        zero = torch.zeros_like(p.narrow(axis, 0, 1))
        p = torch.cat([zero, torch.cumsum(p, dim=axis)], dim=axis)
    device = x.device
    low, high, valid = limits_at(torch, term, extents, dims, device)
    axes = [torch.arange(extents[y], device=device) for y in b.output]
    grid = dict(zip(b.output, torch.meshgrid(*axes, indexing="ij"))) if axes else {}
    total = None
    for corners in itertools.product((0, 1), repeat=len(b.summed)):
        at = {s: (high[s] + 1 if c == 0 else low[s]) for s, c in zip(b.summed, corners)}
        index = tuple(at[i] if i in at else grid[i] for i in letters)
        part = p[index]
        part = part if sum(corners) % 2 == 0 else -part
        total = part if total is None else total + part
    return total * valid.to(torch.float64)


def gateless(out: Factor, drive: Factor, time: str, extents: Mapping[str, sympy.Expr],
             letter: str, text: str = "", span: Span | None = None) -> PrefixSum:
    """``H[b,s,d] = H[b,s-1,d] + X[b,s,d]`` as the prefix sum
    ``H[b,s,d] = X[b,u,d] where u <= s`` (``u`` is ``letter``, fresh)."""
    read = Factor(drive.tensor, tuple(letter if i == time else i for i in drive.indices),
                  drive.span)
    term = Einsum(out, (read, Factor("", (letter, time), span, "<=")))
    index_dims = tuple((i, extents[i]) for i in out.indices) + ((letter, extents[time]),)
    return dataclasses.replace(PrefixSum(term, index_dims, text), span=span)
