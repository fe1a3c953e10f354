"""The op kinds a statement may call: each claims the call names it lowers.

``softmax_t(A[s,t])`` is claimed by the normalisations, ``cross_entropy_v(...)``
by the loss.  An einsum needs no call: it is what a statement is when no kind
claims its right side, and pointwise functions and dropout are factors of it.
A new op kind written as a call is one module of :mod:`symflops.ops` and one
entry here.
"""

from __future__ import annotations

from .base import CallKind
from .concat import CONCAT
from .logsumexp import LOGSUMEXP
from .loss import CROSS_ENTROPY
from .maximum import MAX
from .mean import MEAN
from .normalize import NORMALIZE

#: Every call kind, in the order their usages are listed in messages.
CALLS: tuple[CallKind, ...] = (NORMALIZE, CROSS_ENTROPY, LOGSUMEXP, MAX, MEAN, CONCAT)
