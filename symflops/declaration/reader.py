"""Read a layer declaration (YAML or Python data) into the IR, with positions.

The declaration format is a public contract (documented in docs/declarations.md)::

    name: ffn                      # optional; defaults to the file's stem
    title: Transformer feed-forward block
    dims:                          # dimension name -> what it means
      B: tokens in the batch
    tensors:                       # inputs and parameters; activations are inferred
      X: {shape: [B, D], role: input}          # role: input | param | frozen | index | buffer
      W_in: {shape: [D, F], role: param}       # requires_grad: true|false (optional)
    ops:                           # one einsum statement per line
      - H[b,f] = X[b,d] W_in[d,f]

A where-clause restricts an op's summation domain (``A[s,t] = Q[s,e] K[t,e]
where t <= s``): it becomes an indicator factor ``[t <= s]`` in every term that
carries both letters.  A lookup ``E[tok[b], d]`` through an ``index`` tensor
becomes ``[v = tok[b]] E[v,d]`` with a fresh letter ``v`` over E's axis.  A
shifted index ``X[b,c,p+k]`` (a convolution) becomes ``[q = p + k] X[b,c,q]``
with a fresh letter ``q`` over X's axis; a letter of the shift that no operand
binds gets the extent of a valid convolution, ``ext(q) - ext(k) + 1``; any
affine index alike (``X[b,c,2*i+u]``: ``[q = 2i + u]``), within the axis and
its ``pad:`` (:mod:`symflops.declaration.padding`).

YAML is read with the safe loader only, composed into nodes first so that every
value keeps its line and column; ops are parsed by :mod:`symflops.lang.statement`
and shapes by the whitelisting :mod:`symflops.lang.expr`.  Nothing is evaluated.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Mapping

import sympy

from ..core.errors import Span, SymflopsError, closest, read_text, shorten
from ..core.ir import FORWARD_ORDERS, RECOMPUTE_POLICIES, Dim, Layer
from ..lang.expr import MAX_DEGREE, MAX_DIGITS, MAX_EXPANDED_TERMS, measure, parse_expression, parse_number
from ..lang.yaml import Node, check_identifier, describe, from_python, mapping, parse_yaml, text_of
from .examples import read_examples
from .components import read_components
from .parallel import read_parallel, read_roles
from .include import Included, read_include, resolve_include
from .statements import lower_ops
from .tensors import _definitions, _dims, _tensors

TOP_KEYS = ("name", "title", "description", "dims", "tensors", "ops", "precision", "tokens",
            "sequences", "recompute", "forward_order", "sizes", "components", "examples",
            "roles", "parallel",
            "blocks")
RECOMPUTE_KEYS = ("policy", "selective")


# --------------------------------------------------------------------- YAML --


# ----------------------------------------------------------------- checking --


def _expression_key(top: Mapping[str, tuple[Span | None, Node]], key: str,
                    symbols: dict[str, sympy.Symbol]) -> sympy.Expr | None:
    if key not in top:
        return None
    node = top[key][1]
    return parse_expression(text_of(node, f"'{key}'"), symbols, span=node.span)


def _recompute(top: Mapping[str, tuple[Span | None, Node]], ops: tuple[Any, ...],
               inherited: tuple[str, ...]) -> tuple[str, tuple[str, ...]]:
    """``recompute: {policy: none|full|selective, selective: [A, P]}``."""
    policy, selective = "none", list(inherited)
    if "recompute" not in top:
        return policy, tuple(selective)
    fields = mapping(top["recompute"][1], "'recompute'",
                      "write e.g. 'recompute: {policy: selective, selective: [A, P, O]}'")
    for key, (kspan, _) in fields.items():
        if key not in RECOMPUTE_KEYS:
            raise SymflopsError(f"unknown key {key!r} in 'recompute'", kspan,
                                closest(key, list(RECOMPUTE_KEYS)))
    outputs = [op.output for op in ops]
    if "selective" in fields:
        node = fields["selective"][1]
        if not isinstance(node.value, list):
            raise SymflopsError("'selective' must be a list of op outputs", node.span,
                                "write e.g. 'selective: [A, P, O]' (the tensors those ops write)")
        selective = []
        for item in node.value:
            name = text_of(item, "an op to recompute")
            if name not in outputs:
                raise SymflopsError(f"no op writes {name!r}", item.span,
                                    "name ops by the tensor they write; " + closest(name, outputs))
            selective.append(name)
    if "policy" in fields:
        node = fields["policy"][1]
        policy = text_of(node, "the recompute policy")
        if policy not in RECOMPUTE_POLICIES:
            raise SymflopsError(f"unknown recompute policy {policy!r}", node.span,
                                f"use one of {', '.join(RECOMPUTE_POLICIES)}")
        if policy == "selective" and not selective:
            raise SymflopsError("the selective policy recomputes nothing", node.span,
                                "list the ops to recompute: 'selective: [A, P, O]'")
    return policy, tuple(dict.fromkeys(selective))


def _forward_order(top: Mapping[str, tuple[Span | None, Node]]) -> str:
    """``forward_order: written | cheapest``."""
    if "forward_order" not in top:
        return "written"
    node = top["forward_order"][1]
    order = text_of(node, "'forward_order'")
    if order not in FORWARD_ORDERS:
        raise SymflopsError(f"unknown forward order {order!r}", node.span,
                            f"use one of {', '.join(FORWARD_ORDERS)}: the order written (the "
                            "default), or the cheapest, as backward rules are counted")
    return order


def _sizes(top: Mapping[str, tuple[Span | None, Node]], dims: tuple[Dim, ...],
           definitions: tuple[tuple[str, sympy.Expr], ...]) -> tuple[tuple[str, int], ...]:
    """``sizes: {S: 4096, E: 128}``: typical values of some free dims, positive integers."""
    if "sizes" not in top:
        return ()
    fields = mapping(top["sizes"][1], "'sizes'",
                      "give typical sizes of dims, e.g. 'sizes: {S: 4096, E: 128}'")
    free = [d.name for d in dims if d.name not in {n for n, _ in definitions}]
    out = []
    for name, (kspan, node) in fields.items():
        if name not in free:
            what = "is defined by a formula" if name in {d.name for d in dims} else "is not a dimension"
            raise SymflopsError(f"'sizes' names {name!r}, which {what}", kspan,
                                f"give sizes of the dims that take values: {', '.join(free)}")
        value = node.value
        if isinstance(value, str):
            value = parse_number(value, span=node.span)
        if isinstance(value, bool) or not (isinstance(value, int) or
                                           (isinstance(value, sympy.Integer))) or int(value) < 1:
            raise SymflopsError(f"the size of {name} must be a positive integer, found "
                                f"{describe(node.value)}", node.span,
                                f"write e.g. '{name}: 4096'")
        out.append((name, int(value)))
    return tuple(out)


def _includes(ops_node: Node, file: str, dims: tuple[Dim, ...], stack: tuple[str, ...],
              inline: Mapping[str, Node]) -> tuple[dict[int, Included], tuple[Dim, ...]]:
    """Read the ``include:`` items first: they may bring dims the includer's
    tensors use.  ``inline``: the file's ``blocks:``, by name."""
    found: dict[int, Included] = {}
    all_dims = {d.name: d for d in dims}
    if not isinstance(ops_node.value, list):
        return found, dims

    def load_block(path: str, span: Span | None) -> Layer:
        if path in inline:
            return _inline_block(path, inline, file, span, stack)
        return _load_block(resolve_include(path, file, span), span, stack)

    for item in ops_node.value:
        if isinstance(item.value, dict):
            inc = read_include(item, file, all_dims, load_block)
            found[id(item)] = inc
            for d in inc.new_dims:
                all_dims.setdefault(d.name, d)
    return found, tuple(all_dims.values())


