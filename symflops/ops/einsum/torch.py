"""An einsum with PyTorch, as a model written in PyTorch computes it: the oracle
``symflops verify`` compares gradients, FLOPs and saved tensors with.

Each pairwise product runs as the kernel its bucket names
(:mod:`symflops.ops.einsum.orders`), so that FlopCounterMode counts what
symflops's ``flops`` counts: a dot product (a summed letter, every kept
letter on both operands: a gain's ``sum_b X[b,d] G[b,d]``, a full dot
``sum_v P[v] L[v]``) as a multiply and a sum, as ``torch.dot``,
``torch.linalg.vecdot`` and ``(x * y).sum()`` run it (none counted);
every other product with ``torch.einsum`` (a contraction lowers to bmm,
counted).  ``torch.einsum`` alone would lower a dot product to a bmm over
length-1 axes and count it, which no dot-product kernel of PyTorch does.
"""

from __future__ import annotations

import string
from typing import Any, Mapping, Sequence

from ...core.ir import Einsum, Op, dim_symbol
from ..functions import FUNCTIONS
from .numeric import extents_at, offset_at, shift_grid
from .scatter import scatter_select, torch_scatter



_TORCH_COMPARE = {"<=": "le", "<": "lt", ">=": "ge", ">": "gt"}


def _torch_indicators(torch: Any, e: Einsum, tensors: Mapping[str, Any], args: list[Any],
                      operands: list[list[str]], extents: Mapping[str, int],
                      dims: Mapping[str, int] | None = None) -> None:
    """Apply ``e``'s indicators the way a PyTorch model does, in place: a
    lookup ``[v = tok[b]] E[v,d]`` as ``index_select`` of E's rows (so that
    autograd's backward is PyTorch's own scatter-add), a condition ``[t <= s]``
    as a 0/1 mask multiplied into an operand that has both letters, else kept
    as an operand of the einsum."""
    for f in e.operands:
        if not f.is_select:
            continue
        v, idx = f.indices[0], tensors[f.tensor].long()
        found = False
        for k, letters in enumerate(operands):
            while v in letters:
                axis, a = letters.index(v), args[k]
                picked = a.index_select(axis, idx.reshape(-1))
                args[k] = picked.reshape(tuple(a.shape[:axis]) + tuple(idx.shape)
                                         + tuple(a.shape[axis + 1:]))
                letters[axis:axis + 1] = list(f.indices[1:])
                found = True
        if not found:  # nothing to look up in: the one-hot matrix itself
            values = torch.arange(extents[v], device=idx.device).reshape((-1,) + (1,) * idx.dim())
            args.append((idx.unsqueeze(0) == values).to(torch.float64))
            operands.append(list(f.indices))
    for f in e.operands:  # a shift [q = 2 p + k]: its 0/1 tensor over (q, p, k), an operand
        if not f.is_shift:
            continue
        device = args[0].device if args else None
        grid = shift_grid(torch, f, extents, dims, device=device)
        args.append((grid == 0).to(torch.float64))
        operands.append(list(f.indices))
    for f in e.operands:
        if not f.is_comparison:
            continue
        a, b = f.indices
        sizes = {i: n for letters, x in zip(operands, args) for i, n in zip(letters, x.shape)}
        sizes = {**extents, **sizes}
        ra = torch.arange(sizes[a], device=args[0].device if args else None)
        rb = torch.arange(sizes[b], device=ra.device) + offset_at(f, dims)
        mask = getattr(torch, _TORCH_COMPARE[f.relation])(ra[:, None], rb[None, :]).to(torch.float64)
        k = next((k for k, letters in enumerate(operands) if a in letters and b in letters), None)
        if k is None:
            args.append(mask)
            operands.append([a, b])
            continue
        names = {i: string.ascii_letters[n] for n, i in enumerate(dict.fromkeys(operands[k]))}
        mine = "".join(names[i] for i in operands[k])
        args[k] = torch.einsum(f"{mine},{names[a]}{names[b]}->{mine}", args[k], mask)


