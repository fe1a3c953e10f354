"""``symflops verify``: check a derivation numerically and against PyTorch.

What is checked, at small random sizes in float64 (dims drawn distinct, so
that a transposed rule cannot pass by accident):

1. *each backward rule on its own*: the rules that forward op ``k`` sends to
   tensor ``T`` (one, or several when ``T`` sits on and off a diagonal) are
   evaluated with a random upstream gradient ``G`` and compared, along a random
   Gaussian direction ``V`` of ``T``'s shape, with a central finite difference
   of the op's scalar ``sum(G * op_k(...))`` along ``V`` (``sum(dT * V)``
   against the difference: a rule wrong in any element changes that sum; two
   evaluations per tensor, where differences one element at a time took two
   per element, 13,296 whole-layer forwards for attention_mla); and,
   where PyTorch is installed, with ``torch.autograd.grad`` of the same
   scalar, the op built with ``torch.einsum``.
2. *the chained rules*: every gradient the derivation computes (leaves and
   intermediates, contributions summed) against finite differences of the
   layer's scalar ``sum over outputs of dY * Y`` (``dY`` random), perturbing
   the tensor where it is read along a random direction as above, and, element
   by element, against torch.autograd on the whole layer.
3. *FLOPs* (PyTorch only): each forward op and the backward of each op, at the
   small sizes and at medium sizes (dims 8..64, on the meta device), against
   ``torch.utils.flop_counter.FlopCounterMode``.
4. *saved activations* (PyTorch only): ``derivation.saved`` against what
   autograd saves (``saved_tensors_hooks``), tensors identified by storage
   (a view of a forward tensor is that tensor) or else by value (a copy).

A tensor that a function defined on x > 0 (log, sqrt, rsqrt, a divisor)
reads directly is drawn positive; one such function whose argument is an
intermediate that comes out non-positive is refused (exit 2) naming the op,
rather than compared as NaN.

What is a failure (exit 1), and what only a note:

* failure: a rule group or a chained gradient off by more than
  ``FD_TOLERANCE`` (the finite difference along the direction, relative to
  ``max(1, |difference|)``) or ``TORCH_TOLERANCE`` (autograd, relative to
  ``max(1, max |reference|)``); a rule of another shape than its tensor; a
  rule that cannot be evaluated.  A chained gradient beyond ``FD_TOLERANCE``
  is held instead to three times the difference's own error, measured as
  how far it moves when the step doubles, where that error is at most
  ``FD_NOISE_LIMIT`` (rounding through a whole model's chain reaches a few
  parts in a million; a wrong rule is off by far more); the report says so.
* failure: a FLOP count that disagrees with PyTorch for a *plain product*:
  two operands, no repeated letter, every summed letter on both operands and at
  least one of them.  The oracle runs each as the kernel its bucket names
  (:mod:`symflops.ops.einsum.torch`): a matrix product as one bmm, whose count
  is the derived ``2 * product of all extents``; a dot product (every kept
  letter on both operands) as a multiply and a sum, as PyTorch's dot kernels
  run it, counted 0, as the derived ``flops`` must be (its work is elementwise).
* note only: every other FLOP difference, for the ones PyTorch lowers differently
  by convention: products without a sum become ``mul`` and reductions ``sum``
  (not counted); a letter summed on one operand only is summed out first by a
  ``sum``; an outer product inside a backward becomes a bmm over a length-1
  axis (counted 2 per term where symflops counts 1); three or more operands
  are contracted in PyTorch's own order, and autograd's backward reuses the
  forward's partial products where symflops's rules do not.
* note only: any difference in saved tensors.  PyTorch saves what its bmm
  decomposition needs (reshaped views, sometimes copies or partial products),
  which is a convention of that implementation, not a property of the math.

PyTorch is imported lazily; without it only the finite-difference checks run.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from ..count.cost import costs
from ..core.records import Derivation, Rule, grad_name
from ..core.errors import SymflopsError
from ..ops.einsum.numeric import extents_at
from .numeric import (EPS, apply_rules, chained, check_domains, directional_difference,
                      directional_error, forward, relative_error)
from .oracle import check_flops, check_saved, grad_or_zeros, load_torch, torch_forward, torch_leaf
from .report import (FD_NOISE_LIMIT, FD_TOLERANCE, TORCH_TOLERANCE, FlopCheck, GradCheck, Report, RuleCheck,
                     json_ready, text_report)
from .sizes import (MEDIUM, MEDIUM_LIMITS, choose_sizes, given_sizes, random_leaves, shape_at,
                    small_sizes)

__all__ = ["Report", "json_ready", "text_report", "verify"]

DOMAIN_HINT = ("verify draws positive values (0.5 to 2) for a tensor that log, sqrt, rsqrt or a "
               "division reads directly; an intermediate must be positive by construction, "
               "e.g. exp(..), softplus(..), or elu(..) plus 1, or a sum of squares")


def _group_rules(derivation: Derivation) -> list[tuple[int, str, list[Rule]]]:
    """Rules by (op, wrt), in derivation order."""
    groups: dict[tuple[int, str], list[Rule]] = {}
    for r in derivation.rules:
        groups.setdefault((r.op, r.wrt), []).append(r)
    return [(op, wrt, rules) for (op, wrt), rules in groups.items()]


# ------------------------------------------------------------ rule checks --

def check_rules(derivation: Derivation, values: Mapping[str, np.ndarray], dims: Mapping[str, int],
                rng: np.random.Generator, torch: Any | None) -> tuple[RuleCheck, ...]:
    """Each (op, wrt) group of rules against the derivative of the op alone."""
    layer = derivation.layer
    checks = []
    for k, wrt, rules in _group_rules(derivation):
        op = layer.ops[k]
        extents = extents_at(op.index_dims, dims)
        G = rng.standard_normal(shape_at(layer, op.output, dims))
        statements = tuple(r.statement for r in rules)

        def scalar(x: np.ndarray, op=op, wrt=wrt, G=G, extents=extents) -> float:
            return float(np.sum(G * op.run({**values, wrt: x}, extents, dims)[op.output]))

        shape = np.shape(values[wrt])
        direction = rng.standard_normal(shape)
        numeric = directional_difference(scalar, values[wrt], direction)
        problem = ""
        try:
            derived = apply_rules(rules, {**values, grad_name(op.output): G}, dims)
            fd = directional_error(derived, numeric, direction)
        except (ValueError, IndexError, KeyError) as exc:  # a malformed rule
            derived, fd, problem = None, float("inf"), f"cannot evaluate: {exc}"
        t_err = None
        if torch is not None:
            tensors = {n: torch_leaf(torch, values[n]) for n in op.inputs}
            tensors[wrt].requires_grad_(True)
            out = op.torch(torch, tensors, dims)[op.output]
            (ref,) = grad_or_zeros(torch, out, [tensors[wrt]], torch.tensor(G))
            t_err = float("inf") if derived is None else relative_error(derived, ref.numpy())
        passed = fd <= FD_TOLERANCE and (t_err is None or t_err <= TORCH_TOLERANCE)
        if derived is not None and derived.shape != shape:
            problem = f"the rules give shape {derived.shape}, {wrt} has shape {shape}"
        elif not passed and not problem:
            problem = "the derived gradient differs from the reference"
        checks.append(RuleCheck(k + 1, wrt, grad_name(wrt), statements, fd, t_err, passed, problem))
    return tuple(checks)


def check_chain(derivation: Derivation, leaves: Mapping[str, np.ndarray], dims: Mapping[str, int],
                rng: np.random.Generator, torch: Any | None) -> tuple[GradCheck, ...]:
    """Every computed gradient, rules chained, against the whole layer's scalar."""
    layer = derivation.layer
    values = forward(layer, leaves, dims)
    upstream = {grad_name(o): rng.standard_normal(values[o].shape) for o in layer.outputs}
    outputs = set(layer.outputs)
    targets = [t.name for t in layer.tensors
               if t.name in derivation.needs_grad and t.name not in outputs]
    chain = chained(derivation, values, upstream, dims)
    grads, broken = chain.grads, chain.broken

    def total(new: Mapping[str, np.ndarray]) -> float:
        leaf = {n: new.get(n, v) for n, v in leaves.items()}
        override = {n: v for n, v in new.items() if n not in leaves}
        v = forward(layer, leaf, dims, override)
        return sum(float(np.sum(upstream[grad_name(o)] * v[o])) for o in layer.outputs)

    references: dict[str, np.ndarray] = {}
    if torch is not None:
        tleaves = {n: torch_leaf(torch, a, n in derivation.needs_grad) for n, a in leaves.items()}
        tvalues = torch_forward(torch, layer, tleaves, dims)
        s = sum((tvalues[o] * torch.tensor(upstream[grad_name(o)])).sum() for o in layer.outputs)
        refs = grad_or_zeros(torch, s, [tvalues[n] for n in targets], None)
        references = {n: r.detach().numpy() for n, r in zip(targets, refs)}

    checks = []
    for name in targets:
        direction = rng.standard_normal(np.shape(values[name]))
        numeric = directional_difference(lambda x, name=name: total({name: x}), values[name],
                                         direction)
        problem = broken.get(grad_name(name), "")
        derived = None if problem else grads.get(grad_name(name), np.zeros_like(direction))
        fd = float("inf") if derived is None else directional_error(derived, numeric, direction)
        allowed, noise = FD_TOLERANCE, None
        if derived is not None and FD_TOLERANCE < fd < float("inf"):
            # beyond the tolerance: how large is the difference's own error here?
            coarse = directional_difference(lambda x, name=name: total({name: x}),
                                            values[name], direction, 2 * EPS)
            noise = abs(numeric - coarse) / max(1.0, abs(numeric))
            if noise <= FD_NOISE_LIMIT:
                allowed = max(FD_TOLERANCE, 3 * noise)
        t_err = None
        if name in references:
            t_err = float("inf") if derived is None else relative_error(derived, references[name])
        passed = fd <= allowed and (t_err is None or t_err <= TORCH_TOLERANCE)
        why = problem or ("" if passed else "the chained gradient differs from the reference")
        checks.append(GradCheck(grad_name(name), fd, t_err, passed, why, allowed, noise))
    return tuple(checks)