#: Includes nest at most this deep, a file's inline blocks counted (a shipped
#: model nests 2): deeper, reading would run out of Python's stack.
MAX_INCLUDE_DEPTH = 32


def _check_depth(stack: tuple[str, ...], span: Span | None) -> None:
    """Refuse an include that would nest deeper than :data:`MAX_INCLUDE_DEPTH`,
    naming the chain's start."""
    if len(stack) >= MAX_INCLUDE_DEPTH:
        start = stack[0].rsplit("#", 1)[0]
        raise SymflopsError(f"the includes nest more than {MAX_INCLUDE_DEPTH} levels deep "
                            f"(the chain starts at {shorten(start, 200)}: "
                            f"{' -> '.join(_label(p) for p in stack[:3])} -> ...)", span,
                            f"include blocks at most {MAX_INCLUDE_DEPTH} levels deep; a model "
                            "needs two or three (a model includes its layer)")


def _label(key: str) -> str:
    """A file or inline block of an include chain, for a message."""
    return key.rsplit("#", 1)[-1] if "#" in key else os.path.basename(key)


def _load_block(path: str, span: Span | None, stack: tuple[str, ...]) -> Layer:
    full = os.path.abspath(path)
    _check_depth(stack, span)
    if full in stack:
        chain = " -> ".join(os.path.basename(p) for p in (*stack[stack.index(full):], full))
        raise SymflopsError(f"the declarations include each other: {chain}", span,
                            "a block cannot include itself, directly or through others")
    text = read_text(path, "give a path relative to this file, e.g. 'include: ffn.yaml'", span,
                     lead=f"cannot include {path}")
    stem = os.path.splitext(os.path.basename(path))[0]
    return build_layer(parse_yaml(text, path, TOP_KEYS), path, stem, stack)


