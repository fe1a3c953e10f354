"""Backward rules of softmax, RMSNorm, LayerNorm and cross-entropy, derived by
SymPy: each op's forward expression, the sub-expressions its saved tensors
replace, and the tensors it saves; the derivation itself (differentiate,
evaluate the created sums, substitute, contract, rename) is
:mod:`symflops.ops.derivation`, shared by all of them.  ``Reduction``,
``STAGES`` and ``in_range`` are re-exported here.

Conventions (which tensors each rule reads, and why):

* **softmax** saves its output ``P``: the rule is
  ``dA[s,t] = P[s,t] dP[s,t] - P[s,t] P[s,u] dP[s,u]``; no auxiliary tensor.
* **rmsnorm** saves the input ``X`` and the per-row reciprocal RMS
  ``r[b] = (sum_e X[b,e]**2 / D + eps)**(-1/2)`` (``rstd``), as fused kernels
  (Apex, Triton) do; ``r[b]**3`` appears as three factors ``r[b]``.
  ``saves="output"`` gives the rule in the output ``R`` and ``r`` instead.
* **layernorm** saves the output ``N`` and ``r[b]`` (the memory-efficient
  convention; the rule is then the textbook
  ``r (dN - mean(dN) - N mean(dN N))``).  ``saves="input"`` gives the rule
  in ``X``, the mean ``mu[b]`` and ``r[b]``, what fused kernels save by
  default.
* **cross-entropy** with integer targets ``y`` saves the probabilities
  ``P = softmax(Z)`` (auxiliary: the forward pass must produce them) and reads
  the one-hot of the targets, a factor ``onehot_y[b,v]`` equal to
  ``KroneckerDelta(y[b], v)``: SymPy's derivative of ``Z[b, y[b]]`` is that
  delta, read off as an indexed factor with the logits' layout.

``eps`` never appears in a rule: it only enters through ``r``.  Every
coefficient is a rational function of dimension symbols (``-1/D``, ``1/B``).
"""

from __future__ import annotations

import functools
from typing import Callable

import sympy

from ..core.ir import Factor, dim_symbol
from .derivation import STAGES, DerivedOp, Reduction, derive_reduction, fresh_letters, index_symbol
from .sums import (Letters, Positions, elements, exp_elements, in_range, replace_row_sums,
                   row_of_element)

__all__ = ["EPS", "STAGES", "Reduction", "check_arguments", "cross_entropy_rule", "default_dim",
           "in_range", "layernorm_rule", "rmsnorm_rule", "softmax_rule", "substitute_softmax",
           "unused_name"]

#: Default epsilon of the normalisations.
EPS = sympy.Symbol("epsilon", positive=True)


def substitute_softmax(expr: sympy.Expr, logits: sympy.IndexedBase, probs: sympy.IndexedBase,
                        ks: Positions, dims: tuple[sympy.Expr, ...],
                        norm: sympy.IndexedBase) -> sympy.Expr:
    """``sum_u exp(A[..u..]) -> Z[..]`` and ``exp(A[..i..]) -> P[..i..] Z[..]``:
    the normaliser ``Z`` then cancels by itself."""
    expr = replace_row_sums(expr, dims, exp_elements(logits, ks), lambda row: norm[row])

    def is_exp(e: sympy.Basic) -> bool:
        return isinstance(e, sympy.exp) and row_of_element(e.args[0], logits, ks) is not None

    def to_probs(e: sympy.exp) -> sympy.Expr:
        element = e.args[0]
        return probs[element.indices] * norm[row_of_element(element, logits, ks)]

    return expr.replace(is_exp, to_probs)


def _substitute_centred(expr: sympy.Expr, x: sympy.IndexedBase, ks: Positions, shift: Callable,
                        scale: sympy.IndexedBase, out: sympy.IndexedBase) -> sympy.Expr:
    """``x[..i..] -> out[..i..] / scale[..] + shift(..)``: the input in terms
    of the normalised output."""
    def is_x(e: sympy.Basic) -> bool:
        return row_of_element(e, x, ks) is not None

    def from_out(e: sympy.Indexed) -> sympy.Expr:
        row = row_of_element(e, x, ks)
        return out[e.indices] / scale[row] + shift(row)

    return expr.replace(is_x, from_out)


def check_arguments(indices: tuple[str, ...], index: tuple[str, ...], names: tuple[str, ...]) -> Positions:
    """Validate the arguments; return the positions of the reduced indices."""
    if len(set(indices)) != len(indices) or any(not i or "'" in i for i in indices):
        raise ValueError(f"index letters must be distinct plain names: {indices}")
    if not index or len(set(index)) != len(index):
        raise ValueError(f"the reduced indices must be distinct and at least one: {index}")
    for i in index:
        if i not in indices:
            raise ValueError(f"reduced index {i!r} is not among {indices}")
    grads = tuple("d" + n for n in names)
    if len(set(names + grads)) != 2 * len(names):
        raise ValueError(f"tensor names must be distinct (and not each other's gradients): {names}")
    return tuple(indices.index(i) for i in index)


