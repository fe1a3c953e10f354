"""Composition: an ``include:`` item in a declaration's ops.

::

    ops:
      - X0[b,s,d] = W_E[tok[b,s], d] + W_P[s,d]
      - include: gpt2_block.yaml    # a path relative to this file
        repeat: L                   # run it L times in sequence (default 1)
        tensors: {X: X0, Y: XL}     # its tensors under this file's names
        dims: {F: 4*D}              # its dims as expressions of this file's dims
        shared: [W_q, W_k]          # block parameters all L copies use (optional)

``include:`` names a file, or a block declared in the same file under a
top-level ``blocks:`` mapping (a name without ``.yaml``)::

    blocks:
      layer: {name: layer, dims: {...}, tensors: {...}, ops: [...]}
    ops:
      - include: layer
        repeat: L

An inline block is a declaration like a file's, without ``blocks:`` of its
own; it may include the file's other blocks and files.  ``symflops import-hf``
writes whole models this way, one file the user can read and edit.

The block's ops and tensors join the includer's under their new names.  A
block dim the ``dims`` map does not mention is the includer's dim of the same
name (added, with the block's description, when the includer lacks it).  A
block input the ``tensors`` map does not bind is bound to the includer's
tensor of the same name when there is one, else it becomes an input of the
includer.  A block's buffers (``role: buffer``) are bound the same way: every
copy of a repeated block reads the one table.  Every other block tensor keeps its name unless renamed, and must
not clash with a name of the includer.

``repeat: L`` stands for L copies in sequence, each with its own parameters
and activations, the output of one copy feeding the input of the next.  The
IR keeps one copy and records the repeat in a :class:`~symflops.core.ir.Block`;
:mod:`symflops.count.cost` multiplies each op's, parameter's and saved tensor's
count by the repeats of the blocks it lies in.

``shared: [W, ...]`` makes those block parameters one tensor for all the
copies of ``repeat: L``, as ALBERT and Universal Transformers tie their
layers: the parameter, its gradient and its optimizer state exist once
(:meth:`~symflops.core.ir.Layer.copies` skips the blocks that share it), each
copy still runs every rule, and its contribution ``dW^(l)`` is added into the
one gradient: ``(L - 1)·|W|`` additions a step, elementwise
(:func:`symflops.count.cost.costs`).  A shared name the includer already
has (a parameter of the same shape) is that tensor: the block reads the
includer's weight (tied encoder-decoder embeddings), with or without
``repeat``.  Only a parameter of the block can be shared, and without
``repeat`` only one the includer has; anything else is refused at its
position.
"""

from __future__ import annotations

import keyword
import math
import os
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import sympy

from ..core.errors import Span, SymflopsError, closest, quote, shorten
from ..lang.expr import parse_expression
from ..core.ir import Block, Component, Dim, Layer, Tensor, dim_symbol, rename
from ..core.sizes import check_size
from ..lang.yaml import IDENT

INCLUDE_KEYS = ("include", "repeat", "tensors", "dims", "shared")


@dataclass(frozen=True)
class Included:
    """An ``include:`` item, read and renamed into the includer's names."""

    layer: Layer                 # the block's dims, tensors and ops, renamed
    block: Block                 # its record in the includer
    nested: tuple[Block, ...]    # blocks the block itself includes, renamed
    reads: tuple[str, ...]       # the includer's tensors it reads (bound inputs)
    outputs: tuple[str, ...]     # the includer's names of what it produces
    new_dims: tuple[Dim, ...]    # block dims the includer did not declare
    span: Span | None
    shared: tuple[tuple[str, Span | None], ...] = ()  # ``shared:``, renamed, with places
    repeated: bool = False       # the item says ``repeat:``


def _text(node: Any, what: str) -> str:
    value = node.value
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise SymflopsError(f"{what} must be text", node.span, "write it as a plain string")
    return str(value)


REPEAT_HINT = ("repeat a block a positive whole number of times: a number, a dim or a "
               "polynomial in dims, e.g. 'repeat: 12', 'repeat: L' or 'repeat: 2*L'")
