"""A unit lower-triangular solve by forward substitution:
``U[b,l,v] = X[b,l,v] - T[b,l,m] U[b,m,v] where m < l``.

The statement reads its own output with the row letter ``l`` replaced by a
summed letter ``m`` bounded by ``m < l``: row ``l`` of ``U`` is the drive's row
minus the strictly lower part of ``T`` applied to the rows before it, so that
``(I + T) U = X`` with ``T`` strictly lower triangular (``U = X + T U``:
``(I - T) U = X``).  That is ``torch.linalg.solve_triangular(I + T, X,
upper=False, unitriangular=True)``, which the gated DeltaNet's chunked algorithm
runs inside each chunk (the UT transform).

Invariants of a :class:`TriangularSolve`: the drive carries exactly the
output's letters in order; the state is read once, with the output's letters but
the row letter, which is a summed letter ``m`` the where-clause bounds by
``m < l`` (its only condition); the matrix carries ``l``, ``m`` and otherwise
letters of the output.  Anything else is refused by name where it is written.

Backward, derived by the einsum machinery (:mod:`symflops.ops.einsum.rules`) from
the statement with the earlier rows as an operand of their own,
``U = X - T U_prev`` with ``U_prev[b,m,v] = U[b,m,v]``: its rules are
``dX = dU``, ``dT[b,l,m] = -dU[b,l,v] U_prev[b,m,v] where m < l`` and
``dU_prev[b,m,v] = -T[b,l,m] dU[b,l,v] where m < l``.  The last sends the gradient
of the later rows back to the earlier ones, so the *total* gradient of ``U`` is
the back substitution ``G_U[b,m,v] = dU[b,m,v] - T[b,l,m] G_U[b,l,v] where m < l``
(the solve with the transposed matrix, run from the last row), and it replaces
``dU`` in the other rules: ``dX = G_U``, ``dT = -G_U U_prev where m < l``.

Counting convention (exact, one multiply-add = 2 FLOPs, the matrix-product
bucket: each sum over ``m`` keeps a letter of each operand):

* forward: row ``l`` takes ``l`` multiply-adds per column (the first row is a
  copy), ``L (L - 1) / 2`` per (batch, column): ``2 . rows . L (L - 1) / 2``;
* backward: the back substitution once, as many (counted in the first rule);
  the matrix's gradient over the pairs ``m < l``, the einsum's count;
* saved: ``U`` when the matrix needs a gradient.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from ..core.lazy import numpy as np
import sympy

from ..core.errors import Span, SymflopsError
from ..core.ir import Einsum, Factor, Order
from ..core.factors import relation
from ..core.records import OpCost, PatternTerm, Rule, Step, grad_name
from .base import Access, Choice, Scope, Unit, accesses
from .einsum.cost import term_cost
from .einsum.node import Contraction
from .einsum.numeric import run_einsum
from .einsum.rules import contraction_rules
from .recurrence import prev_name, total_name

#: The statement form, for messages.
EXAMPLE = "'U[b,l,v] = X[b,l,v] - T[b,l,m] U[b,m,v] where m < l'"


@dataclass(frozen=True)
class TriangularSolve:
    """``out = drive + sign * matrix out_prev`` over the earlier rows ``col < row``."""

    out: Factor
    matrix: Factor
    drive: Factor
    row: str
    col: str
    sign: int
    index_dims: tuple[tuple[str, sympy.Expr], ...]
    text: str = ""
    span: Span | None = field(default=None, compare=False)
    kind = "triangular solve"
    aux_description = ""

    @property
    def output(self) -> str:
        return self.out.tensor

    @property
    def inputs(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys((self.matrix.tensor, self.drive.tensor)))

    @property
    def terms(self) -> tuple[Einsum, ...]:
        """Not a sum of einsums: it reads its own output."""
        return ()

    @property
    def aux(self) -> tuple[Factor, ...]:
        return ()

    @property
    def earlier(self) -> Factor:
        """The earlier rows, ``U_prev[b,m,v] = U[b,m,v]``, an operand of the derivation."""
        return Factor(prev_name(self.output),
                      tuple(self.col if i == self.row else i for i in self.out.indices))

    @property
    def bound(self) -> Factor:
        """The where-clause ``[m < l]``."""
        return Factor("", (self.col, self.row), fn=relation("<"))

    def dims(self) -> dict[str, sympy.Expr]:
        return dict(self.index_dims)

    def statement(self) -> str:
        state = Factor(self.output, self.earlier.indices)
        sign = "-" if self.sign < 0 else "+"
        return f"{self.out} = {self.drive} {sign} {self.matrix} {state} where {self.col} < {self.row}"

    def unrolled(self) -> Contraction:
        """``U = X + sign T U_prev`` over ``m < l``: the einsums the rules are derived from."""
        return Contraction((Einsum(self.out, (self.drive,)),
                            Einsum(self.out, (self.matrix, self.earlier, self.bound),
                                   sympy.Integer(self.sign))), self.index_dims, self.text)

    def reads(self) -> tuple[Einsum, ...]:
        """The drive once per output element; the matrix at its pairs ``m < l``."""
        return (Einsum(self.out, (self.drive,)), Einsum(self.out, (self.matrix, self.bound)))

    def moved(self, rule: Rule | None = None) -> Access:
        """The forward pass's reads and writes, and a rule's from its terms; the
        back substitution (a :class:`SolveRule`) reads its system's triangle
        and its own earlier rows, which no product of its terms states: its
        bytes are refused, not guessed."""
        if not isinstance(rule, SolveRule):
            return accesses(self, rule)  # type: ignore[arg-type]
        raise SymflopsError(f"cannot count the bytes moved: the back substitution of the "
                            f"triangular solve {self.output} (a rule of the backward pass) is "
                            "not counted", self.span,
                            "count the forward pass (symflops roofline --phase forward)")

    def formula(self) -> None:
        return None

    def shown(self) -> None:
        return None

    def patterns(self) -> tuple[PatternTerm, ...]:
        return ()

    def split(self, layout: Any, widths: Any, unit: str = "FLOPs", order: str = "written") -> Any:
        """Split along any letter but its row letter, which the substitution runs along."""
        from .split import along

        return along(self, self.row, "runs a substitution", layout, widths, unit)

    def rules(self, number: int, targets: Sequence[str]) -> tuple[Rule, ...]:
        return solve_rules(self, number, tuple(targets))

    def cost(self, unit: Unit, order: Order = "written", sizes: tuple[tuple[str, int], ...] = (),
             choice: Choice = "declared") -> OpCost:
        """``L (L - 1) / 2`` multiply-adds per (batch, column), matrix-product bucket."""
        return OpCost(substitution(self, unit), sympy.Integer(0))

    def run(self, values: Mapping[str, Any], extents: Mapping[str, int],
            dims: Mapping[str, int] | None = None) -> dict[str, Any]:
        """Forward substitution in NumPy (float64), one row after another."""
        t = _matrix_over_output(self, np.asarray(values[self.matrix.tensor], float), extents)
        x = np.asarray(values[self.drive.tensor], float)
        return {self.output: substitute(t, x, self.out.indices.index(self.row), self.sign,
                                        "forward")}

    def torch(self, torch: Any, values: Mapping[str, Any],
              dims: Mapping[str, int] | None = None) -> dict[str, Any]:
        """``torch.linalg.solve_triangular`` of ``I - sign T`` (strictly lower part):
        PyTorch's own solver, an oracle independent of the substitution above."""
        rows = self.out.indices
        lone = [i for i in rows if i not in self.matrix.indices]      # the right sides
        shared = [i for i in rows if i != self.row and i in self.matrix.indices]
        x = values[self.drive.tensor]
        t = values[self.matrix.tensor]
        t = t.permute([self.matrix.indices.index(i) for i in (*shared, self.row, self.col)])
        size = x.shape[rows.index(self.row)]
        a = torch.eye(size, dtype=t.dtype, device=t.device) - self.sign * torch.tril(t, diagonal=-1)
        order = [*shared, self.row, *lone]
        xs = x.permute([rows.index(i) for i in order])
        flat = xs.reshape(*xs.shape[:len(shared) + 1], -1)
        u = torch.linalg.solve_triangular(a, flat, upper=False, unitriangular=True)
        u = u.reshape(xs.shape).permute([order.index(i) for i in rows])
        return {self.output: u}

    def latex(self, m: Any) -> str:
        """``U_{blv} = X_{blv} - \\sum_{m<l} T_{blm} U_{bmv}``."""
        name = m.t(self.output)
        name = f"({name})" if "_" in name else name
        state = f"{name}_{{{','.join(self.earlier.indices)}}}"
        sign = "-" if self.sign < 0 else "+"
        return (f"{m.ix(self.out)} = {m.ix(self.drive)} {sign} \\sum_{{{self.col} < {self.row}}} "
                f"{m.ix(self.matrix)}\\, {state}")


