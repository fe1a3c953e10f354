"""The PyTorch oracle of ``symflops verify``: the layer run with torch (each
op kind's ``torch`` member), autograd's gradients and saved tensors, and
``torch.utils.flop_counter.FlopCounterMode``'s counts.

PyTorch is never imported at module import: :func:`load_torch` imports it
when a check runs, and every function takes the module as an argument.  Which
FLOP and saved-tensor differences are failures and which only notes is stated
in :mod:`symflops.checks.verify`; :func:`is_plain` and :func:`convention`
implement it.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

import numpy as np
import sympy

from ..count.cost import Costs
from ..core.records import Derivation
from ..core.ir import Einsum, Factor, Layer, dim_symbol
from ..ops.einsum.orders import steps, written
from .report import Direction, FlopCheck, FlopStatus, SavedCheck, SizeName
from .sizes import shape_at


def load_torch() -> Any | None:
    """The torch module, or None when PyTorch is not installed."""
    try:
        import torch
    except ImportError:
        return None
    return torch


def torch_forward(torch: Any, layer: Layer, leaves: Mapping[str, Any],
                  dims: Mapping[str, int] | None = None) -> dict[str, Any]:
    values = dict(leaves)
    for op in layer.ops:
        values.update(op.torch(torch, values, dims))
    return values


def torch_leaf(torch: Any, array: np.ndarray, requires_grad: bool = False) -> Any:
    """A float64 tensor, or an int64 one for an integer (index) array."""
    if np.asarray(array).dtype.kind in "iu":
        return torch.tensor(array, dtype=torch.int64)
    return torch.tensor(array, dtype=torch.float64, requires_grad=requires_grad)


def grad_or_zeros(torch: Any, outputs: Any, inputs: Sequence[Any], grad_outputs: Any) -> list[Any]:
    if not getattr(outputs, "requires_grad", True):  # reads none of them (a loop of one step
        return [torch.zeros_like(x) for x in inputs]  # never runs its state's statement)
    grads = torch.autograd.grad(outputs, list(inputs), grad_outputs, allow_unused=True)
    return [torch.zeros_like(x) if g is None else g for x, g in zip(inputs, grads)]


# ------------------------------------------------------------ FLOP checks --

def is_plain(e: Einsum) -> bool:
    """Two operands, no letter repeated within a factor, at least one summed
    letter, and every summed letter on both operands.  The oracle runs it as
    the kernel its bucket names (:mod:`symflops.ops.einsum.torch`): a
    contraction (a kept letter on one operand only) as one bmm, counted
    ``2 * product of all extents`` like symflops's ``flops``; a dot product
    (:func:`is_dot`) as a multiply and a sum, counted 0 like its ``flops``
    (its work is elementwise)."""
    if len(e.operands) != 2 or any(f.is_indicator for f in e.operands):
        return False
    a, b = e.operands
    if any(len(set(f.indices)) != len(f.indices) for f in (a, b, e.output)):
        return False
    summed = e.summed
    return bool(summed) and all(i in a.indices and i in b.indices for i in summed)


def is_dot(e: Einsum) -> bool:
    """A plain product whose kept letters are all on both operands: a dot
    product, row-wise (``Y[d] = A[b,d] G[b,d]``) or full (``KL[] = P[v] L[v]``)."""
    return is_plain(e) and all(i in f.indices for i in e.output.indices for f in e.operands)


def convention(e: Einsum) -> str:
    """Why PyTorch may count ``e`` differently from symflops (see the module doc)."""
    conditions = [f.condition() for f in e.operands if f.is_comparison]
    if conditions:
        return (f"restricted to {', '.join(conditions)}: PyTorch computes the full product and "
                "multiplies by a 0/1 mask; symflops counts the terms inside the domain only")
    shifts = [f.condition() for f in e.operands if f.is_shift]
    if shifts:
        return ("a shifted index (a convolution): PyTorch's einsum multiplies by the 0/1 tensor "
                f"[{', '.join(shifts)}] as a dense operand; symflops counts the terms with "
                f"{', '.join(shifts)} only")
    if any(f.is_select for f in e.operands):
        return ("a lookup (gather) or its scatter-add: PyTorch runs index_select and index_add, "
                "which it does not count; symflops counts the scatter's adds as elementwise work")
    if len(e.operands) == 1:
        return "a single-operand reduction or copy: PyTorch runs sum/diagonal, which it does not count"
    if any(len(set(f.indices)) != len(f.indices) for f in e.operands):
        return "a repeated letter (a diagonal): PyTorch takes it as a view first"
    if len(e.operands) > 2:
        return ("three or more operands: symflops counts each backward rule in its cheapest "
                "order, while PyTorch's autograd reuses the forward's partial products")
    a, b = e.operands
    if not e.summed:
        return ("no summed letter (outer or elementwise product): PyTorch counts it 0 as a mul, "
                "or 2 per term as a bmm over a length-1 axis; symflops counts 1 per term")
    lone = [i for i in e.summed if not (i in a.indices and i in b.indices)]
    if lone:
        return (f"letter(s) {', '.join(lone)} summed on one operand only: PyTorch sums them out "
                "first (a sum, not counted), symflops counts them inside the product")
    return ""


def _as_run(e: Einsum, extents: Mapping[str, sympy.Expr]) -> list[Einsum]:
    """A forward term as PyTorch runs it here: three or more plain tensors as
    the pairwise products of the written order (:func:`_written_order`), each
    judged on its own by :func:`is_plain` and :func:`convention`."""
    if (len(e.factors) < 3 or len(e.factors) != len(e.operands)
            or any(len(set(f.indices)) != len(f.indices) for f in e.factors)):
        return [e]
    return [Einsum(Factor("T", tuple(sorted(s.span - s.summed))),
                   (Factor("A", tuple(sorted(s.left))), Factor("B", tuple(sorted(s.right)))))
            for s in steps(e, extents, "FLOPs", written(len(e.factors)))]


def _count(torch: Any, fn: Callable[[], Any]) -> int:
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter:
        fn()
    return int(counter.get_total_flops())


def _meta_leaves(torch: Any, layer: Layer, derivation: Derivation, dims: Mapping[str, int],
                 device: str) -> dict[str, Any]:
    return {t.name: (torch.zeros(shape_at(layer, t.name, dims), dtype=torch.int64, device=device)
                     if t.role == "index" else
                     torch.randn(shape_at(layer, t.name, dims), dtype=torch.float64, device=device,
                                 requires_grad=t.name in derivation.needs_grad))
            for t in layer.tensors if t.role != "activation"}


def check_flops(derivation: Derivation, c: Costs, sizes: Mapping[SizeName, Mapping[str, int]],
                torch: Any) -> tuple[FlopCheck, ...]:
    """Each op's forward and backward FLOPs, and the layer totals, against
    FlopCounterMode at each named size (shapes only: the meta device)."""
    layer = derivation.layer
    rules_of: dict[int, list[int]] = {}
    for j, r in enumerate(derivation.rules):
        rules_of.setdefault(r.op, []).append(j)
    checks: list[FlopCheck] = []
    for size, dims in sizes.items():
        values = {d: sympy.Integer(v) for d, v in dims.items()}

        def num(expr: sympy.Expr) -> int:
            return int(expr.subs({dim_symbol(k): v for k, v in values.items()}))

        leaves = _meta_leaves(torch, layer, derivation, dims, "meta")
        full = torch_forward(torch, layer, leaves, dims)  # operands of each op, autograd-connected
        for k, op in enumerate(layer.ops):
            inputs = {n: full[n].detach().requires_grad_(n in derivation.needs_grad)
                      for n in op.inputs}
            fwd = _count(torch, lambda: op.torch(torch, inputs, dims)[op.output])
            checks.append(_flop_check("forward", k + 1, op.statement(), size,
                                      num(c.forward[k].flops), fwd,
                                      [p for t in op.terms for p in _as_run(t, op.dims())] or None))
            if k not in rules_of:
                continue
            out = op.torch(torch, inputs, dims)[op.output]
            wanted = [inputs[n] for n in op.inputs if n in derivation.needs_grad]
            G = torch.ones_like(out)
            bwd = _count(torch, lambda: torch.autograd.grad(out, wanted, G, allow_unused=True))
            terms = [t for j in rules_of[k] for t in derivation.rules[j].terms]
            derived = sum(num(c.backward[j].flops) for j in rules_of[k])
            checks.append(_flop_check("backward", k + 1, op.statement(), size, derived, bwd,
                                      [*op.terms, *terms] if op.terms else None))
        # Whole-layer totals: differences are explained per op above, so never a failure.
        fresh = _meta_leaves(torch, layer, derivation, dims, "meta")
        holder: dict[str, Any] = {}
        fwd_total = _count(torch, lambda: holder.update(torch_forward(torch, layer, fresh, dims)))
        checks.append(_flop_check("forward", None, "whole layer", size, num(c.flops_forward),
                                  fwd_total, None))
        wanted = [fresh[n] for n in fresh if n in derivation.needs_grad]
        if wanted:
            s = sum((holder[o] * torch.ones_like(holder[o])).sum() for o in layer.outputs)
            bwd_total = _count(torch, lambda: torch.autograd.grad(s, wanted, allow_unused=True))
            checks.append(_flop_check("backward", None, "whole layer", size,
                                      num(c.flops_backward), bwd_total, None))
    return tuple(checks)


def _flop_check(direction: Direction, op: int | None, statement: str, size: SizeName, derived: int,
                counted: int, einsums: Sequence[Einsum] | None) -> FlopCheck:
    if counted == derived:
        return FlopCheck(direction, op, statement, size, derived, counted, "agree", True)
    status: FlopStatus = "not counted" if counted == 0 else "differs"
    if einsums is None:
        return FlopCheck(direction, op, statement, size, derived, counted, status, True,
                         "see the per-op lines")
    reasons = list(dict.fromkeys(r for r in (convention(e) for e in einsums) if r))
    plain = all(is_plain(e) for e in einsums)
    if plain and (counted or all(is_dot(e) for e in einsums)):
        return FlopCheck(direction, op, statement, size, derived, counted, status, False,
                         "a plain contraction: PyTorch's bmm count should equal the derived one"
                         if counted else "a dot product: PyTorch's multiply and sum count 0, "
                         "and so should the derived 'flops' (its work is elementwise)")
    note = "; ".join(reasons) if reasons else "PyTorch lowers this op differently"
    return FlopCheck(direction, op, statement, size, derived, counted, status, True, note)


# ----------------------------------------------------------- saved tensors --

def check_saved(derivation: Derivation, leaves: Mapping[str, np.ndarray], torch: Any,
                dims: Mapping[str, int] | None = None) -> SavedCheck:
    """Which forward tensors autograd saves, against ``derivation.saved``."""
    layer = derivation.layer
    saved: list[Any] = []

    def pack(t: Any) -> Any:
        saved.append(t)
        return t

    tleaves = {n: torch_leaf(torch, a, n in derivation.needs_grad) for n, a in leaves.items()}
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        values = torch_forward(torch, layer, tleaves, dims)
    tensors = layer.tensor_map
    by_storage: dict[int, str] = {}
    for n, v in values.items():  # leaves first: an einsum that only permutes returns a view
        by_storage.setdefault(v.untyped_storage().data_ptr(), n)
    found: dict[str, None] = {}
    copies: dict[str, None] = {}
    internal: list[str] = []
    for t in saved:
        name = by_storage.get(t.untyped_storage().data_ptr())
        copy = False
        if name is None:  # a copy made by a reshape: recognise it by its values
            flat = np.sort(t.detach().reshape(-1).numpy())
            name = next((n for n, v in values.items() if v.numel() == t.numel()
                         and np.array_equal(np.sort(v.detach().reshape(-1).numpy()), flat)), None)
            copy = name is not None
        if name is None:
            internal.append("x".join(map(str, t.shape)))
        elif not (tensors[name].is_param or tensors[name].is_buffer):  # kept anyway
            found.setdefault(name, None)
            if copy:
                copies.setdefault(name, None)
    order = [t.name for t in layer.tensors]
    torch_saved = tuple(sorted(found, key=order.index))
    notes = []
    for n in torch_saved:
        if n not in derivation.saved:
            notes.append(f"PyTorch saves {n}, which no derived rule reads")
    for n in derivation.saved:
        if n not in found:
            notes.append(f"the derived rules read {n}; PyTorch does not save it")
    for n in copies:
        notes.append(f"PyTorch saves a copy of {n} (a reshape that is not a view), not {n} itself")
    if internal:
        notes.append(f"PyTorch also saves {len(internal)} tensor(s) that are no forward tensor "
                     f"(shapes {', '.join(internal)}): intermediates of torch.einsum, such as a "
                     "partial product or an operand with a letter summed out")
    return SavedCheck(derivation.saved, torch_saved, tuple(copies), tuple(internal), tuple(notes))