MAPPED_HINT = ("a block's dim is a positive whole number for every value of the dims: map it "
               "to a dim or a polynomial in them, e.g. 'dims: {F: 4*D}'")


def _size(node: Any, symbols: Mapping[str, sympy.Expr], what: str, lead: str,
          hint: str) -> sympy.Expr:
    """``repeat: L`` or a mapped dim ``F: 4*D``: a proved size
    (:mod:`symflops.core.sizes`), never a fraction or a formula that could be
    zero, negative or not whole."""
    value = node.value
    if isinstance(value, float) and math.isfinite(value):
        value = repr(value)  # 2.5 is read exactly as 5/2, then refused as not whole
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        found = ("a list" if isinstance(value, list) else "a mapping" if isinstance(value, dict)
                 else "nothing" if value is None else f"{type(value).__name__} {value!r}")
        raise SymflopsError(f"{what} must be a whole number or a formula of dims, found {found}",
                            node.span, hint)
    size = parse_expression(str(value), symbols, span=node.span)
    check_size(size, lead, node.span, hint)
    return size


def _name_map(node: Any, known: list[str], what: str) -> dict[str, tuple[Any, Span | None]]:
    if not isinstance(node.value, dict):
        raise SymflopsError(f"'{what}' of an include must be a mapping", node.span,
                            f"write e.g. '{what}: {{X: X0}}' (the block's name: the name here)")
    out = {}
    for key, (kspan, value) in node.value.items():
        if key not in known:
            raise SymflopsError(f"the included block has no {what[:-1]} {key!r}", kspan,
                                closest(key, known))
        out[key] = (value, kspan)
    return out


#: Directories (separated by os.pathsep) whose files any declaration may include.
INCLUDE_PATH = "SYMFLOPS_INCLUDE_PATH"


def include_roots(file: str) -> list[str]:
    """The directories an include of ``file`` may resolve into: ``file``'s own
    directory (its whole tree; '' is the current directory), then those listed
    in ``$SYMFLOPS_INCLUDE_PATH``."""
    extra = [d for d in os.environ.get(INCLUDE_PATH, "").split(os.pathsep) if d]
    return [os.path.dirname(file), *extra]


def _within(path: str, root: str) -> bool:
    return os.path.commonpath([path, root]) == root


def resolve_include(path: str, file: str, span: Span | None) -> str:
    """The file an ``include:`` of ``file`` names.  A relative path is looked
    up in ``file``'s directory, then in each ``$SYMFLOPS_INCLUDE_PATH``
    directory; the first that exists is taken.  Whatever it is, its real
    path (symbolic links resolved, ``..`` applied) must lie inside one of
    those directory trees: an include never reaches the rest of the file
    system (``include: /etc/passwd``, ``include: ../../secret.yaml``)."""
    if not path.strip():
        raise SymflopsError("the included file is empty", span,
                            "name a declaration file, e.g. 'include: ffn.yaml'")
    if "\0" in path:
        raise SymflopsError("the included file's name contains a NUL character", span,
                            "name a declaration file, e.g. 'include: ffn.yaml'")
    roots = include_roots(file)
    candidates = [path] if os.path.isabs(path) else [os.path.join(r, path) for r in roots]
    chosen = next((c for c in candidates if os.path.exists(c)), candidates[0])
    real = os.path.realpath(chosen)
    if not any(_within(real, os.path.realpath(r or os.curdir)) for r in roots):
        where = os.path.realpath(roots[0] or os.curdir)
        raise SymflopsError(
            f"cannot include {quote(path)}: it is outside {shorten(where, 200)}, the "
            "directory of the declaration that includes it", span,
            f"put the block in that directory (or below it), or list its directory in "
            f"${INCLUDE_PATH} (directories separated by '{os.pathsep}')")
    return chosen