def substitution(op: TriangularSolve, unit: Unit) -> sympy.Expr:
    """One substitution's work: ``L (L - 1) / 2`` multiply-adds per (batch, column)."""
    dims = op.dims()
    size = dims[op.row]
    rows = sympy.Mul(*(dims[i] for i in op.out.indices if i != op.row))
    per = 1 if unit == "MACs" else 2
    return sympy.expand(per * rows * size * (size - 1) / 2)


def _matrix_over_output(op: TriangularSolve, t: np.ndarray,
                        extents: Mapping[str, int]) -> np.ndarray:
    """The matrix over the output's letters then the column letter (broadcast along
    the output letters it lacks)."""
    letters = (*op.out.indices, op.col)
    return run_einsum(Einsum(Factor("_T", letters), (op.matrix,)), {op.matrix.tensor: t},
                      extents)


def substitute(t: np.ndarray, x: np.ndarray, axis: int, sign: int, direction: str) -> np.ndarray:
    """Forward: ``u[l] = x[l] + sign sum_{m<l} t[l,m] u[m]``; reverse (the transposed
    system): ``g[m] = x[m] + sign sum_{l>m} t[l,m] g[l]``.  ``t`` has the output's axes
    then the column axis; ``axis`` is the row's."""
    t = np.moveaxis(np.moveaxis(t, -1, 0), axis + 1, 0)    # (row, col, rest...)
    x = np.moveaxis(np.asarray(x, float), axis, 0)          # (row, rest...)
    out = np.zeros_like(x)
    n = len(x)
    if direction == "forward":
        for i in range(n):
            out[i] = x[i] + sign * np.sum(t[i, :i] * out[:i], axis=0)
    else:
        for j in range(n - 1, -1, -1):
            out[j] = x[j] + sign * np.sum(t[j + 1:, j] * out[j + 1:], axis=0)
    return np.moveaxis(out, 0, axis)