# ---------------------------------------------------------------- verify --

def verify(derivation: Derivation, seed: int = 0, use_torch: bool = True,
           small: Mapping[str, int] | None = None) -> Report:
    """Every check of the module doc on ``derivation``, at the small sizes
    ``small`` (drawn when None); never raises for a wrong rule (that is a
    failed check in the report)."""
    layer = derivation.layer
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise SymflopsError(f"--seed must be a whole number 0 or more, got {seed!r}",
                            hint="give e.g. --seed 0 or --seed 12345")
    rng = np.random.default_rng(seed)
    small = small_sizes(layer, rng) if small is None else given_sizes(layer, small)
    medium = choose_sizes(layer, rng, *MEDIUM, MEDIUM_LIMITS)
    torch = load_torch() if use_torch else None
    leaves = random_leaves(layer, small, rng)
    with np.errstate(all="ignore"):  # a function outside its domain is refused just below
        values = forward(layer, leaves, small)
    check_domains(layer, values, f"at the values verify drew (seed {seed})", DOMAIN_HINT)
    rules = check_rules(derivation, values, small, rng, torch)
    chain = check_chain(derivation, leaves, small, rng, torch)
    notes: list[str] = []
    flops: tuple[FlopCheck, ...] = ()
    saved = None
    if torch is None:
        notes.append("PyTorch not installed: finite differences only" if use_torch
                     else "PyTorch not used (--no-torch): finite differences only")
    else:
        c = costs(derivation, "FLOPs", choice="minimum")  # the cheapest order at each size checked
        flops = check_flops(derivation, c, {"small": small, "medium": medium}, torch)
        saved = check_saved(derivation, leaves, torch, small)
    if not derivation.rules:
        notes.append("no gradient is needed: nothing to check in the backward pass")
    return Report(layer.name, layer.source, seed, small, medium,
                  None if torch is None else str(torch.__version__),
                  rules, chain, flops, saved, tuple(notes))