def read_include(node: Any, file: str, dims: Mapping[str, Dim],
                 load_block: Callable[[str, Span | None], Layer]) -> Included:
    """Read one ``include:`` item of ``file``'s ops; ``dims`` are the
    includer's, ``load_block`` reads the block the item names (a block of the
    file's ``blocks:``, else a declaration file), checking cycles."""
    fields: dict[str, tuple[Span | None, Any]] = node.value
    for key, (kspan, _) in fields.items():
        if key not in INCLUDE_KEYS:
            raise SymflopsError(f"unknown key {key!r} in an include", kspan,
                                closest(key, list(INCLUDE_KEYS)))
    if "include" not in fields:
        raise SymflopsError("an ops item that is a mapping must be an include", node.span,
                            "write '- include: block.yaml', or write the op as a text statement")
    path_node = fields["include"][1]
    path = _text(path_node, "the included file")
    block = load_block(path, path_node.span)

    # Dims: mapped to expressions of the includer's dims, else shared by name.
    symbols = {name: d.symbol for name, d in dims.items()}
    new_dims = tuple(d for d in block.dims if d.name not in dims)
    mapped: dict[str, tuple[Any, Span | None]] = {}
    if "dims" in fields:
        mapped = _name_map(fields["dims"][1], [d.name for d in block.dims], "dims")
        new_dims = tuple(d for d in new_dims if d.name not in mapped)
    symbols.update({d.name: d.symbol for d in new_dims})
    subs: dict[sympy.Symbol, sympy.Expr] = {}
    for name, (value, _) in mapped.items():
        subs[dim_symbol(name)] = _size(value, symbols, f"dim {name!r}",
                                       f"the block's dim {name!r} is mapped to", MAPPED_HINT)

    repeat: sympy.Expr = sympy.Integer(1)
    if "repeat" in fields:
        repeat = _size(fields["repeat"][1], symbols, "'repeat'", "'repeat' is", REPEAT_HINT)

    names: dict[str, str] = {}
    bound: dict[str, Span | None] = {}   # the block tensors the include renames, with places
    if "tensors" in fields:
        for key, (value, kspan) in _name_map(fields["tensors"][1], [t.name for t in block.tensors],
                                             "tensors").items():
            new = _text(value, f"the new name of {key!r}")
            if not IDENT.match(new) or keyword.iskeyword(new):
                raise SymflopsError(f"{new!r} is not a valid tensor name", value.span,
                                    "use letters, digits and underscores, starting with a letter")
            names[key], bound[key] = new, value.span
    # A renamed op output renames the tensors named after it (Y_hat, rstd_Y, P_L, mask_Y).
    produced_by = {op.output for op in block.ops}
    for t in block.tensors:
        # a norm with a gain, Y = norm(X) * g, is lowered through Y_hat = norm(X)
        owner, hat, k = t.name.partition("_hat")
        if hat and owner in names and t.name in produced_by and (not k or k.isdigit()):
            names.setdefault(t.name, names[owner] + "_hat" + k)
    ops = tuple(rename(op, names, subs) for op in block.ops)
    for old, new in zip(block.ops, ops):
        for a, b in zip(getattr(old, "aux", ()), getattr(new, "aux", ())):
            names.setdefault(a.tensor, b.tensor)
    for t in block.tensors:
        if t.role == "mask" and t.name.startswith("mask_"):
            owner = t.name[len("mask_"):]
            if owner in names:
                names.setdefault(t.name, "mask_" + names[owner])
    ops = tuple(rename(op, names, subs) for op in block.ops)
    tensors = tuple(rename(t, names, subs) for t in block.tensors)
    _distinct(block.tensors, tensors, bound)
    # Buffers are bound like inputs: one table that every copy reads, not one per copy.
    inputs = tuple(t.name for t in tensors if t.role in ("input", "index", "buffer"))
    produced = tuple(t.name for t in tensors if t.name not in inputs)
    outputs = tuple(names.get(n, n) for n in block.outputs)
    nested = tuple(
        Block(b.name, b.title, b.source, b.repeat.subs(subs),
              tuple(names.get(n, n) for n in b.ops), tuple(names.get(n, n) for n in b.tensors),
              tuple(names.get(n, n) for n in b.inputs), tuple(names.get(n, n) for n in b.outputs),
              b.span, tuple(names.get(n, n) for n in b.shared))
        for b in block.blocks)
    shared = tuple((names.get(n, n), span) for n, span in _shared(fields, block))
    record = Block(block.name, block.title, block.source, repeat, tuple(op.output for op in ops),
                   produced, inputs, outputs, node.span, tuple(n for n, _ in shared))
    if repeat != 1:
        _check_chain(record, {t.name: t for t in tensors}, fields["repeat"][1].span)
    layer = Layer(block.name, block.title, block.dims, tensors, ops, block.source, block.precision,
                  (), selective=tuple(names.get(n, n) for n in block.selective),
                  definitions=tuple((n, e.subs(subs)) for n, e in block.definitions),
                  components=tuple(Component(c.name, tuple(names.get(n, n) for n in c.ops), c.span)
                                   for c in block.components),
                  roles=_mapped_roles(block.roles, subs))
    return Included(layer, record, nested, inputs, outputs, new_dims, node.span, shared,
                    "repeat" in fields)