def default_dim(dim: sympy.Expr | None, index: str) -> sympy.Expr:
    return dim_symbol(index.upper()) if dim is None else dim


def _reduced(index: str | tuple[str, ...], dim: sympy.Expr | tuple[sympy.Expr, ...] | None
             ) -> tuple[tuple[str, ...], tuple[sympy.Expr, ...]]:
    """The reduced letters and their extents as tuples: one letter may be
    given alone (``"t"``, ``T``); an extent left out is the upper-cased letter."""
    letters = (index,) if isinstance(index, str) else tuple(index)
    if dim is None or isinstance(dim, tuple):
        dims = dim or (None,) * len(letters)
    else:
        dims = (dim,)
    if len(dims) != len(letters):
        raise ValueError(f"{len(letters)} reduced indices {letters} but {len(dims)} dims")
    return letters, tuple(default_dim(d, i) for i, d in zip(letters, dims))


def _fresh_for(index: tuple[str, ...], taken: set[str]) -> Letters:
    """A fresh summed letter for each reduced letter (the first free one after
    it: t -> u), each added to ``taken``."""
    out = []
    for i in index:
        out.append(fresh_letters(i, taken)[0])
        taken.add(out[-1])
    return tuple(index_symbol(f) for f in out)


def _at(idx: tuple[sympy.Expr, ...], ks: Positions, js: tuple[sympy.Expr, ...]) -> tuple[sympy.Expr, ...]:
    """``idx`` with ``js`` in place of the letters at positions ``ks``."""
    out = list(idx)
    for k, j in zip(ks, js):
        out[k] = j
    return tuple(out)


def unused_name(preferred: str, taken: tuple[str, ...]) -> str:
    name = preferred
    while name in taken:
        name += "_"
    return name


@functools.lru_cache(maxsize=None)
def softmax_rule(out: str = "P", inp: str = "A", out_indices: tuple[str, ...] = ("s", "t"),
                 index: str | tuple[str, ...] = "t",
                 dim: sympy.Expr | tuple[sympy.Expr, ...] | None = None) -> Reduction:
    """``out[..t..] = exp(inp[..t..]) / sum_u exp(inp[..u..])`` over ``index``
    (extent ``dim``, default the upper-cased letter), or jointly over a tuple
    of letters (and extents).  Saves ``out``."""
    index, dims = _reduced(index, dim)
    ks = check_arguments(out_indices, index, (out, inp))
    A, P = sympy.IndexedBase(inp, real=True), sympy.IndexedBase(out, positive=True)
    norm = sympy.IndexedBase(unused_name("Z", (out, inp)), positive=True)
    idx = tuple(index_symbol(i) for i in out_indices)
    us = _fresh_for(index, set(out_indices))
    forward = sympy.exp(A[idx]) / sympy.Sum(sympy.exp(A[_at(idx, ks, us)]),
                                            *((u, 0, d - 1) for u, d in zip(us, dims)))
    op = DerivedOp(
        name="softmax", output=Factor(out, out_indices), forward=forward,
        inp=Factor(inp, out_indices), base=A, index=index, extents=tuple(zip(index, dims)),
        substitute=lambda e: substitute_softmax(e, A, P, ks, dims, norm),
        saved=(Factor(out, out_indices),), aux=(),
        definitions=((Factor(out, out_indices), forward),),
        dims=frozenset().union(*(d.free_symbols for d in dims)),
    )
    return derive_reduction(op)


def _stats(x: sympy.IndexedBase, idx: tuple[sympy.Symbol, ...], ks: Positions,
           index: tuple[str, ...], dims: tuple[sympy.Expr, ...], eps: sympy.Expr,
           centred: bool) -> tuple[sympy.Expr, sympy.Expr]:
    """The row mean (or 0) and the reciprocal root of the row's mean square
    (centred on the mean when ``centred``), over fresh summed letters; a row
    is every element with the other letters fixed, ``prod(dims)`` of them."""
    taken = {str(i) for i in idx}
    es, fs = _fresh_for(index, taken), _fresh_for(index, taken)
    size = sympy.Mul(*dims)

    def over(body: sympy.Expr, js: Letters) -> sympy.Sum:
        return sympy.Sum(body, *((j, 0, d - 1) for j, d in zip(js, dims)))

    mean = over(x[_at(idx, ks, fs)], fs) / size if centred else sympy.Integer(0)
    variance = over((x[_at(idx, ks, es)] - mean) ** 2, es) / size
    return mean, (variance + eps) ** sympy.Rational(-1, 2)