def _inline_blocks(top: Mapping[str, tuple[Span | None, Node]]) -> dict[str, Node]:
    """The file's ``blocks:``: a mapping from a block's name to its declaration."""
    if "blocks" not in top:
        return {}
    node = top["blocks"][1]
    if not isinstance(node.value, dict):
        raise SymflopsError("'blocks' must be a mapping from a block's name to its declaration",
                            node.span, "write e.g. 'blocks: {layer: {dims: ..., tensors: ..., "
                                       "ops: [...]}}' and 'include: layer' in the ops")
    out = {}
    for name, (kspan, value) in node.value.items():
        check_identifier(name, kspan, "block")
        out[name] = value
    return out


def _inline_block(name: str, inline: Mapping[str, Node], file: str, span: Span | None,
                  stack: tuple[str, ...]) -> Layer:
    key = f"{os.path.abspath(file)}#{name}"
    _check_depth(stack, span)
    if key in stack:
        chain = " -> ".join(p.rsplit("#", 1)[-1] if "#" in p else os.path.basename(p)
                            for p in (*stack[stack.index(key):], key))
        raise SymflopsError(f"the blocks include each other: {chain}", span,
                            "a block cannot include itself, directly or through others")
    node = inline[name]
    if isinstance(node.value, dict) and "blocks" in node.value:
        raise SymflopsError(f"the block {name!r} declares blocks of its own",
                            node.value["blocks"][0],
                            "declare every block under the file's top-level 'blocks:'")
    return build_layer(node, file, name, (*stack, key), inline)


def build_layer(root: Node, file: str, default_name: str, stack: tuple[str, ...] = (),
                inline: Mapping[str, Node] | None = None) -> Layer:
    if not isinstance(root.value, dict):
        # Not a declaration at all: say what it is, but quote none of it.
        at = root.span or Span(file, 1, 1)
        raise SymflopsError(f"a declaration must be a mapping, found {describe(root.value, False)}",
                            Span(at.file, at.line, at.column),  # no excerpt of its text
                            "start the file with keys such as 'name:', 'dims:', 'tensors:', 'ops:'")
    top = root.value
    for key, (kspan, _) in top.items():
        if key not in TOP_KEYS:
            raise SymflopsError(f"unknown key {key!r}", kspan, closest(key, list(TOP_KEYS)))
    for key in ("dims", "tensors", "ops"):
        if key not in top:
            raise SymflopsError(f"the declaration has no {key!r}", root.span or Span(file, 1, 1),
                                f"add a '{key}:' section (see docs/declarations.md)")
    name = text_of(top["name"][1], "'name'") if "name" in top else default_name
    title = text_of(top["title"][1], "'title'") if "title" in top else name
    declared, formulas = _dims(top["dims"][1])
    if inline is None:  # the file itself: its blocks, and the file on the stack
        inline = _inline_blocks(top)
        stack = (*stack, os.path.abspath(file))
    includes, dims = _includes(top["ops"][1], file, declared, stack, inline)
    symbols = {d.name: d.symbol for d in dims}
    definitions = _definitions(formulas, symbols)
    tensors = _tensors(top["tensors"][1], symbols)
    for t in tensors.values():
        if t.name.startswith("d") and t.name[1:] in tensors:
            raise SymflopsError(f"tensor name {t.name!r} clashes with the gradient of {t.name[1:]!r}",
                                t.span, f"rename {t.name!r}; 'd' + a tensor's name is reserved "
                                "for that tensor's gradient")
    ops, known, blocks, used = lower_ops(top["ops"][1], tensors, symbols, includes, definitions)
    for out in known.values():
        if out.role == "activation" and out.name.startswith("d") and out.name[1:] in known:
            raise SymflopsError(f"tensor name {out.name!r} clashes with the gradient of "
                                f"{out.name[1:]!r}", out.span,
                                f"rename {out.name!r}; 'd' + a tensor's name is reserved")
    precision = text_of(top["precision"][1], "'precision'") if "precision" in top else None
    inherited = tuple(n for inc in used for n in inc.layer.selective)
    policy, selective = _recompute(top, ops, inherited)
    definitions = tuple(dict((*(d for inc in used for d in inc.layer.definitions),
                              *definitions)).items())
    layer = Layer(name, title, dims, tuple(known.values()), ops, file, precision, tuple(blocks),
                  _expression_key(top, "tokens", symbols), _expression_key(top, "sequences", symbols),
                  selective, policy, definitions, _forward_order(top),
                  _sizes(top, dims, definitions))
    _check_expansion(layer)
    carried = tuple(c for inc in used for c in inc.layer.components)
    layer = dataclasses.replace(layer, components=(*carried, *read_components(top, layer, carried)),
                                examples=read_examples(top, layer))
    roles = read_roles(top, layer, tuple(r for inc in used for r in inc.layer.roles))
    return dataclasses.replace(layer, roles=roles, parallel=read_parallel(top, layer))


