"""The patterns a sheet derives: each distinct einsum term of a layer in its
textbook form, the ops it applies to, and its rules step by step.

Only a sheet shows them, so they are derived when a sheet is prepared
(:func:`with_patterns`), not by every :func:`~symflops.derive.backward.derive`;
the renderer then only formats them.  A pattern is shown when some op it
applies to needs a gradient and its term reads a tensor.
"""

from __future__ import annotations

import dataclasses

from ..core.ir import Op
from ..core.records import Derivation, Pattern, PatternRules, PatternTerm
from ..ops.einsum.node import pattern_rules


def patterns(derivation: Derivation) -> tuple[Pattern, ...]:
    """The layer's patterns in order of first use, each derived once, in the
    names and letters of the first op it applies to (so that a reader maps
    each step onto that op's rules; the other ops' rules are the same with
    their names)."""
    users: dict[str, list[str]] = {}
    representative: dict[str, tuple[Op, int, PatternTerm]] = {}
    for op in derivation.layer.ops:  # a softmax, a norm, a loss has none: shown apart
        for k, term in enumerate(op.patterns()):
            users.setdefault(term.key, []).append(op.output)
            representative.setdefault(term.key, (op, k, term))
    out = []
    for key, names in users.items():
        op, k, generic = representative[key]
        if not any(name in derivation.needs_grad for name in names) or not generic.inputs:
            continue
        own = PatternTerm(key, op.terms[k], op.index_dims, generic.alone)
        rules = tuple(PatternRules(wrt, found) for wrt in own.inputs
                      if (found := pattern_rules(own, wrt)))
        out.append(Pattern(own.term, tuple(dict.fromkeys(names)), rules))
    return tuple(out)


def with_patterns(derivation: Derivation) -> Derivation:
    """``derivation`` (of the same class) with its sheet's patterns filled in."""
    if derivation.patterns is not None:
        return derivation
    return dataclasses.replace(derivation, patterns=patterns(derivation))