# ---------------------------------------------------------------- rules --

@dataclass(frozen=True)
class SolveRule(Rule):
    """A rule that runs the back substitution first (counted in the op's first
    rule): it evaluates itself (:meth:`evaluate`) and counts itself
    (:meth:`own_cost`).  ``product`` is its einsum over ``G_U`` and the earlier
    rows (None: the rule is ``G_U`` itself)."""

    solve: TriangularSolve | None = None
    product: Einsum | None = None
    counted: bool = False

    @property
    def reads(self) -> tuple[str, ...]:
        assert self.solve is not None
        names = [self.solve.matrix.tensor]
        if self.product is not None:
            names.append(self.solve.output)
        return tuple(dict.fromkeys(names))

    @property
    def statement(self) -> str:
        s = self.solve
        assert s is not None
        g = Factor(total_name(s.output), s.out.indices)
        out = self.terms[0].output
        back = back_text(s)
        if self.product is None:
            return f"{out} = {g} where {back}"
        rhs = Rule.statement.fget(self).split(" = ", 1)[1]  # type: ignore[attr-defined]
        rhs = rhs.replace(str(s.earlier), str(Factor(s.output, s.earlier.indices)))
        return f"{out} = {rhs}, with {back}"

    def evaluate(self, env: Mapping[str, np.ndarray], extents: Mapping[str, int],
                 dims: Mapping[str, int] | None = None) -> np.ndarray:
        """The back substitution over ``env``'s upstream gradient, then the product."""
        s = self.solve
        assert s is not None
        extents = {**extents, s.col: extents.get(s.col, extents[s.row])}
        t = _matrix_over_output(s, np.asarray(env[s.matrix.tensor], float), extents)
        total = substitute(t, np.asarray(env[grad_name(s.output)], float),
                           s.out.indices.index(s.row), s.sign, "reverse")
        if self.product is None:
            return total
        values = {total_name(s.output): total, prev_name(s.output): env[s.output],
                  s.matrix.tensor: env[s.matrix.tensor]}
        return run_einsum(self.product, values, extents, dims)

    def own_cost(self, unit: Unit) -> OpCost:
        """The back substitution when this rule counts it, plus the product."""
        s = self.solve
        assert s is not None
        flops = substitution(s, unit) if self.counted else sympy.Integer(0)
        elementwise = sympy.Integer(0)
        if self.product is not None:
            f, w, _ = term_cost(self.product, self.dims(), unit, "cheapest", (), "minimum", 0)
            flops, elementwise = flops + f, elementwise + w
        return OpCost(sympy.expand(flops), sympy.expand(elementwise))


