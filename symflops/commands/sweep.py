"""``symflops sweep``: the polynomials over a grid of configurations, to CSV.

Each dim gets one or more values on the command line::

    B=1048576            one value
    D=1024:8192:1024     a range start:stop:step; the stop is included when
                         the steps land on it (1024, 2048, ..., 8192)
    N=8,16,32            a list; its items may be ranges too (8,16,64:128:32)

The grid is the Cartesian product of the values of every dim of the layer
(each dim must be given).  The reported polynomials (:data:`QUANTITIES`) are
compiled once with ``sympy.lambdify`` into NumPy functions and evaluated
vectorised: each block of the grid is an open mesh (one axis per dim) that
NumPy broadcasts, so there is no Python loop per configuration, and at most
:data:`BLOCK` configurations are held in memory at once.

Numbers are **float64**: exact while a value stays below 2**53 (about
9.0e15); above that a value carries float64's relative rounding (about 1e-16
per operation), since int64 would overflow at about 9.2e18 and FLOPs of a
large run exceed that.  ``symflops eval`` gives exact integers at one
configuration.  The CSV writes each integer below 2**53 as its digits (in
every column, also one whose other rows were rounded), and any other value
in the shortest form that reads back as the same float64
(``1.3835058055282164e+19``), so that a rounded value never looks exact.

Rows go in the order of the dims' declaration, the first dim varying slowest.
The file is written atomically by :mod:`symflops.commands.output` (a temporary file,
then a rename; ``-`` is standard output).  A value beyond float64's range
(about 1.8e308) is refused, naming the column and the configuration.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from functools import reduce
from typing import Any, Callable, Iterator, Mapping, Sequence

import numpy as np
import sympy

from ..core.errors import SymflopsError, printable
from ..count.records import Formula, Summary, lookup
from ..count.evaluate import check_all_given, check_definitions, check_dim_name, dim_value, number
from ..core.ir import Layer, dim_symbol
from .options import MAX_POINTS, QUANTITIES  # beside the parser, whose help names them
from .output import open_output
from ..core.sizes import size_problem

#: Configurations evaluated and formatted at once.
BLOCK = 1 << 18

#: Dims above this are not exact in float64.
MAX_VALUE = 2**53

_INT_LIMIT = 2.0**53  # integers below this are exact in float64; larger ones are written as floats


@dataclass(frozen=True)
class Axis:
    """One dim of the grid and its values (float64, positive integers)."""

    name: str
    values: np.ndarray

    def __len__(self) -> int:
        return len(self.values)


@dataclass(frozen=True)
class Compiled:
    """The quantities of one layer as NumPy functions of its dims, in the
    order of ``dims``.  ``columns`` are the CSV's names for them."""

    dims: tuple[str, ...]
    columns: tuple[str, ...]
    expressions: tuple[sympy.Expr, ...]
    functions: tuple[Callable[..., Any], ...]


@dataclass(frozen=True)
class SweepResult:
    configurations: int
    compile_seconds: float
    evaluate_seconds: float
    write_seconds: float

    @property
    def seconds(self) -> float:
        return self.compile_seconds + self.evaluate_seconds + self.write_seconds

    @property
    def rate(self) -> float:
        """Configurations per second, compiling, evaluating and writing included."""
        return self.configurations / self.seconds if self.seconds > 0 else math.inf


# ----------------------------------------------------------------- values --

def _positive_integer(text: str, name: str) -> int:
    value = dim_value(name, text.strip())
    if value > MAX_VALUE:
        raise SymflopsError(f"dimension {name} = {text.strip()} is larger than 2**53",
                            hint="a sweep computes in float64, exact for integers up to 2**53")
    return int(value)


def _range_count(text: str, name: str) -> tuple[int, int, int]:
    """``start:stop:step`` -> (start, step, count), checked."""
    parts = text.split(":")
    example = f"{name}=1024:8192:1024"
    if len(parts) != 3 or not all(p.strip() for p in parts):
        raise SymflopsError(f"bad range {text.strip()!r} for dimension {name}: expected "
                            "start:stop:step", hint=f"write e.g. {example} (the stop is included)")
    start, stop, step = (_positive_integer(p, name) for p in parts)
    if stop < start:
        raise SymflopsError(f"bad range {text.strip()!r} for dimension {name}: the stop "
                            f"{stop} is below the start {start}",
                            hint=f"write start:stop:step with start <= stop, e.g. {example}")
    return start, step, (stop - start) // step + 1


