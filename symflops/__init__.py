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

from .cost import costs  # noqa: E402
from .derive import derive  # noqa: E402
from .errors import Span, SymflopsError  # noqa: E402
from .spec import declare, load, loads  # noqa: E402

__all__ = ["declare", "load", "loads", "derive", "costs", "SymflopsError", "Span"]