def back_text(s: TriangularSolve) -> str:
    """``G_U[b,m,v] = dU[b,m,v] - T[b,l,m] G_U[b,l,v] where m < l``, in the op's letters
    with the row and column letters swapped (the transposed system)."""
    g = Factor(total_name(s.output), s.earlier.indices)
    later = Factor(total_name(s.output), s.out.indices)
    sign = "-" if s.sign < 0 else "+"
    return (f"{g} = {Factor(grad_name(s.output), s.earlier.indices)} {sign} {s.matrix} "
            f"{later} summed over {s.row} > {s.col}")


def _steps(op: TriangularSolve) -> tuple[Step, ...]:
    g = Factor(total_name(op.output), op.out.indices)
    return (
        Step("shift", g, (), (
            f"{op.earlier} = {Factor(op.output, op.earlier.indices)} for {op.col} < {op.row}: "
            f"d{op.earlier} flows to the earlier rows of {op.output}, so its total gradient is "
            f"the back substitution {back_text(op)} (the transposed system, from the last row)")),
        Step("substitute", g, (), f"{g.tensor} replaces d{op.output} in the other rules"),
    )


def solve_rules(op: TriangularSolve, number: int, targets: tuple[str, ...]) -> tuple[Rule, ...]:
    """The rules of ``targets``: the machinery's rules of the unrolled statement
    with ``G_U`` for ``dU``, run after the back substitution (counted once)."""
    unrolled = op.unrolled()
    # The machinery's rule for the earlier rows, dU_prev = sign T dU over m < l: the
    # step the back substitution repeats, checked so that a change in the machinery
    # cannot silently change what the evaluator runs.
    (step,) = contraction_rules(unrolled, number, op.earlier.tensor)
    names = sorted(f.tensor for t in step.terms for f in t.factors)
    if len(step.terms) != 1 or names != sorted((op.matrix.tensor, grad_name(op.output))):
        raise AssertionError(f"unexpected rule for the earlier rows: {step.statement}")
    g = Factor(total_name(op.output), op.out.indices)
    rename = {grad_name(op.output): g.tensor}
    rules: list[Rule] = []
    for name in sorted(targets, key=lambda n: n != op.drive.tensor):
        for r in contraction_rules(unrolled, number, name):
            (term,) = r.terms
            operands = tuple(dataclasses.replace(f, tensor=rename.get(f.tensor, f.tensor))
                             for f in term.operands)
            product = dataclasses.replace(term, operands=operands)
            plain = product.operands == (g,) and product.coefficient == 1 \
                and product.output.indices == g.indices
            rules.append(SolveRule(r.wrt, number, (product,), r.index_dims,
                                   (*r.steps, *_steps(op)), not plain, op,
                                   None if plain else product, not rules))
    return tuple(rules)


# ------------------------------------------------------------- statement --

def solve_form(st: Any, name: str) -> bool:
    """Whether a statement that reads its own output ``name`` is written as a
    triangular solve: the output read with plain letters, one of them other than
    the output's at its place, and a where-clause."""
    refs = [r for r in st.refs if r.name == name]
    if len(refs) != 1 or not st.where:
        return False
    (ref,) = refs
    if ref.shifts or getattr(ref, "gathers", ()) or len(ref.indices) != len(st.lhs.indices):
        return False
    return sum(a != b for a, b in zip(ref.indices, st.lhs.indices)) == 1