def _distinct(old: tuple[Tensor, ...], new: tuple[Tensor, ...],
              bound: Mapping[str, Span | None]) -> None:
    """The block's tensors keep distinct names once renamed: the renaming is
    one simultaneous substitution, so an identity (``tensors: {X: X}``) and a
    swap (``{X: Y, Y: X}``) are renamings like any other, while two tensors
    given one name (``{X: Z, Y: Z}``, or ``{X: Y}`` with the block's ``Y``
    kept) are refused at the binding."""
    first: dict[str, str] = {}
    for a, b in zip(old, new):
        if b.name not in first:
            first[b.name] = a.name
            continue
        pair = (first[b.name], a.name)
        at = next((bound[n] for n in reversed(pair) if n in bound), None)
        raise SymflopsError(f"the include gives {b.name!r} to two of the block's tensors, "
                            f"{pair[0]} and {pair[1]}", at, "map each block tensor to its own name")


def _mapped_roles(roles: tuple[tuple[str, tuple[str, ...]], ...],
                  subs: Mapping[sympy.Symbol, sympy.Expr]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """A block's ``roles:`` in the includer's dims: a dim mapped to another dim
    takes its name; one mapped to an expression (``F: 4*D``) is no dim of the
    includer, and its role is dropped."""
    by_name = {str(k): v for k, v in subs.items()}
    out = []
    for role, dims in roles:
        mapped = []
        for d in dims:
            value = by_name.get(d)
            if value is None:
                mapped.append(d)
            elif isinstance(value, sympy.Symbol):
                mapped.append(value.name)
        if mapped:
            out.append((role, tuple(dict.fromkeys(mapped))))
    return tuple(out)


SHARED_HINT = ("list the block's parameters that all copies use, e.g. 'shared: [W_q, W_k]' "
               "(the names as the block declares them)")


def _shared(fields: Mapping[str, tuple[Span | None, Any]], block: Layer
            ) -> tuple[tuple[str, Span | None], ...]:
    """The block's names in ``shared:`` with their places: parameters of the
    block, each once.  (Whether each is tied across copies or to the
    includer's tensor is decided by :func:`bind`.)"""
    if "shared" not in fields:
        return ()
    value = fields["shared"][1]
    if not isinstance(value.value, list):
        raise SymflopsError("'shared' of an include must be a list of the block's parameters",
                            value.span, SHARED_HINT)
    tensors = block.tensor_map
    out: dict[str, Span | None] = {}
    for item in value.value:
        name = _text(item, "a name in 'shared'")
        if name not in tensors:
            raise SymflopsError(f"the included block has no tensor {name!r} to share", item.span,
                                closest(name, [t.name for t in block.params]) or SHARED_HINT)
        t = tensors[name]
        if not t.is_param:
            role = {"activation": "an op's output"}.get(t.role, f"a tensor of role {t.role!r}")
            raise SymflopsError(
                f"{name!r} is {role} of the block, not a parameter: only parameters are "
                "shared across copies (each copy computes its own activations and takes the "
                "previous copy's output as input)", item.span,
                "list only 'role: param' (or 'frozen') tensors of the block in 'shared:'")
        if name in out:
            raise SymflopsError(f"{name!r} is listed twice in 'shared'", item.span,
                                "list each shared parameter once")
        out[name] = item.span
    return tuple(out.items())


def _same_shape(a: Tensor, b: Tensor) -> bool:
    return len(a.shape) == len(b.shape) and all(sympy.simplify(x - y) == 0
                                                for x, y in zip(a.shape, b.shape))


def _check_chain(block: Block, tensors: Mapping[str, Tensor], span: Span | None) -> None:
    """A repeated block feeds its output to its next copy's input: one output,
    and one data input of the same shape (index inputs are shared)."""
    data = [n for n in block.inputs if tensors[n].role == "input"]
    if len(block.outputs) != 1 or len(data) != 1:
        raise SymflopsError(
            f"a repeated block needs one output and one data input (this one has outputs "
            f"{', '.join(block.outputs) or 'none'} and inputs {', '.join(data) or 'none'})", span,
            "each copy's output feeds the next copy's input; include the block without "
            "'repeat', or make it map one tensor to one of the same shape")
    out, inp = tensors[block.outputs[0]], tensors[data[0]]
    if not _same_shape(out, inp):
        raise SymflopsError(
            f"a repeated block's output {out.name} {list(out.shape)} does not fit its input "
            f"{inp.name} {list(inp.shape)}", span,
            "each copy's output feeds the next copy's input; give them the same shape")


def _tie(t: Tensor, known: Mapping[str, Tensor], span: Span | None, repeated: bool) -> bool:
    """Whether the shared block parameter ``t`` is the includer's tensor of
    its name (tied encoder-decoder embeddings); refuses a mismatch, and a
    ``shared:`` name that ties nothing (no includer tensor, no ``repeat``)."""
    have = known.get(t.name)
    if have is None:
        if not repeated:
            raise SymflopsError(
                f"'shared' ties {t.name!r} across the copies of a repeated block, but this "
                "include has no 'repeat' (and the includer has no tensor of that name to tie "
                "it to)", span,
                "add 'repeat: L' (the copies that share it), or declare the tensor here to "
                "tie the block's to it, or drop it from 'shared:'")
        return False
    if not have.is_param:
        raise SymflopsError(
            f"'shared' ties the block's parameter {t.name!r} to {t.name!r} here, which is not "
            "a parameter", span,
            "declare it here with 'role: param', or rename one of the two")
    if not _same_shape(have, t):
        raise SymflopsError(
            f"'shared' ties the block's {t.name} {list(t.shape)} to {t.name} here, of shape "
            f"{list(have.shape)}", span,
            "a tied weight has one shape: map the block's dims ('dims: {D: H}') or fix a shape")
    return True


def bind(included: Included, known: dict[str, Tensor]) -> tuple[Tensor, ...]:
    """Check the block against the includer's tensors so far and return the
    tensors it adds.  Bound inputs must match in shape; nothing else may
    clash with a name the includer already has."""
    new = []
    shared = dict(included.shared)
    for t in included.layer.tensors:
        if t.name in shared:
            if _tie(t, known, shared[t.name], included.repeated):
                continue  # the includer's own tensor: the block reads it
            new.append(t)
            continue
        if t.name in included.reads:
            if t.name not in known:
                new.append(t)
                continue
            have = known[t.name]
            if not _same_shape(have, t):
                raise SymflopsError(
                    f"the block's input {t.name} has shape {list(t.shape)} but {t.name} here has "
                    f"shape {list(have.shape)}", included.span,
                    "bind the input to a tensor of its shape, or map the block's dims "
                    "('dims: {S: T}')")
            continue
        if t.name in known:
            tie = (f"; to use one {t.name} in every copy of a repeated block, list it in "
                   f"'shared: [{t.name}]' instead" if t.is_param else "")
            raise SymflopsError(
                f"the included block's tensor {t.name!r} clashes with {t.name!r} here",
                included.span, f"rename it in the include, e.g. 'tensors: {{{t.name}: "
                               f"{t.name}_2}}' (a renamed op output renames its rstd_/P_/mask_ "
                               "companions too"
                               + ("; a renamed parameter is a second tensor, its own weights, "
                                  "untied from the one here" if t.is_param else "")
                               + ")" + tie)
        new.append(t)
    return tuple(new)