def _pair(torch: Any, a: Any, la: Sequence[str], b: Any, lb: Sequence[str],
          out: Sequence[str], letters: Mapping[str, str]) -> Any:
    """``a[la] b[lb] -> [out]`` (``out`` letters each on an operand): a dot
    product as a multiply and a sum, anything else with ``torch.einsum``
    (see the module doc)."""
    summed = [i for i in dict.fromkeys([*la, *lb]) if i not in out]
    if (summed and len(set(la)) == len(la) and len(set(lb)) == len(lb)
            and all(i in la and i in lb for i in out)):
        joined = [*out, *summed]

        def aligned(x: Any, mine: Sequence[str]) -> Any:
            x = x.permute([mine.index(i) for i in joined if i in mine])
            return x.reshape([x.shape[[i for i in joined if i in mine].index(i)] if i in mine
                              else 1 for i in joined])

        return (aligned(a, la) * aligned(b, lb)).sum(dim=tuple(range(len(out), len(joined))))
    spec = (f"{''.join(letters[i] for i in la)},{''.join(letters[i] for i in lb)}"
            f"->{''.join(letters[i] for i in out)}")
    return torch.einsum(spec, a, b)


def _written_order(torch: Any, args: Sequence[Any], operands: Sequence[Sequence[str]],
                   out: Sequence[str], letters: Mapping[str, str]) -> Any:
    """Three or more operands contracted pairwise left to right, one
    ``torch.einsum`` per pair, so that PyTorch's counter sees the order
    symflops counts (one einsum of them all would pick its own)."""
    acc, have = args[0], list(operands[0])
    for k in range(1, len(args)):
        later = {i for f in operands[k + 1:] for i in f} | set(out)
        joined = list(dict.fromkeys([*have, *operands[k]]))
        keep = [i for i in joined if i in later]
        acc, have = _pair(torch, acc, have, args[k], operands[k], keep, letters), keep
    spec = f"{''.join(letters[i] for i in have)}->{''.join(letters[i] for i in out)}"
    return torch.einsum(spec, acc)


def torch_einsum(torch: Any, e: Einsum, tensors: Mapping[str, Any],
                 dims: Mapping[str, int] | None = None,
                 extents: Mapping[str, int] | None = None) -> Any:
    """A forward term with ``torch.einsum`` (forward terms never repeat an output
    letter; one that broadcasts, as in a bias add, is expanded).  ``extents``
    sizes letters that no tensor carries (a mask over output letters)."""
    scatter = scatter_select(e)
    if scatter is not None:  # Agg[dst[e], d] += M[e,d]: M, then scatter_add (a gather back)
        return torch_scatter(torch, e, scatter, tensors, extents or {},
                             lambda inner: torch_einsum(torch, inner, tensors, dims, extents))
    letters = {i: string.ascii_letters[k] for k, i in enumerate(e.indices)}
    args = [FUNCTIONS[f.function.name].torch(torch, tensors[f.tensor]) if f.function
            else tensors[f.tensor] for f in e.factors]
    operands = [list(f.indices) for f in e.factors]
    if len(args) != len(e.operands):
        _torch_indicators(torch, e, tensors, args, operands, extents or {}, dims)
    present = [i for i in e.output.indices if any(i in f for f in operands)]
    if len(args) > 2 and len(args) == len(e.operands):
        out = _written_order(torch, args, operands, present, letters)
    elif len(args) == 2:
        out = _pair(torch, args[0], operands[0], args[1], operands[1], present, letters)
    elif args:
        spec = ",".join("".join(letters[i] for i in f) for f in operands)
        out = torch.einsum(spec + "->" + "".join(letters[i] for i in present), *args)
    else:  # a constant term (Y = X + 1): a scalar, broadcast to the output by torch_op
        device = next(iter(tensors.values())).device if tensors else None
        out = torch.ones((), dtype=torch.float64, device=device)
    coefficient = e.coefficient
    if coefficient.free_symbols:
        coefficient = coefficient.subs({dim_symbol(k): v for k, v in (dims or {}).items()})
    return out if coefficient == 1 else out * float(coefficient)


def torch_op(torch: Any, op: Op, tensors: Mapping[str, Any],
             dims: Mapping[str, int] | None = None) -> Any:
    """An einsum op: its terms with ``torch.einsum``, broadcast to the output and added."""
    total = None
    extents = extents_at(op.index_dims, dims) if dims else None
    for t in op.terms:
        part = torch_einsum(torch, t, tensors, dims, extents)
        present = [i for i in t.output.indices if any(i in f.indices for f in t.operands)]
        if len(present) != len(t.output.indices):  # a broadcast term (a bias): expand it
            shape = [1 if i not in present else part.shape[present.index(i)]
                     for i in t.output.indices]
            part = part.reshape(shape)
        total = part if total is None else total + part
    return total
