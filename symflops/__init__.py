"""symflops: symbolic backward rules, FLOP and memory polynomials for layers
declared as einsum contractions.

>>> import symflops
>>> layer = symflops.declare("mm", dims={"M": "", "K": "", "N": ""},
...     tensors={"A": {"shape": ["M", "K"], "role": "input"},
...              "W": {"shape": ["K", "N"], "role": "param"}},
...     ops=["C[m,n] = A[m,k] W[k,n]"])
>>> d = symflops.derive(layer)
>>> [r.statement for r in d.rules]
['dW[k,n] = A[m,k] dC[m,n]', 'dA[m,k] = dC[m,n] W[k,n]']
>>> symflops.costs(d).flops_total
6*K*M*N
"""

__version__ = "0.1.0"

import importlib as _importlib
import sys as _sys
import types as _types

__all__ = ["declare", "load", "loads", "derive", "costs", "SymflopsError", "Span"]

# The public names are imported on first use, not here: ``symflops`` the
# command imports this package before anything else, and SymPy takes about
# a second to import; a Ctrl-C in that second must reach the command's
# handler (symflops/__main__.py), not print a traceback.
_HOME = {"declare": "declaration.reader", "load": "declaration.reader", "loads": "declaration.reader",
         "derive": "notebook", "costs": "count.cost",
         "SymflopsError": "core.errors", "Span": "core.errors"}


def __getattr__(name: str):
    if name not in _HOME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(_importlib.import_module(f".{_HOME[name]}", __name__), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))


class _Package(_types.ModuleType):
    """``symflops.derive.backward`` is the function, as it was when this file imported
    it eagerly, even after the submodule ``symflops.derive.backward`` is imported (the
    import system then sets the package's attribute to the module)."""

    @property
    def derive(self):
        from .notebook import derive

        return derive

    @derive.setter
    def derive(self, module):  # the submodule, recorded by the import system: keep the function
        pass


_sys.modules[__name__].__class__ = _Package