@functools.lru_cache(maxsize=None)
def rmsnorm_rule(out: str = "R", inp: str = "X", out_indices: tuple[str, ...] = ("b", "d"),
                 index: str | tuple[str, ...] = "d",
                 dim: sympy.Expr | tuple[sympy.Expr, ...] | None = None, eps: sympy.Expr = EPS,
                 rstd: str = "r", saves: str = "input") -> Reduction:
    """``out[..d..] = inp[..d..] r[..]`` with ``r[..] = (sum_e inp[..e..]**2 / D
    + eps)**(-1/2)``, over ``index`` (or jointly over a tuple of letters, ``D``
    the product of their extents).  Saves ``inp`` and the auxiliary ``rstd``
    (``saves="input"``, the fused-kernel convention) or ``out`` and ``rstd``
    (``saves="output"``)."""
    index, dims = _reduced(index, dim)
    ks = check_arguments(out_indices, index, (out, inp, rstd))
    if saves not in ("input", "output"):
        raise ValueError(f"saves must be 'input' or 'output', not {saves!r}")
    size = sympy.Mul(*dims)
    X, R = sympy.IndexedBase(inp, real=True), sympy.IndexedBase(out, real=True)
    r = sympy.IndexedBase(rstd, positive=True)
    idx = tuple(index_symbol(i) for i in out_indices)
    _, rstd_expr = _stats(X, idx, ks, index, dims, eps, False)
    forward = X[idx] * rstd_expr
    aux = Factor(rstd, tuple(i for i in out_indices if i not in index))
    kept = Factor(inp if saves == "input" else out, out_indices)

    def substitute(expr: sympy.Expr) -> sympy.Expr:
        # sum_e X[..e..]**2 = D (r**-2 - eps), so the mean square plus eps is r**-2.
        squares = lambda js, f: row_of_element(f.base, X, ks, js) if f.is_Pow and f.exp == 2 else None
        expr = replace_row_sums(expr, dims, squares, lambda rw: size * (r[rw] ** -2 - eps))
        if saves == "output":
            expr = _substitute_centred(expr, X, ks, lambda rw: 0, r, R)
        return expr

    op = DerivedOp(
        name="rmsnorm", output=Factor(out, out_indices), forward=forward,
        inp=Factor(inp, out_indices), base=X, index=index, extents=tuple(zip(index, dims)),
        substitute=substitute, saved=(kept, aux), aux=(aux,),
        definitions=((Factor(out, out_indices), forward), (aux, rstd_expr)),
        dims=frozenset().union(*(d.free_symbols for d in dims)),
    )
    return derive_reduction(op)


@functools.lru_cache(maxsize=None)
def layernorm_rule(out: str = "N", inp: str = "X", out_indices: tuple[str, ...] = ("b", "d"),
                   index: str | tuple[str, ...] = "d",
                   dim: sympy.Expr | tuple[sympy.Expr, ...] | None = None, eps: sympy.Expr = EPS,
                   rstd: str = "r", mean: str = "mu", saves: str = "output") -> Reduction:
    """``out[..d..] = (inp[..d..] - mu[..]) r[..]`` with ``mu[..] = sum_e
    inp[..e..] / D`` and ``r[..] = (sum_e (inp[..e..] - mu[..])**2 / D +
    eps)**(-1/2)``, over ``index`` (or jointly over a tuple of letters, ``D``
    the product of their extents).  Saves ``out`` and the auxiliary ``rstd``
    (``saves="output"``), or ``inp``, ``mean`` and ``rstd`` (``saves="input"``)."""
    index, dims = _reduced(index, dim)
    ks = check_arguments(out_indices, index, (out, inp, rstd, mean))
    if saves not in ("input", "output"):
        raise ValueError(f"saves must be 'input' or 'output', not {saves!r}")
    size = sympy.Mul(*dims)
    X, N = sympy.IndexedBase(inp, real=True), sympy.IndexedBase(out, real=True)
    r, mu = sympy.IndexedBase(rstd, positive=True), sympy.IndexedBase(mean, real=True)
    idx = tuple(index_symbol(i) for i in out_indices)
    row_letters = tuple(i for i in out_indices if i not in index)
    mean_expr, rstd_expr = _stats(X, idx, ks, index, dims, eps, True)
    forward = (X[idx] - mean_expr) * rstd_expr
    r_aux, mu_aux = Factor(rstd, row_letters), Factor(mean, row_letters)

    def substitute(expr: sympy.Expr) -> sympy.Expr:
        # sum_e X[..e..] = D mu; then sum_e (X[..e..] - mu)**2 = D (r**-2 - eps).
        expr = replace_row_sums(expr, dims, elements(X, ks), lambda rw: size * mu[rw])

        def centred_squares(js: Letters, f: sympy.Expr) -> tuple | None:
            if not (f.is_Pow and f.exp == 2 and isinstance(f.base, sympy.Add)):
                return None
            for term in f.base.args:
                rw = row_of_element(term, X, ks, js)
                if rw is not None and sympy.expand(f.base - term + mu[rw]) == 0:
                    return rw
            return None

        expr = replace_row_sums(expr, dims, centred_squares, lambda rw: size * (r[rw] ** -2 - eps))
        if saves == "output":
            expr = _substitute_centred(expr, X, ks, lambda rw: mu[rw], r, N)
        return expr

    saved = (Factor(out, out_indices), r_aux) if saves == "output" else \
        (Factor(inp, out_indices), mu_aux, r_aux)
    op = DerivedOp(
        name="layernorm", output=Factor(out, out_indices), forward=forward,
        inp=Factor(inp, out_indices), base=X, index=index, extents=tuple(zip(index, dims)),
        substitute=substitute, saved=saved,
        aux=(r_aux,) if saves == "output" else (mu_aux, r_aux),
        definitions=((Factor(out, out_indices), forward), (mu_aux, mean_expr), (r_aux, rstd_expr)),
        dims=frozenset().union(*(d.free_symbols for d in dims)),
    )
    return derive_reduction(op)