def value_count(name: str, text: str) -> int:
    """How many values ``text`` gives, without building them."""
    return sum(_range_count(item, name)[2] if ":" in item else 1
               for item in _items(name, text))


def _items(name: str, text: str) -> list[str]:
    items = text.split(",")
    if not all(item.strip() for item in items):
        raise SymflopsError(f"empty value in {name}={text}",
                            hint=f"separate values with single commas, e.g. {name}=8,16,32")
    return items


def parse_values(name: str, text: str) -> np.ndarray:
    """``"8,16,64:128:32"`` -> ``[8, 16, 64, 96, 128]`` (float64)."""
    chunks = []
    for item in _items(name, text):
        if ":" in item:
            start, step, count = _range_count(item, name)
            chunks.append(start + step * np.arange(count, dtype=np.float64))
        else:
            chunks.append(np.array([_positive_integer(item, name)], dtype=np.float64))
    return np.concatenate(chunks)


def parse_axes(items: Sequence[str], layer: Layer, limit: int = MAX_POINTS) -> tuple[Axis, ...]:
    """``["B=1048576", "D=1024:8192:1024", "F=8,16"]`` -> one Axis per dim of
    ``layer``, in the order the dims are declared.  The grid's size is checked
    against ``limit`` before any value is built."""
    known = [d.name for d in layer.free_dims]
    texts: dict[str, str] = {}
    for item in items:
        name, sep, text = item.partition("=")
        name = name.strip()
        if not sep or not name or not text.strip():
            raise SymflopsError(f"expected NAME=VALUES, found {item.strip()!r}",
                                hint="give each dim as e.g. B=1048576, D=1024:8192:1024 or "
                                     "N=8,16,32")
        check_dim_name(layer, name)
        if name in texts:
            raise SymflopsError(f"dimension {name} is given twice",
                                hint=f"give all of its values at once, e.g. {name}=8,16,32")
        texts[name] = text
    check_all_given(layer, texts)
    counts = {n: value_count(n, texts[n]) for n in known}
    size = math.prod(counts.values())
    if size > limit:
        shape = " x ".join(f"{counts[n]:,} ({n})" for n in known)
        raise SymflopsError(f"the grid has {size:,} configurations ({shape}), more than the "
                            f"limit of {limit:,}",
                            hint="use fewer values or larger steps, or sweep in parts")
    axes = tuple(Axis(n, parse_values(n, texts[n])) for n in known)
    check_grid_definitions(layer, axes)
    return axes


def check_grid_definitions(layer: Layer, axes: Sequence[Axis]) -> None:
    """:func:`symflops.count.evaluate.check_definitions` at every configuration of
    the grid: each defined dim that is a promised ratio (``R = N / G``) is a
    positive integer throughout, computed exactly (Python integers, over the
    sub-grid of the dims it uses, a block at a time)."""
    subs = layer.substitutions
    for name, formula in layer.definitions:
        if size_problem(formula) is None:
            continue  # a proved size: whole and positive wherever its dims are
        full = subs[dim_symbol(name)]
        used = [a for a in axes if dim_symbol(a.name) in full.free_symbols]
        num, den = sympy.fraction(sympy.together(full))
        symbols = [dim_symbol(a.name) for a in used]
        top, bottom = (sympy.lambdify(symbols, e, modules=[]) for e in (num, den))
        exact = [a.values.astype(np.int64).astype(object) for a in used]
        for block in blocks(exact):
            shape = tuple(len(b) for b in block)
            mesh = np.ix_(*block)
            whole = _WHOLE(np.broadcast_to(np.asarray(top(*mesh), dtype=object), shape),
                           np.broadcast_to(np.asarray(bottom(*mesh), dtype=object), shape))
            whole = np.asarray(whole, dtype=bool)
            if not whole.all():
                at = np.unravel_index(int(np.argmin(whole)), shape)  # the first point that fails
                check_definitions(layer, {a.name: int(b[i]) for a, b, i in zip(used, block, at)})
                raise AssertionError(f"{name} is not whole on the grid but passes at that point")


