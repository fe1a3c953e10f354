"""A forward scatter, ``Agg[dst[e], d] += M[e,d]``, with PyTorch.

A scatter is the adjoint of a lookup: ``Agg[v,d] = Σ_e [v = dst[e]] M[e,d]``,
the one-hot selection ``[v = dst[e]]`` writing an output letter that no
tensor operand carries.  NumPy evaluates it as written (the one-hot matrix
is an operand, :func:`symflops.ops.einsum.numeric.indicator`); PyTorch as a
model runs it: the product of the other operands over the index tensor's
letters, then ``scatter_add`` along the output's axis (``index_add_`` when
the index tensor's letters are all new), whose autograd backward is a gather
and which FLOPs-counting kernels do not count.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

from ...core.ir import Einsum, Factor


def scatter_select(e: Einsum) -> Factor | None:
    """The selection of ``e`` that writes an output letter no tensor operand
    carries (``[v = dst[e]]`` in ``Agg[v,d] = [v = dst[e]] M[e,d]``), if any."""
    carried = {i for f in e.factors for i in f.indices}
    return next((f for f in e.operands if f.is_select and f.indices[0] in e.output.indices
                 and f.indices[0] not in carried), None)


def gathered(e: Einsum, f: Factor) -> tuple[Einsum, tuple[str, ...]]:
    """``e`` before its scatter ``f``: the product over the output's letters
    with the scattered letter replaced, in place, by the index tensor's
    letters not on the output (``M[e,d]`` for ``Agg[v,d]``); and those letters."""
    v, letters = f.indices[0], f.indices[1:]
    new = tuple(dict.fromkeys(i for i in letters if i not in e.output.indices))
    at = e.output.indices.index(v)
    out = e.output.indices[:at] + new + e.output.indices[at + 1:]
    operands = tuple(g for g in e.operands if g is not f)
    return Einsum(Factor(e.output.tensor, out), operands, e.coefficient), new


def torch_scatter(torch: Any, e: Einsum, f: Factor, tensors: Mapping[str, Any],
                  extents: Mapping[str, int], product: Callable[[Einsum], Any]) -> Any:
    """``e``'s term with PyTorch: ``product`` of the gathered einsum, then
    ``scatter_add`` of it along the output's axis at the index tensor's values."""
    inner, new = gathered(e, f)
    part = product(inner)  # over the letters of inner.output that an operand carries
    present = [i for i in inner.output.indices if any(i in g.indices for g in inner.operands)]
    part = part.reshape([part.shape[present.index(i)] if i in present else 1
                         for i in inner.output.indices])
    part = part.expand([extents[i] for i in inner.output.indices])
    v, letters = f.indices[0], f.indices[1:]
    at = e.output.indices.index(v)
    idx = tensors[f.tensor].long()
    # The index laid out along part's axes (broadcast along the others).
    order = [i for i in inner.output.indices if i in letters]
    idx = idx.permute(*(letters.index(i) for i in order))
    idx = idx.reshape([part.shape[k] if i in letters else 1
                       for k, i in enumerate(inner.output.indices)]).expand(part.shape)
    lead, trail = part.shape[:at], part.shape[at + len(new):]
    flat = (*lead, -1, *trail)
    out = torch.zeros((*lead, extents[v], *trail), dtype=part.dtype, device=part.device)
    return out.scatter_add(at, idx.reshape(flat), part.reshape(flat))