@functools.lru_cache(maxsize=None)
def cross_entropy_rule(loss: str = "L", logits: str = "Z", target: str = "y",
                       logit_indices: tuple[str, ...] = ("b", "v"), index: str = "v",
                       dim: sympy.Expr | None = None,
                       batch_dims: tuple[sympy.Expr, ...] | None = None,
                       mean: bool = False, probs: str = "P") -> Reduction:
    """``loss = c sum_b (log sum_w exp(logits[b,w]) - logits[b, target[b]])``
    over ``index`` (the classes, extent ``dim``) and summed over every other
    letter (extents ``batch_dims``, in order; default the upper-cased
    letters); ``c`` is 1, or one over the number of rows when ``mean``.
    ``target`` holds integer class indices, with the logits' other letters.
    Saves the auxiliary probabilities ``probs`` and reads ``onehot_<target>``."""
    (k,) = check_arguments(logit_indices, (index,), (loss, logits, target, probs))
    if len(logit_indices) < 2:
        raise ValueError("cross-entropy needs a batch letter besides the class index")
    dim = default_dim(dim, index)
    batch = tuple(logit_indices[:k] + logit_indices[k + 1:])
    batch_dims = tuple(default_dim(None, b) for b in batch) if batch_dims is None else tuple(batch_dims)
    if len(batch_dims) != len(batch):
        raise ValueError(f"{len(batch)} batch letters {batch} but {len(batch_dims)} batch_dims")
    Z, y = sympy.IndexedBase(logits, real=True), sympy.IndexedBase(target, integer=True)
    P = sympy.IndexedBase(probs, positive=True)
    norm = sympy.IndexedBase(unused_name("Z", (loss, logits, target, probs)), positive=True)
    rows = tuple(index_symbol(b) for b in batch)
    w = index_symbol(fresh_letters(index, set(logit_indices))[0])

    def at(j: sympy.Expr) -> sympy.Indexed:
        return Z[rows[:k] + (j,) + rows[k:]]

    per_row = sympy.log(sympy.Sum(sympy.exp(at(w)), (w, 0, dim - 1))) - at(y[rows] if rows else y)
    scale = sympy.Integer(1) / sympy.Mul(*batch_dims) if mean else sympy.Integer(1)
    forward = scale * sympy.Sum(per_row, *((s, 0, n - 1) for s, n in zip(rows, batch_dims))) \
        if rows else scale * per_row
    onehot = f"onehot_{target}"
    v = index_symbol(index)
    p_aux = Factor(probs, logit_indices)
    p_expr = sympy.exp(at(v)) / sympy.Sum(sympy.exp(at(w)), (w, 0, dim - 1))
    op = DerivedOp(
        name="cross_entropy", output=Factor(loss, ()), forward=forward,
        inp=Factor(logits, logit_indices), base=Z, index=(index,),
        extents=((index, dim), *zip(batch, batch_dims)),
        substitute=lambda e: substitute_softmax(e, Z, P, (k,), (dim,), norm),
        saved=(p_aux, Factor(onehot, logit_indices)), aux=(p_aux,),
        definitions=((p_aux, p_expr),
                     (Factor(onehot, logit_indices), sympy.KroneckerDelta(y[rows] if rows else y, v))),
        dims=frozenset(dim.free_symbols).union(*(n.free_symbols for n in batch_dims)),
        onehot=(y, onehot, k),
    )
    return derive_reduction(op)
