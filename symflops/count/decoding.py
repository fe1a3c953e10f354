"""The bytes one decoding step reads: the arithmetic that ``symflops derive``
(one sequence, symbolically) and ``symflops plan`` (b sequences, in numbers)
share (:mod:`symflops.count.inference` says what is read and why).

Plain operators on what it is given, SymPy expressions or Python numbers; it
imports no SymPy, so a plan read from a kept model decodes without it.
"""

from __future__ import annotations

from typing import Any

from .precision import Precision


def weights_read_bytes(read: Any, precision: Precision) -> Any:
    """Bytes of the weights one decoded token reads: ``read`` parameter
    elements at the policy's bytes per parameter."""
    return read * precision.params


def decode_step_bytes(weights_read: Any, cache_per_sequence: Any, sequences: int = 1) -> Any:
    """Bytes one decoding step of ``sequences`` sequences reads: the weights a
    token reads, once for the step, and each sequence's cache.  Exact for one
    sequence; for several it is a lower bound, since each sequence reads its
    own rows of a lookup table and may be routed to other experts."""
    return weights_read + sequences * cache_per_sequence
