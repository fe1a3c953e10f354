"""The stage's entry points: a layer and a ``parallel:`` in, placements and
the analysis out (:func:`sharding`, :func:`shard`)."""

from __future__ import annotations

from ..core.records import Derivation
from ..core.ir import Layer
from ..core.sharding import Parallel
from .analysis import Analysis, analyse
from .presets import Sharding, explicit, presets
from .roles import roles


def sharding(layer: Layer, parallel: Parallel) -> Sharding:
    """The placements ``parallel`` gives ``layer``: written out (a mesh) or by presets."""
    found = roles(layer)
    if parallel.explicit:
        return explicit(layer, parallel, found)
    return presets(layer, parallel, found)


def shard(derivation: Derivation, parallel: Parallel, recompute: str = "none") -> Analysis:
    return analyse(derivation, sharding(derivation.layer, parallel), recompute)
