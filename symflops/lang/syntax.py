"""The records a parsed op statement is made of (what :mod:`symflops.lang.statement`
produces and the op kinds read).

Every record is a frozen dataclass holding text and 0-based columns in the
statement (added to the statement's span to point at a place in the file);
nothing here parses or evaluates.  A :class:`Statement` is its output
:class:`Ref`, a sum of signed :class:`Term` products of :class:`Ref`,
:class:`Call` and :class:`Constant` factors, and the :class:`Condition` list of
its where-clause.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Token:
    kind: str  # 'name' | 'number' | 'punct' | 'end'
    text: str
    column: int  # 0-based offset in the statement


@dataclass(frozen=True)
class Ref:
    """``NAME[i, j]`` with the 0-based column of the name and of each index.
    A looked-up position (``E[tok[b], d]``) has ``""`` in ``indices`` and its
    index tensor's reference in ``gathers`` (a :class:`Gather`).  A shifted
    position (``X[b,c,p+k]``) has ``""`` in ``indices`` and its two letters in
    ``shifts`` (a :class:`Shift`)."""

    name: str
    column: int
    indices: tuple[str, ...]
    index_columns: tuple[int, ...]
    gathers: tuple["Gather", ...] = ()
    shifts: tuple["Shift", ...] = ()


@dataclass(frozen=True)
class Gather:
    """A looked-up index position, ``tok[b]`` in ``E[tok[b], d]``."""

    position: int     # which index of the tensor it is
    ref: Ref          # the index tensor with its letters


@dataclass(frozen=True)
class Shift:
    """A shifted index position, ``p+k`` in ``X[b,c,p+k]``, with the columns of both letters."""

    position: int
    left: str
    left_column: int
    right: str
    right_column: int


@dataclass(frozen=True)
class Condition:
    """``left op right`` in a where-clause, with the columns of both letters."""

    left: str
    op: str
    right: str
    column: int
    right_column: int


@dataclass(frozen=True)
class Reduced:
    """One letter of a call's braced index list, ``c`` in ``layernorm_{c,p}(X[b,c,p])``,
    with its column."""

    letter: str
    column: int


@dataclass(frozen=True)
class Call:
    """``name(ref[, constant])``: a pointwise function or an op applied to a tensor;
    ``name(ref, ref, ...)`` for an op of several tensors (a concatenation).

    ``softmax_t(A[s,t])`` has the name ``softmax_t`` (which letters of a name
    are an index is the op kind's business) and no ``reduced``;
    ``layernorm_{c,p}(X[b,c,p])`` has the name ``layernorm_{c,p}`` (spaces
    dropped) and its letters, in order and distinct, in ``reduced``."""

    name: str
    column: int
    ref: Ref
    argument: "Constant | Ref | None" = None
    reduced: tuple[Reduced, ...] = ()
    #: tensors after a tensor ``argument``: ``C[..]`` in ``concat_t(A[..], B[..], C[..])``
    more: tuple[Ref, ...] = ()

    @property
    def tensors(self) -> tuple[Ref, ...]:
        """Every tensor argument, in order: ``ref``, a tensor ``argument``, ``more``."""
        second = (self.argument,) if isinstance(self.argument, Ref) else ()
        return (self.ref, *second, *self.more)


@dataclass(frozen=True)
class Constant:
    """Constant text (``sqrt(H)``, ``0.125``, ``D``) and its column; ``divide``
    when it follows ``/``."""

    text: str
    column: int
    divide: bool = False


@dataclass(frozen=True)
class Term:
    """A signed product of factors."""

    negative: bool
    factors: tuple[Ref | Call | Constant, ...]
    column: int


@dataclass(frozen=True)
class Statement:
    lhs: Ref
    terms: tuple[Term, ...]
    text: str
    where: tuple[Condition, ...] = ()

    @property
    def refs(self) -> tuple[Ref, ...]:
        """Every tensor reference on the right side, in order (an index
        tensor of a lookup right after the tensor it looks up)."""
        out: list[Ref] = []
        for term in self.terms:
            for f in term.factors:
                ref = f if isinstance(f, Ref) else f.ref if isinstance(f, Call) else None
                if ref is not None:
                    out.append(ref)
                    out += [g.ref for g in ref.gathers]
        return tuple(out)
