"""NumPy, imported where it is first used.

The op modules run their numeric forwards (``symflops verify``, ``grads``,
``sweep``) with NumPy, but every command that derives imports them, and
importing NumPy takes about a tenth of a second, a fifth of a whole
``symflops eval``.  ``from ..core.lazy import numpy as np`` gives a stand-in
whose first attribute (``np.ndarray``, ``np.transpose``) imports NumPy; from
then on each attribute is NumPy's own.  Nothing else changes: the stand-in is
not a module, so code that needs the module itself imports ``numpy``.
"""

from __future__ import annotations

from typing import Any


class _NumPy:
    """Attributes of :mod:`numpy`, the module imported at the first one."""

    __slots__ = ()

    def __getattr__(self, name: str) -> Any:
        import numpy

        return getattr(numpy, name)

    def __repr__(self) -> str:
        return "<numpy, imported at its first use>"


numpy: Any = _NumPy()