def lower_solve(st: Any, out: Factor, scope: Scope) -> TriangularSolve:
    """``U[..l..] = X[..l..] -/+ T[..l,m..] U[..m..] where m < l`` as a
    :class:`TriangularSolve`; SymflopsError at the place of anything else."""
    at, name = scope.at, out.tensor
    (ref,) = [r for r in st.refs if r.name == name]
    k = next(j for j, (a, b) in enumerate(zip(ref.indices, out.indices)) if a != b)
    row, col = out.indices[k], ref.indices[k]
    if col in out.indices:
        raise SymflopsError(f"{name} is read with {col!r}, a letter of the output, in place "
                            f"of {row!r}", at(ref.index_columns[k]),
                            f"a triangular solve reads the earlier rows through a summed "
                            f"letter, e.g. {EXAMPLE}")
    if len(st.where) != 1 or not _strict(st.where[0], col, row):
        c = st.where[-1] if st.where else None
        raise SymflopsError(f"the earlier rows of {name} must be bounded by '{col} < {row}' "
                            "alone", at(c.column) if c is not None else at(ref.column),
                            f"write 'where {col} < {row}', e.g. {EXAMPLE}")
    if len(st.terms) != 2:
        raise SymflopsError("a triangular solve is 'drive -/+ matrix * earlier rows'",
                            at(st.terms[0].column), f"write it as {EXAMPLE}")
    with_state = [t for t in st.terms if any(f is ref for f in t.factors)][0]
    drive_term = [t for t in st.terms if t is not with_state][0]
    if drive_term.negative:
        raise SymflopsError("the drive of a triangular solve is added", at(drive_term.column),
                            f"write it first, e.g. {EXAMPLE}")
    others = [f for f in with_state.factors if f is not ref]
    if len(others) != 1 or not hasattr(others[0], "indices") or others[0].gathers \
            or others[0].shifts:
        raise SymflopsError("the earlier rows must be multiplied by one tensor, the matrix",
                            at(with_state.column), f"e.g. {EXAMPLE}; compute a product of "
                            "several tensors or a scaled matrix in an op of its own")
    matrix = others[0]
    letters = set(matrix.indices)
    if len(set(matrix.indices)) != len(matrix.indices) or not {row, col} <= letters \
            or not letters <= set(out.indices) | {col}:
        raise SymflopsError(f"the matrix {matrix.name} must carry {row!r}, {col!r} and "
                            "otherwise distinct letters of the output", at(matrix.column),
                            f"e.g. {EXAMPLE}")
    drives = drive_term.factors
    plain = len(drives) == 1 and hasattr(drives[0], "indices") and not drives[0].shifts \
        and not drives[0].gathers
    if not plain or tuple(drives[0].indices) != out.indices:
        raise SymflopsError("the drive must be one tensor with the output's letters in order",
                            at(drive_term.column), f"e.g. {EXAMPLE}; compute it in an op "
                            "of its own")
    if scope.extents.get(col) != scope.extents.get(row):
        raise SymflopsError(f"{col!r} and {row!r} range over different dims",
                            at(matrix.column), "a triangular system is square")
    for taken in (prev_name(name), total_name(name)):
        if taken in scope.known:
            raise SymflopsError(f"the name {taken!r} is taken", at(ref.column),
                                f"rename the tensor {taken!r}: the solve for {name} names its "
                                f"earlier rows and its total gradient {prev_name(name)} and "
                                f"{total_name(name)}")
    drive = drives[0]
    index_dims = tuple((i, scope.extents[i]) for i in (*out.indices, col))
    return TriangularSolve(out, Factor(matrix.name, tuple(matrix.indices), at(matrix.column)),
                           Factor(drive.name, tuple(drive.indices), at(drive.column)), row, col,
                           -1 if with_state.negative else 1, index_dims, scope.text, scope.span)


def _strict(c: Any, col: str, row: str) -> bool:
    """Whether a condition says ``col < row`` (or ``row > col``) with no offset."""
    if c.offset:
        return False
    return (c.left, c.op, c.right) in ((col, "<", row), (row, ">", col))
