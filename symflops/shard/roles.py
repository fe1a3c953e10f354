"""What each dim is to the strategy presets: the batch, the sequence, attention
heads, an MLP's hidden width, experts, the vocabulary.

A declaration says so in ``roles:`` (an included block's roles carry into
its includer; ``symflops import-hf`` writes them).  Two roles have defaults
read off the declaration itself: ``batch`` is the dim of ``sequences:``
(else of ``tokens:``) when that is one dim, and ``sequence`` the dim of
``tokens:`` over ``sequences:`` when that is one dim.  Nothing else is
guessed: a preset that needs a role the declaration does not give is refused
with a message naming the role and the key that gives it.
"""

from __future__ import annotations

from dataclasses import dataclass

import sympy

from ..core.errors import SymflopsError
from ..core.ir import Layer, dim_symbol


@dataclass(frozen=True)
class Roles:
    """Each role's dims (symbols), and the dims whose positions are rows of
    tokens: the batch and sequence dims, and dims defined as multiples of
    them (an MoE's expert slots ``C = c k B S / M``)."""

    dims: tuple[tuple[str, tuple[sympy.Symbol, ...]], ...]
    rows: frozenset[sympy.Symbol]
    source: str

    def of(self, role: str) -> tuple[sympy.Symbol, ...]:
        for r, d in self.dims:
            if r == role:
                return d
        return ()

    def need(self, role: str, strategy: str) -> tuple[sympy.Symbol, ...]:
        """The dims of ``role``, or an error saying the declaration does not
        say which they are (the preset is refused, never guessed)."""
        found = self.of(role)
        if found:
            return found
        where = {"batch": "'sequences: B' (or 'roles: {batch: B}')",
                 "sequence": "'tokens: B*S' with 'sequences: B' (or 'roles: {sequence: S}')"}
        hint = where.get(role, f"'roles: {{{role}: DIM}}'")
        raise SymflopsError(f"{self.source}: {strategy} splits the {role} dim, and the "
                            f"declaration does not say which dim that is",
                            hint=f"add {hint} to the declaration")


def _single(expr: sympy.Expr | None) -> sympy.Symbol | None:
    return expr if isinstance(expr, sympy.Symbol) else None


def roles(layer: Layer) -> Roles:
    declared = {role: tuple(dim_symbol(d) for d in dims) for role, dims in layer.roles}
    if "batch" not in declared:
        batch = _single(layer.sequences) or (_single(layer.tokens) if layer.sequences is None
                                             else None)
        if batch is not None:
            declared["batch"] = (batch,)
    if "sequence" not in declared and layer.tokens is not None and layer.sequences is not None:
        seq = _single(sympy.simplify(layer.tokens / layer.sequences))
        if seq is not None and seq not in declared.get("batch", ()):
            declared["sequence"] = (seq,)
    base = set(declared.get("batch", ())) | set(declared.get("sequence", ()))
    rows = set(base)
    for name, formula in layer.definitions:
        if formula.free_symbols & base:
            rows.add(dim_symbol(name))
    return Roles(tuple(declared.items()), frozenset(rows), layer.source)