#: Whether a / b is a positive whole number, for Python integers (exact at any size).
_WHOLE = np.frompyfunc(lambda a, b: b != 0 and a % b == 0 and a // b > 0, 2, 1)


# ---------------------------------------------------------------- compile --

def _lookup(s: Summary[Formula], path: str) -> sympy.Expr:
    value = lookup(s, path)
    return sympy.Integer(value) if isinstance(value, int) else value  # never user text


def _max(*args: Any) -> Any:
    return reduce(np.maximum, args)


def _min(*args: Any) -> Any:
    return reduce(np.minimum, args)


def column_name(path: str, unit: str) -> str:
    """``flops.total`` in FLOPs, ``macs.total`` with --macs."""
    return "macs" + path[len("flops"):] if unit == "MACs" and path.startswith("flops.") else path


def _nested(expr: sympy.Expr) -> sympy.Expr:
    """A polynomial in Horner form (``B*(D*(4*E*G + ...) + ...)``): the same
    value with far fewer full-grid multiplications (ten times faster on a
    model's FLOP polynomial); anything else as it is."""
    gens = sorted(expr.free_symbols, key=str)
    if not gens or expr.has(sympy.Max, sympy.Min) or not expr.is_polynomial(*gens):
        return expr
    return sympy.horner(expr, *gens)


def compile_summary(layer: Layer, s: Summary[Formula],
                    quantities: Sequence[str] = QUANTITIES) -> Compiled:
    """Lambdify each quantity of the summary ``s`` once, as a NumPy function of
    the layer's dims."""
    dims = tuple(d.name for d in layer.free_dims)
    symbols = [d.symbol for d in layer.free_dims]
    expressions, functions = [], []
    for path in quantities:
        expr = _lookup(s, path)
        if expr.has(sympy.Sum, sympy.Product):
            raise SymflopsError(f"{path} of {layer.name} is an unevaluated sum, which a sweep "
                                "cannot vectorise",
                                hint="use symflops eval at single configurations")
        expressions.append(expr)
        functions.append(sympy.lambdify(symbols, _nested(expr),
                                        modules=[{"Max": _max, "Min": _min}, "numpy"]))
    return Compiled(dims, tuple(column_name(q, s.unit) for q in quantities),
                    tuple(expressions), tuple(functions))


# --------------------------------------------------------------- evaluate --

def blocks(axes: Sequence[np.ndarray], size: int | None = None) -> Iterator[tuple[np.ndarray, ...]]:
    """Split the grid of ``axes`` into sub-grids of at most ``size`` points
    (default :data:`BLOCK`), in row-major order: the concatenated rows of the
    blocks are the rows of the grid."""
    size = BLOCK if size is None else size
    if not axes:
        yield ()
        return
    inner = math.prod(len(a) for a in axes[1:])
    first = axes[0]
    if inner <= size:
        step = max(1, size // max(inner, 1))
        for i in range(0, len(first), step):
            yield (first[i:i + step], *axes[1:])
        return
    for i in range(len(first)):
        for block in blocks(axes[1:], size):
            yield (first[i:i + 1], *block)


def evaluate_block(compiled: Compiled, block: Sequence[np.ndarray]) -> np.ndarray:
    """Every quantity at every point of one block: a (points, quantities)
    float64 array, rows in row-major order of the block."""
    shape = tuple(len(a) for a in block)
    mesh = np.ix_(*block) if block else ()
    points = math.prod(shape)
    out = np.empty((points, len(compiled.functions)), dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore"):  # inf (and inf - inf) is reported, not warned about
        for k, f in enumerate(compiled.functions):
            value = np.asarray(f(*mesh), dtype=np.float64)
            out[:, k] = np.broadcast_to(value, shape).reshape(points)
    return out


def grid_points(block: Sequence[np.ndarray]) -> np.ndarray:
    """The dims' values of every point of a block, as (points, dims)."""
    shape = tuple(len(a) for a in block)
    points = math.prod(shape)
    return np.stack([np.broadcast_to(m, shape).reshape(points) for m in np.ix_(*block)], axis=1) \
        if block else np.empty((1, 0))


def check_compiled(compiled: Compiled, axes: Sequence[Axis]) -> None:
    """The compiled functions agree with exact evaluation at the grid's first
    and last configurations (a guard against a formula NumPy mis-evaluates)."""
    for pick in (0, -1):
        at = {a.name: a.values[pick] for a in axes}
        block = [np.array([at[n]]) for n in compiled.dims]
        numeric = evaluate_block(compiled, block)[0]
        exact_values = {n: sympy.Integer(int(v)) for n, v in at.items()}
        for name, expr, value in zip(compiled.columns, compiled.expressions, numeric):
            try:
                exact = float(number(expr, exact_values))
            except OverflowError:  # beyond float64: the sweep cannot write it
                raise _too_large(name, at) from None
            if not math.isfinite(value):
                raise _too_large(name, at)
            if not math.isclose(value, exact, rel_tol=1e-12, abs_tol=0.0):
                raise AssertionError(f"{name}: lambdified {value!r} != exact {exact!r} at {at}")


# ------------------------------------------------------------------ write --

def format_rows(table: np.ndarray) -> str:
    """CSV lines of a float64 table: each exact integer (below 2**53) as an
    integer, any other value as the shortest text that reads back as the
    same float, cell by cell (a column may hold both)."""
    if not len(table):
        return ""
    with np.errstate(invalid="ignore"):
        integral = np.isfinite(table) & (table == np.floor(table)) & (np.abs(table) < _INT_LIMIT)
        ints = np.where(integral, table, 0).astype(np.int64)
    columns = integral.all(axis=0)
    if columns.all():
        cells = ints.ravel().tolist()
    else:
        out = np.empty(table.shape, dtype=object)
        for k in range(table.shape[1]):
            if columns[k]:
                out[:, k] = ints[:, k].tolist()
            else:  # floats, with the exact integers among them put back as integers
                column = table[:, k].tolist()
                exact = ints[:, k].tolist()
                for i in np.flatnonzero(integral[:, k]).tolist():
                    column[i] = exact[i]
                out[:, k] = column
        cells = out.ravel().tolist()
    # %d for a column of integers, %s (an int's digits, a float's repr) otherwise
    row = ",".join("%d" if c else "%s" for c in columns) + "\n"
    return (row * len(table)) % tuple(cells)


def _too_large(column: str, at: Mapping[str, float]) -> SymflopsError:
    where = ", ".join(f"{n}={int(v)}" for n, v in at.items())
    return SymflopsError(f"{column} exceeds float64's range (about 1.8e308) in this grid"
                         + (f", at {where}" if where else ""),
                         hint="sweep smaller dims, or use symflops eval (exact integers) at "
                              "single configurations")


def write_csv(path: str, compiled: Compiled, axes: Sequence[Axis],
              clock: Callable[[], float] = time.perf_counter) -> tuple[int, float, float]:
    """Write the sweep's CSV to ``path`` ('-' for standard output) atomically,
    through :func:`symflops.commands.output.open_output` (a failure, Ctrl-C or SIGTERM
    leaves no temporary file and the old file as it was); return
    (configurations, seconds evaluating, seconds formatting and writing)."""
    evaluating = writing = 0.0
    rows = 0
    with open_output(path, "--csv") as out:
        out.write((",".join((*compiled.dims, *compiled.columns)) + "\n").encode("utf-8"))
        for block in blocks([a.values for a in axes]):
            t0 = clock()
            values = evaluate_block(compiled, block)
            t1 = clock()
            if not np.isfinite(values).all():
                row, col = np.argwhere(~np.isfinite(values))[0]
                point = grid_points(block)[row]
                raise _too_large(compiled.columns[int(col)], dict(zip(compiled.dims, point)))
            out.write(format_rows(np.concatenate([grid_points(block), values], axis=1))
                      .encode("utf-8"))
            writing += clock() - t1
            evaluating += t1 - t0
            rows += len(values)
    return rows, evaluating, writing


def sweep(layer: Layer, s: Summary[Formula], items: Sequence[str], path: str,
          limit: int = MAX_POINTS) -> SweepResult:
    """Parse the values, compile the summary ``s`` of ``layer``, and write
    the CSV of the whole grid to ``path``."""
    axes = parse_axes(items, layer, limit)
    t0 = time.perf_counter()
    compiled = compile_summary(layer, s)
    check_compiled(compiled, axes)
    compile_seconds = time.perf_counter() - t0
    rows, evaluating, writing = write_csv(path, compiled, axes)
    return SweepResult(rows, compile_seconds, evaluating, writing)


def summary_line(layer: Layer, result: SweepResult, path: str) -> str:
    where = "standard output" if path == "-" else printable(path)
    return (f"{printable(layer.name)}: {result.configurations:,} configurations in {result.seconds:.3g} s, "
            f"{result.rate:,.0f} configurations/s (compile {result.compile_seconds:.3g} s, "
            f"evaluate {result.evaluate_seconds:.3g} s, write {result.write_seconds:.3g} s) "
            f"-> {where}")