def _check_expansion(layer: Layer) -> None:
    """Each op's count, the product of the extents of its letters (defined
    dims substituted) times its copies (the repeats of its blocks), has a
    degree of at most MAX_DEGREE, expands to at most MAX_EXPANDED_TERMS terms
    and has coefficients of at most MAX_DIGITS digits: sizes that are each
    small (``(A+B+C)**3``, ``10**999*B``) can multiply into a polynomial SymPy
    takes minutes to expand, or numbers Python cannot print."""
    subs = layer.substitutions
    for op in layer.ops:
        count = sympy.Mul(*op.dims().values(), layer.copies(op.output)).xreplace(subs)
        m = measure(count)
        if m.degree > MAX_DEGREE or m.terms > MAX_EXPANDED_TERMS or m.digits > MAX_DIGITS:
            excess = (f"has a degree above {MAX_DEGREE}" if m.degree > MAX_DEGREE
                      else f"would expand to more than {MAX_EXPANDED_TERMS} terms"
                      if m.terms > MAX_EXPANDED_TERMS
                      else f"has coefficients of more than {MAX_DIGITS} digits")
            raise SymflopsError(f"the count of {op.statement()!r} (the product of its letters' "
                                f"extents and its copies) {excess}", getattr(op, "span", None),
                                "use simpler axis sizes and repeats: products of dims, or sums "
                                "of a few, with small numbers")


def load(path: str | os.PathLike[str]) -> Layer:
    """Read a declaration file into a :class:`~symflops.core.ir.Layer`.  The file
    is read by :func:`~symflops.core.errors.read_text` (regular files, at most
    1 MiB); its includes by :func:`~symflops.declaration.include.resolve_include`."""
    file = os.fspath(path)
    text = read_text(file, "check the path; declarations live in derivations/")
    try:
        return loads(text, file)
    except RecursionError:  # a structure nested (or referring to itself) beyond Python's stack
        raise SymflopsError("the declaration nests too deeply to be read (a YAML alias that "
                            "contains itself, or thousands of nested brackets)", Span(file, 1, 1),
                            "write the structure out flat; a YAML alias may not refer to "
                            "the node that contains it") from None


def loads(text: str, file: str = "<string>") -> Layer:
    """Read a declaration from YAML text; ``file`` names it in error messages."""
    stem = os.path.splitext(os.path.basename(file))[0] or "layer"
    return build_layer(parse_yaml(text, file, TOP_KEYS), file, stem)


def declare(name: str, *, dims: Mapping[str, str], tensors: Mapping[str, Mapping[str, Any]],
            ops: list[str], title: str | None = None, precision: str | None = None,
            components: Mapping[str, list[str]] | None = None,
            examples: Mapping[str, Mapping[str, int]] | None = None) -> Layer:
    """Declare a layer from Python, in the same shape as the YAML format::

        declare("ffn", dims={"B": "tokens", "D": "width", "F": "hidden"},
                tensors={"X": {"shape": ["B", "D"], "role": "input"}, ...},
                ops=["H[b,f] = X[b,d] W_in[d,f]", "Y[b,e] = H[b,f] W_out[f,e]"],
                components={"up": ["H"], "down": ["Y"]},     # optional
                examples={"toy": {"B": 8, "D": 4, "F": 16}})   # optional
    """
    data: dict[str, Any] = {"name": name, "dims": dict(dims), "tensors": dict(tensors),
                            "ops": list(ops)}
    if title is not None:
        data["title"] = title
    if precision is not None:
        data["precision"] = precision
    if examples is not None:
        data["examples"] = {k: dict(v) for k, v in examples.items()}
    if components is not None:
        data["components"] = dict(components)
    return build_layer(from_python(data), "<python>", name)
