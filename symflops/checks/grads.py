"""``symflops grads``: run the declared forward pass and the derived backward
rules on given arrays, and write every derived gradient.

Input (one ``.npz``): every input, parameter and buffer of the layer by its
declared name, and optionally the upstream gradient of each layer output, named
``d`` + the output's name (``dY``).  An absent upstream gradient is all ones: the
gradient of the sum of that output.  Any other name is refused, so that a
misspelt ``dy`` cannot silently become ones.

Conventions and invariants:

* dims are inferred from shapes: an axis declared as a plain dim (``B``)
  binds it; every other axis (``P + K - 1``) and every later use of a dim must
  then agree.  Missing arrays, wrong ranks and conflicting sizes are
  SymflopsErrors naming the tensor and its expected shape.
* arithmetic is float64 whatever the input dtype (complex and non-numeric
  arrays are refused); gradients are written in float64.  Index tensors
  (``role: index``, token ids) must be integer arrays whose values lie in the
  range of the axis they select along (``0 <= tok < V`` for ``E[tok[b], d]``);
  they get no gradient.
* a function defined on x > 0 only (log, sqrt, rsqrt, a divisor ``/ Z[s]``)
  whose argument has an element <= 0 is a SymflopsError naming the op.
* the output holds one array per derived gradient (``d`` + tensor name),
  intermediates such as ``dH`` included, contributions of several ops summed;
  frozen parameters and inputs that need no gradient have none.
* :func:`compute` returns the gradients; the command
  (:mod:`symflops.commands.grads`) writes them atomically through
  :mod:`symflops.commands.output`: a temporary file in the same directory,
  flushed to disk, then ``os.replace``; a failed run leaves no partial file
  and an existing file untouched (``--out -`` writes the archive to standard
  output).
"""

from __future__ import annotations

import difflib
import math
import os
import stat
import zipfile
import zlib
from dataclasses import dataclass
from typing import Mapping, NoReturn

import numpy as np
import sympy

from ..core.records import Derivation, grad_name
from ..core.errors import SymflopsError, file_kind
from ..core.ir import Layer, Tensor, dim_symbol, index_ranges
from .numeric import backward, check_domains, forward
from .sizes import extent as extent_at


def _shape_text(tensor: Tensor) -> str:
    return "[" + ", ".join(sympy.sstr(s) for s in tensor.shape) + "]"


#: Elements one input array, and all of them together, may hold (800 MB as
#: float64), and arrays in one archive; checked on the headers, before any data
#: is read, so that a small file claiming 10**10 elements is refused at once.
MAX_ELEMENTS = 10**8
MAX_ARRAYS = 1_000
_NPY_MAGIC = b"\x93NUMPY"


def _refuse(path: str, detail: str, hint: str = "save the arrays with numpy.savez(path, X=..., "
                                                  "W=...) (object arrays are not accepted)"
            ) -> NoReturn:
    raise SymflopsError(f"{path}: {detail}", hint=hint)


