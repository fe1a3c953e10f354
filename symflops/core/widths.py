"""The bytes of an index tensor's integers: the fewest of int8, int16, int32
and int64 (signed, as frameworks store indices) that hold its range.

One rule, shared by the engine (:mod:`symflops.count.indices`, which picks
each index tensor's width from a declaration's examples) and the planner's
kept models (:mod:`symflops.planner.compiled`, which must agree with it
without importing SymPy).
"""

from __future__ import annotations

#: The widths an index tensor may take, in bytes (int8 .. int64).
WIDTHS = (1, 2, 4, 8)


def fewest_bytes(size: int) -> int | None:
    """The fewest bytes of a signed integer that holds ``0 .. size - 1``; None
    when not even 8 bytes (int64) do.

    >>> fewest_bytes(32_000), fewest_bytes(65_024), fewest_bytes(2**63 + 1)
    (2, 4, None)
    """
    for w in WIDTHS:
        if size - 1 <= 2 ** (8 * w - 1) - 1:
            return w
    return None
