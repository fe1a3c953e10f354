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
    position (``X[b,c,p+k]``, ``X[b,c,2*p+k]``, ``H[b,s-1,d]``: an affine
    index) has ``""`` in ``indices`` and its terms in ``shifts`` (a :class:`Shift`)."""

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
class AffineTerm:
    """One term of an affine index: ``2*p``, ``-t``, ``P*i``, ``k``.

    ``coefficient`` is a positive whole number or the text of a name
    (``P`` in ``P*i``; whether it is a declared dim is checked when the dims
    are known, so ``p*k`` is refused there, by name); ``negative`` is the
    sign written before the term."""

    letter: str
    column: int                 # of the letter
    coefficient: int | str = 1
    negative: bool = False


@dataclass(frozen=True)
class Shift:
    """An affine index position: ``p+k`` in ``X[b,c,p+k]``, ``2*p+k``,
    ``p+2*k``, ``s-1``, ``s-t``, ``P*i+u``, ``i+u-R``: the sum of its signed
    :class:`AffineTerm` s (each letter at most once is checked later) and a
    whole-number ``constant``; ``column`` is where the expression starts and
    ``text`` is it as written, spaces dropped.  ``named`` holds the terms of
    the constant that name a dim (``-R`` in ``i+u-R``, centred padding): the
    grammar reads every name as a letter, and the binding moves a declared
    dim that is no letter of the statement there, once the dims are known.
    ``left``/``right`` (and their columns) name the first two letters, as for
    the two-letter shift ``p+k`` (``right`` is ``""`` for a one-letter index
    such as ``s-1``)."""

    position: int
    terms: tuple[AffineTerm, ...]
    constant: int
    column: int
    text: str
    named: tuple[AffineTerm, ...] = ()

    @property
    def letters(self) -> tuple[str, ...]:
        return tuple(t.letter for t in self.terms)

    @property
    def is_plain(self) -> bool:
        """A shift of two letters, ``p+k``: every coefficient 1, no constant."""
        return (len(self.terms) == 2 and self.constant == 0 and not self.named
                and all(t.coefficient == 1 and not t.negative for t in self.terms))

    @property
    def left(self) -> str:
        return self.terms[0].letter

    @property
    def left_column(self) -> int:
        return self.terms[0].column

    @property
    def right(self) -> str:
        return self.terms[1].letter if len(self.terms) > 1 else ""

    @property
    def right_column(self) -> int:
        return self.terms[1].column if len(self.terms) > 1 else self.terms[0].column


@dataclass(frozen=True)
class Summand:
    """One signed constant of a condition's offset: ``W`` or ``1`` in ``s - W + 1``
    (a dim's name or a whole number, as written), with its column."""

    negative: bool
    text: str
    column: int


@dataclass(frozen=True)
class Condition:
    """``left op right + offset`` in a where-clause, with the columns of both
    letters: ``t <= s`` has no offset; ``s - t < W`` is read as ``s < t + W``
    and ``t >= s - W + 1`` as ``t >= s + (-W + 1)``, the offset the sum of
    its :class:`Summand` constants (each moved to the right side)."""

    left: str
    op: str
    right: str
    column: int
    right_column: int
    offset: tuple[Summand, ...] = ()

    @property
    def plain(self) -> bool:
        """Two letters compared, nothing added (``t <= s``)."""
        return not self.offset


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
    """``lhs = terms where ...``; ``accumulate`` when written ``+=``: a
    scatter, whose output has a lookup (``Agg[dst[e], d] += M[e,d]``) and
    adds every term into the position its index selects, from zeros."""

    lhs: Ref
    terms: tuple[Term, ...]
    text: str
    where: tuple[Condition, ...] = ()
    accumulate: bool = False

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