def check_headers(path: str) -> None:
    """Refuse an archive whose arrays' headers claim more than
    :data:`MAX_ELEMENTS` elements (one array or all together), or hold
    objects, without reading any array's data.  Only a regular file is
    opened (a FIFO would block, a device never end)."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise SymflopsError(f"{path}: no such file", hint="give the .npz of the inputs") from None
    except OSError as exc:
        raise SymflopsError(f"{path}: cannot read: {exc.strerror or exc}",
                            hint="give a readable .npz file") from None
    if not stat.S_ISREG(mode):
        raise SymflopsError(f"{path}: is {file_kind(mode)}, not a regular file",
                            hint="give the path of an .npz file (a FIFO or a device is never read)")
    if not zipfile.is_zipfile(path):
        with open(path, "rb") as fh:
            if fh.read(len(_NPY_MAGIC)) == _NPY_MAGIC:  # never loaded: it may be huge
                raise SymflopsError(f"{path}: is a single .npy array, not an .npz archive",
                                    hint="save the arrays with numpy.savez(path, X=..., W=...)")
        return  # not an archive: numpy.load says what it is
    total = total_bytes = 0
    with zipfile.ZipFile(path) as archive:
        members = archive.infolist()
        if len(members) > MAX_ARRAYS:
            _refuse(path, f"holds {len(members):,} members, more than the limit of {MAX_ARRAYS:,}")
        for info in members:
            name = info.filename.removesuffix(".npy")
            if name == info.filename:
                _refuse(path, f"holds {name[:60]!r}, which is not a .npy array")
            with archive.open(info) as fh:
                version = np.lib.format.read_magic(fh)
                if version not in ((1, 0), (2, 0)):
                    _refuse(path, f"array {name[:60]!r} has .npy format version {version}")
                read = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                        else np.lib.format.read_array_header_2_0)
                shape, _, dtype = read(fh)
            if dtype.hasobject:
                _refuse(path, f"array {name[:60]!r} holds objects (pickled), which are never "
                              "loaded")
            count = math.prod(shape)
            total, total_bytes = total + count, total_bytes + count * dtype.itemsize
            for what, n, nbytes in (
                    (f"array {name[:60]!r} ({tuple(shape)} of {dtype}) holds", count,
                     count * dtype.itemsize),
                    ("the arrays together hold", total, total_bytes)):
                if n > MAX_ELEMENTS or nbytes > 8 * MAX_ELEMENTS:
                    _refuse(path, f"{what} {n:,} elements by the headers, more than the limit "
                                  f"of {MAX_ELEMENTS:,} (8e8 bytes)",
                            "give smaller arrays; the gradients of a layer are checked at small "
                            "sizes")


def load_arrays(path: str) -> dict[str, np.ndarray]:
    """Every array of an ``.npz`` file, by name (pickled objects refused),
    after :func:`check_headers`."""
    try:
        check_headers(path)
        data = np.load(path, allow_pickle=False)  # an archive: a lone .npy was refused
        with data:
            return {name: data[name] for name in data.files}
    except FileNotFoundError:
        raise SymflopsError(f"{path}: no such file", hint="check the path of --inputs") from None
    except SymflopsError:
        raise
    except (OSError, ValueError, zipfile.BadZipFile, EOFError, zlib.error, RuntimeError,
            NotImplementedError) as exc:  # the last two: an encrypted or exotic zip member
        # NumPy tries pickle on anything that is not .npy/.npz; that says nothing useful.
        if "pickle" not in str(exc):
            _refuse(path, f"cannot read as .npz: {str(exc)[:200]}")
        _refuse(path, "holds an object (pickled) array, which is never loaded"
                if zipfile.is_zipfile(path) else "not a NumPy .npz archive")


def _as_float(name: str, array: np.ndarray) -> np.ndarray:
    if array.dtype.kind not in "biuf":
        raise SymflopsError(f"array {name!r} has dtype {array.dtype}, not a real number type",
                            hint="give real floating-point (or integer) arrays")
    return np.asarray(array, dtype=np.float64)


def _as_index(name: str, array: np.ndarray) -> np.ndarray:
    if array.dtype.kind not in "iu":
        raise SymflopsError(f"array {name!r} has dtype {array.dtype}, but {name} is an index "
                            "tensor", hint=f"give {name} as integers, e.g. "
                                           f"numpy.asarray({name}, dtype=numpy.int64)")
    return np.asarray(array, dtype=np.int64)


def _check_range(name: str, array: np.ndarray, size: int) -> None:
    """Every index selects an existing row: ``0 <= value < size``."""
    bad = array[(array < 0) | (array >= size)]
    if bad.size:
        raise SymflopsError(f"index array {name!r} holds {int(bad.flat[0])}, outside 0..{size - 1}",
                            hint=f"{name}'s values select along an axis of size {size}; "
                                 "give indices in that range")


@dataclass(frozen=True)
class Binding:
    """Where a dim got its value: from ``axis`` of array ``tensor``."""

    value: int
    tensor: str
    axis: int


def _expected(layer_tensor: Tensor, array_name: str) -> str:
    return f"{array_name} is declared with shape {_shape_text(layer_tensor)}"


def infer_dims(layer: Layer, arrays: Mapping[str, np.ndarray]) -> dict[str, int]:
    """Dim values read off the arrays' shapes; SymflopsError on a missing
    leaf array, a wrong rank or a conflict.  Upstream gradients (``dY``) bind
    and are checked like the tensors they belong to."""
    tensors = layer.tensor_map
    leaves = [t for t in layer.tensors if t.role != "activation"]
    missing = [t for t in leaves if t.name not in arrays]
    if missing:
        t = missing[0]
        others = f" (also missing: {', '.join(m.name for m in missing[1:])})" if missing[1:] else ""
        raise SymflopsError(f"no array for {t.role} {t.name!r}, shape {_shape_text(t)}{others}",
                            hint=f"add {t.name} to the .npz, e.g. numpy.savez(path, "
                                 f"{', '.join(f'{m.name}=...' for m in missing)}, ...)")
    # Which declared tensor each given array stands for.
    checked = [(t.name, t) for t in leaves]
    checked += [(grad_name(o), tensors[o]) for o in layer.outputs if grad_name(o) in arrays]
    bound: dict[str, Binding] = {}
    for array_name, tensor in checked:
        shape = arrays[array_name].shape
        if len(shape) != len(tensor.shape):
            raise SymflopsError(
                f"array {array_name!r} has {len(shape)} axes {tuple(shape)} but "
                f"{_expected(tensor, array_name)}",
                hint=f"give {array_name} one axis per declared dim")
        for axis, (extent, size) in enumerate(zip(tensor.shape, shape)):
            if size < 1:  # dims are positive integers
                raise SymflopsError(f"array {array_name!r} has an empty axis {axis}; "
                                    f"{_expected(tensor, array_name)}",
                                    hint="every axis needs at least one element")
            if not isinstance(extent, sympy.Symbol):
                continue
            name = str(extent)
            if name in bound and bound[name].value != size:
                first = bound[name]
                raise SymflopsError(
                    f"array {array_name!r} has size {size} on axis {axis} ({name}), but "
                    f"{first.tensor!r} gave {name}={first.value} (axis {first.axis}); "
                    f"{_expected(tensor, array_name)}",
                    hint=f"make every axis of size {name} agree")
            bound.setdefault(name, Binding(int(size), array_name, axis))
    # An axis declared as an expression with one dim still unknown (a
    # convolution's input, P + K - 1, once K is known) solves for that dim.
    progress = True
    while progress:
        progress = False
        for array_name, tensor in checked:
            for axis, (extent, size) in enumerate(zip(tensor.shape, arrays[array_name].shape)):
                unknown = [x for x in extent.free_symbols if str(x) not in bound]
                if isinstance(extent, sympy.Symbol) or len(unknown) != 1:
                    continue
                known = {x: bound[str(x)].value for x in extent.free_symbols if str(x) in bound}
                root = _solve_size(extent.subs(known), unknown[0], int(size))
                if root is not None:
                    bound[str(unknown[0])] = Binding(root, array_name, axis)
                    progress = True
    unbound = [d.name for d in layer.dims if d.name not in bound]
    if unbound:
        raise SymflopsError(
            f"cannot infer dim(s) {', '.join(unbound)}: no given array has an axis declared "
            f"as exactly that dim", hint="declare some tensor's axis as the plain dim")
    dims = {d.name: bound[d.name].value for d in layer.dims}
    # Every axis is checked against the dims found.
    for array_name, tensor in checked:
        want = _sizes(tensor, dims)
        given = arrays[array_name].shape
        for axis, (extent, size, expected) in enumerate(zip(tensor.shape, given, want)):
            if expected != size:
                raise SymflopsError(
                    f"array {array_name!r} has size {size} on axis {axis}, expected "
                    f"{sympy.sstr(extent)} = {expected} with "
                    + ", ".join(f"{k}={v}" for k, v in dims.items())
                    + f"; {_expected(tensor, array_name)}",
                    hint=f"give {array_name} the shape {want}")
    return {d.name: dims[d.name] for d in layer.dims}


def _solve_size(extent: sympy.Expr, dim: sympy.Symbol, size: int) -> int | None:
    """The one positive integer value of ``dim`` at which ``extent`` (a size
    in ``dim`` alone) is ``size``; None when there is none or several.  A
    size has non-negative coefficients in ``dim - 1``, so it is constant in
    ``dim`` (every value or none is a root) or rises by at least 1 per step,
    so that the root lies in ``1..size``: a binary search, never a solve of a
    polynomial of degree up to 64 (seconds to minutes in SymPy)."""
    poly = sympy.Poly(extent, dim)
    low, high = 1, size
    while low < high:  # the smallest value where the extent reaches size
        middle = (low + high) // 2
        if poly.eval(middle) >= size:
            high = middle
        else:
            low = middle + 1
    if poly.eval(low) != size or poly.eval(low + 1) == size:
        return None
    return low


def _sizes(tensor: Tensor, dims: Mapping[str, int]) -> tuple[int, ...]:
    return tuple(extent_at(e, dims) for e in tensor.shape)


def _check_names(layer: Layer, arrays: Mapping[str, np.ndarray]) -> None:
    allowed = [t.name for t in layer.tensors if t.role != "activation"]
    allowed += [grad_name(o) for o in layer.outputs]
    extra = [name for name in arrays if name not in allowed]
    if extra:
        name = extra[0]
        what = ("is an activation the forward pass computes"
                if name in layer.tensor_map else "is not a tensor of the layer")
        near = ([a for a in allowed if a.lower() == name.lower()]
                or difflib.get_close_matches(name, allowed, n=1))
        guess = f"did you mean {near[0]!r}? " if near else ""
        raise SymflopsError(f"array {name!r} in the inputs {what}",
                            hint=f"{guess}give only {', '.join(allowed)} "
                                 "(the d-names are upstream gradients, optional)")


def compute(derivation: Derivation, arrays: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Every derived gradient, in float64, for the given leaves and upstream
    gradients (missing upstream gradients are ones)."""
    layer = derivation.layer
    _check_names(layer, arrays)
    index = {t.name for t in layer.tensors if t.role == "index"}
    values = {name: _as_index(name, a) if name in index else _as_float(name, a)
              for name, a in arrays.items()}
    dims = infer_dims(layer, values)
    for t in layer.tensors:  # the activations the forward pass would allocate
        count = math.prod(_sizes(t, dims))
        if count > MAX_ELEMENTS:
            raise SymflopsError(f"{t.name} {_shape_text(t)} would hold {count:,} elements at "
                                + ", ".join(f"{k}={v}" for k, v in dims.items())
                                + f", more than the limit of {MAX_ELEMENTS:,}",
                                hint="give smaller arrays")
    for name, size in index_ranges(layer).items():
        # On the array as given: an unsigned 2**64 - 1 would wrap to -1 as int64.
        _check_range(name, arrays[name], int(size.subs({dim_symbol(d): v for d, v in dims.items()})))
    leaves = {t.name: values[t.name] for t in layer.tensors if t.role != "activation"}
    with np.errstate(all="ignore"):  # a function outside its domain is refused just below
        activations = forward(layer, leaves, dims)
    check_domains(layer, activations, "in the arrays given", "give arrays at which the "
                  "argument of log, sqrt, rsqrt or a division is positive")
    upstream = {grad_name(o): values.get(grad_name(o), np.ones_like(activations[o]))
                for o in layer.outputs}
    grads = backward(derivation, activations, upstream, dims)
    return {name: np.asarray(g, dtype=np.float64) for name, g in grads.items()}
