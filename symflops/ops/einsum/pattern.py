"""The textbook patterns of an einsum op's terms, which a sheet derives step by step.

Each term of an op is written in its generic form (``Y_ik = sum_j X_ij W_jk``:
tensors ``X, W, V, ...``, letters ``i, j, k, ...``), so that every op of a
layer with the same pattern shares one derivation.  Naming the patterns
(:func:`pattern_terms`) is cheap; deriving a pattern's rules
(:func:`symflops.ops.einsum.node.pattern_rules`, a generic term being a
contraction of its own) is done only for the patterns a sheet shows.
"""

from __future__ import annotations

import sympy

from ...core.ir import Einsum, Factor, Op
from ...core.records import PatternTerm
from ..functions import FUNCTIONS


def generic_term(op: Op, term: int = 0) -> tuple[Einsum, tuple[tuple[str, sympy.Expr], ...]]:
    """One term of the op, alone, with tensors renamed Y = X W V ... and letters
    i, j, k, ... in order of appearance: the textbook form of its pattern,
    with the extents of its letters."""
    e = op.terms[term]
    pool = iter("ijklmnpqrsuvw")
    letters: dict[str, str] = {}
    on_operands = {i for f in e.operands for i in f.indices}  # lookups and shifts included
    # Output letters no operand carries (a bias broadcast over them) come
    # first, so that a bias reads Y_ij = X_j; then the operands' letters in
    # reading order, as in Y_ik = sum_j X_ij W_jk; then the conditions'.
    order = [i for i in e.output.indices if i not in on_operands]
    order += [i for f in (*e.factors, e.output, *(f for f in e.operands if f.is_indicator))
              for i in f.indices]
    for i in order:
        if i not in letters:
            letters[i] = next(pool, f"i{len(letters)}")
    names: dict[str, str] = {}
    pool_names = iter(["X", "W", "V", "U", "Z", "T"])
    for f in e.factors:
        if f.tensor not in names:
            names[f.tensor] = next(pool_names, f"A{len(names)}")

    def rename(f: Factor, name: str) -> Factor:
        return Factor(name, tuple(letters[i] for i in f.indices), fn=f.fn)

    # Indicators keep their index tensor's name: [k <= i], [j = tok_i].
    generic = Einsum(rename(e.output, "Y"),
                     tuple(rename(f, f.tensor if f.is_indicator else names[f.tensor])
                           for f in e.operands),
                     e.coefficient)
    dims = tuple((letters[i], ext) for i, ext in op.index_dims if i in letters)
    if len(op.terms) > 1:  # a term of a sum: its pattern is that of the term alone
        generic = Einsum(generic.output, generic.operands, generic.coefficient)
    return generic, dims


def pattern_terms(op: Op) -> tuple[PatternTerm, ...]:
    """Each term of ``op`` in its generic form, keyed by its statement."""
    lone = len(op.terms) == 1
    out = []
    for k in range(len(op.terms)):
        term, dims = generic_term(op, k)
        # Only an output-saving function's rule depends on the term being alone.
        output_form = any(f.function and FUNCTIONS[f.function.name].saves == "output"
                          for f in term.factors)
        key = term.statement() + ("" if lone or not output_form else " (a term of a sum)")
        out.append(PatternTerm(key, term, dims, lone))
    return tuple(out)

