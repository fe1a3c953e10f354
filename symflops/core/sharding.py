"""Meshes and shardings: the records the op kinds and the many-devices stage share.

A *mesh* is a grid of devices with named axes, each of a size (a whole
number, or a positive integer symbol named like the axis).  A *placement*
says how one tensor is laid out on it: for each of the tensor's axes, the
mesh axes it is split over (``W_in[D_X, F_Y]``: D over X, F over Y, in "How
to Scale Your Model"'s notation); a tensor is whole (replicated) along every
mesh axis its placement does not name.  A parameter's state may also be
split with no named axis (``flat``: ZeRO's shards of the flattened tensor).

An op kind answers, through :meth:`symflops.ops.base.Op.split`, what it needs
when its letters are split so: the work each device does (:class:`OpSplit`)
and the collectives that make it possible (:class:`Need`), each over one or
more mesh axes, with the elements of the array it moves.  Bytes and times
come later (:mod:`symflops.shard`); here everything is in elements.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Mapping

import sympy

from .factors import Factor

#: The collectives a sharded op may need ("How to Scale Your Model", ch. 3).
Collective = Literal["AllGather", "ReduceScatter", "AllReduce", "AllToAll"]
COLLECTIVES: tuple[Collective, ...] = ("AllGather", "ReduceScatter", "AllReduce", "AllToAll")
#: Which bytes per element of the precision policy an array moved takes.
Width = Literal["activations", "params", "grads", "masks"]

Axes = tuple[str, ...]


def axis_symbol(name: str) -> sympy.Symbol:
    """The size of a mesh axis given by name only: a positive integer symbol."""
    return sympy.Symbol(name, positive=True, integer=True)


@dataclass(frozen=True)
class Placement:
    """How one tensor is laid out: ``axes[k]`` are the mesh axes its axis
    ``k`` is split over (empty: whole along it), ``flat`` the mesh axes its
    elements are split over along no named axis (a parameter's ZeRO shards,
    gathered whole before each use)."""

    axes: tuple[Axes, ...]
    flat: Axes = ()

    @property
    def used(self) -> Axes:
        return tuple(a for group in self.axes for a in group) + self.flat

    def divisor(self, sizes: Mapping[str, sympy.Expr]) -> sympy.Expr:
        """How many pieces the tensor is cut into: the product of the sizes of its axes."""
        return sympy.Mul(*(sizes[a] for a in self.used))

    @property
    def whole(self) -> bool:
        return not self.used


@dataclass(frozen=True)
class Layout:
    """A mesh (``sizes``, innermost axis first) and the placement of every
    tensor an op or a rule reads or writes (gradients included, ``dX`` as
    ``X`` unless the layout says otherwise; a tensor it does not name is whole)."""

    sizes: tuple[tuple[str, sympy.Expr], ...]
    placements: tuple[tuple[str, Placement], ...] = ()
    #: dims whose positions are rows of tokens (the batch and sequence dims, and
    #: dims defined as multiples of them, an MoE's slots): a lookup from rows of
    #: one such dim to rows of another, both split over an axis, stays on each device
    rows: frozenset[sympy.Symbol] = field(default=frozenset())

    @property
    def axes(self) -> Axes:
        return tuple(a for a, _ in self.sizes)

    @property
    def size_map(self) -> dict[str, sympy.Expr]:
        return dict(self.sizes)

    def placement(self, tensor: str) -> Placement | None:
        for name, p in self.placements:
            if name == tensor:
                return p
        return None

    def letters(self, factor: Factor) -> dict[str, Axes]:
        """Each letter of a tensor factor with the mesh axes it is split over
        (letters whole along every axis left out)."""
        p = self.placement(factor.tensor)
        if p is None:
            return {}
        out: dict[str, Axes] = {}
        for letter, group in zip(factor.indices, p.axes):
            if group and letter not in out:
                out[letter] = group
        return out

    def flat(self, tensor: str) -> Axes:
        p = self.placement(tensor)
        return p.flat if p is not None else ()


@dataclass(frozen=True)
class Need:
    """One collective an op (or a rule) needs: ``kind`` over the mesh axes
    ``axes`` of an array of ``letters`` (an operand, the output, or an
    intermediate product), which holds ``elements`` elements on one device
    when the collective has undone its split over ``axes`` (the array's V of
    the ring forms, in elements; bytes come from ``width``)."""

    kind: Collective
    axes: Axes
    array: str                 # the tensor moved, or an intermediate written as its product
    letters: tuple[str, ...]
    elements: sympy.Expr
    reason: str
    width: Width = "activations"
    #: the tensor whose value it produces or reduces (the op's output for a
    #: reduction of partial sums): several rules' reductions into one gradient merge
    target: str = ""


@dataclass(frozen=True)
class OpSplit:
    """What one op (or rule) does on each device: its FLOPs in the two buckets
    (one device's share), the collectives it needs, and the letters its work
    is split along (each with its mesh axes)."""

    flops: sympy.Expr
    elementwise: sympy.Expr
    needs: tuple[Need, ...] = ()
    split: tuple[tuple[str, Axes], ...] = ()


class NotSplittable(ValueError):
    """An op whose letters are split in a way symflops does not model (a
    recurrence along a split letter): the message names the op and the letter."""


# -- what a declaration (or the command line) says ----------------------------------

#: What a dim may be to the strategy presets: the batch (sequences), the
#: sequence, attention heads, an MLP's hidden width, experts, the vocabulary.
Role = Literal["batch", "sequence", "heads", "hidden", "experts", "vocab"]
ROLES: tuple[Role, ...] = ("batch", "sequence", "heads", "hidden", "experts", "vocab")

#: The strategy presets and their options, as ``parallel:`` and ``plan`` name them.
STRATEGY_KEYS = ("dp", "tp", "pp", "cp", "ep", "sp", "zero", "micro_batches", "interleave",
                 "schedule")
#: The explicit form: a mesh and placements.
EXPLICIT_KEYS = ("mesh", "dims", "tensors")
SCHEDULES = ("1f1b", "gpipe")


@dataclass(frozen=True)
class Parallel:
    """A ``parallel:`` key (or the command line's strategies): presets with
    their degrees (``dp: 8``, ``tp: t``: a whole number or a name, which is
    then a symbol), ``sp``, ``zero`` and the pipeline's options; or a mesh of
    named axes with the placements of dims (every tensor's first axis over
    that dim) and of tensors (one entry per axis).  ``where`` keeps the place
    of each key (``tp``, ``mesh.X``, ``dims.B``, ``tensors.W_in``) for messages;
    ``origin`` says where it was written (a file, or an option)."""

    strategies: tuple[tuple[str, object], ...] = ()
    mesh: tuple[tuple[str, sympy.Expr], ...] = ()
    dims: tuple[tuple[str, Axes], ...] = ()
    tensors: tuple[tuple[str, tuple[Axes, ...]], ...] = ()
    where: tuple[tuple[str, object], ...] = field(default=(), compare=False)
    origin: str = "parallel:"

    def option(self, key: str, default: object = None) -> object:
        for k, v in self.strategies:
            if k == key:
                return v
        return default

    def at(self, key: str) -> object:
        """The place (a :class:`~symflops.core.errors.Span`) ``key`` was written, or None."""
        for k, v in self.where:
            if k == key:
                return v
        return None

    @property
    def explicit(self) -> bool:
        return bool(self.mesh)
