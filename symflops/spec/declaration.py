"""Read a layer declaration (YAML or Python data) into the IR, with positions.

The declaration format is a public contract (documented in the README)::

    name: ffn                      # optional; defaults to the file's stem
    title: Transformer feed-forward block
    dims:                          # dimension name -> what it means
      B: tokens in the batch
    tensors:                       # inputs and parameters; activations are inferred
      X: {shape: [B, D], role: input}          # role: input | param | frozen | index
      W_in: {shape: [D, F], role: param}       # requires_grad: true|false (optional)
    ops:                           # one einsum statement per line
      - H[b,f] = X[b,d] W_in[d,f]

A where-clause restricts an op's summation domain (``A[s,t] = Q[s,e] K[t,e]
where t <= s``): it becomes an indicator factor ``[t <= s]`` in every term that
carries both letters.  A lookup ``E[tok[b], d]`` through an ``index`` tensor
becomes ``[v = tok[b]] E[v,d]`` with a fresh letter ``v`` over E's axis.  A
shifted index ``X[b,c,p+k]`` (a convolution) becomes ``[q = p + k] X[b,c,q]``
with a fresh letter ``q`` over X's axis; a letter of the shift that no operand
binds gets the extent of a valid convolution, ``ext(q) - ext(k) + 1``.

YAML is read with the safe loader only, composed into nodes first so that every
value keeps its line and column; ops are parsed by :mod:`symflops.lang.statement`
and shapes by the whitelisting :mod:`symflops.lang.expr`.  Nothing is evaluated.
"""

from __future__ import annotations

import dataclasses
import keyword
import os
import re
from dataclasses import dataclass, replace
from typing import Any, Mapping

import sympy
import yaml

from ..core.errors import Span, SymflopsError, closest, quote, read_text
from ..lang.expr import MAX_DEGREE, MAX_DIGITS, MAX_EXPANDED_TERMS, measure, parse_expression, parse_number
from ..core.ir import FORWARD_ORDERS, LEAF_ROLES, RECOMPUTE_POLICIES, SELECT, SHIFT, Block, Dim, Einsum, Factor, Layer, Tensor, dim_symbol, fresh_letter
from ..ops.einsum.node import Contraction
from ..ops.loss import CrossEntropy
from ..ops.normalize import Normalize
from ..ops.functions import FUNCTIONS
from ..ops.functions import known as known_functions
from .include import Included, bind, read_include
from ..core.sizes import check_size
from ..lang.statement import Call, Constant, Ref, Statement, Term, output_name, parse_statement

TOP_KEYS = ("name", "title", "description", "dims", "tensors", "ops", "precision", "tokens",
            "sequences", "recompute", "forward_order", "sizes")
RECOMPUTE_KEYS = ("policy", "selective")
TENSOR_KEYS = ("shape", "role", "requires_grad", "description")
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


@dataclass(frozen=True)
class Node:
    """A YAML value with the place it was written.  Mappings hold
    ``{key: (key_span, Node)}``; sequences hold lists of Nodes."""

    value: Any
    span: Span | None
    quoted: bool = False


# --------------------------------------------------------------------- YAML --

def _span(mark: Any, file: str, lines: list[str]) -> Span:
    text = lines[mark.line] if mark.line < len(lines) else ""
    return Span(file, mark.line + 1, mark.column + 1, text)


#: Values a declaration may hold once aliases are expanded (a shipped model has
#: a few hundred): a 500-byte "billion laughs" document of nested aliases stands
#: for 10**9 of them.
MAX_YAML_VALUES = 100_000
#: Nesting of mappings and lists (a shipped declaration nests 4 deep).
MAX_YAML_DEPTH = 50


def _convert(node: yaml.Node, file: str, lines: list[str], constructor: Any,
             budget: list[int], depth: int = 0) -> Node:
    """``node`` as located Nodes; ``budget`` holds the values still allowed
    (every alias expansion counts again)."""
    span = _span(node.start_mark, file, lines)
    budget[0] -= 1
    if budget[0] < 0:
        raise SymflopsError(f"the declaration holds more than {MAX_YAML_VALUES:,} values once "
                            "its aliases are expanded", span,
                            "write the declaration out without nested aliases (*name)")
    if depth > MAX_YAML_DEPTH:
        raise SymflopsError(f"the declaration nests mappings and lists more than {MAX_YAML_DEPTH} "
                            "levels deep", span, "a declaration needs a few levels of nesting")
    if isinstance(node, yaml.MappingNode):
        items: dict[str, tuple[Span, Node]] = {}
        for key_node, value_node in node.value:
            key_span = _span(key_node.start_mark, file, lines)
            if not isinstance(key_node, yaml.ScalarNode):
                raise SymflopsError("a key must be a plain name", key_span,
                                    "write keys as names, e.g. 'X: {shape: [B, D]}'")
            key = str(constructor.construct_object(key_node))
            if key in items:
                first = items[key][0]
                raise SymflopsError(f"{key!r} is defined twice (first at line {first.line})",
                                    key_span, f"remove or rename one of the two {key!r} entries")
            items[key] = (key_span, _convert(value_node, file, lines, constructor, budget,
                                             depth + 1))
        return Node(items, span)
    if isinstance(node, yaml.SequenceNode):
        return Node([_convert(n, file, lines, constructor, budget, depth + 1) for n in node.value],
                    span)
    value = constructor.construct_object(node)
    quoted = node.style in ("'", '"')
    if quoted:
        span = span.shifted(1)
    return Node(value, span, quoted)


#: libyaml's safe loader when PyYAML was built with it (ten times faster), else PyYAML's own.
SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def parse_yaml(text: str, file: str) -> Node:
    """Compose YAML safely into located :class:`Node` values."""
    lines = text.splitlines()
    try:
        root = yaml.compose(text, Loader=SAFE_LOADER)
        if root is not None:  # constructing a scalar can fail too (an unknown tag: !B)
            return _convert(root, file, lines, yaml.constructor.SafeConstructor(),
                            [MAX_YAML_VALUES])
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        span = _span(mark, file, lines) if mark else Span(file, 1, 1)
        problem = exc.problem or exc.context or "malformed YAML"
        hint = ("remove the tag; YAML tags are not part of the format"
                if isinstance(exc, yaml.constructor.ConstructorError)
                else "check indentation, colons and brackets near this place")
        raise SymflopsError(f"this is not valid YAML: {problem}", span, hint) from None
    except yaml.YAMLError as exc:
        raise SymflopsError(f"this is not valid YAML: {exc}", Span(file, 1, 1),
                            "check the file's syntax") from None
    raise SymflopsError("the declaration is empty", Span(file, 1, 1),
                        "write a mapping with 'dims', 'tensors' and 'ops'")


def _from_python(value: Any) -> Node:
    if isinstance(value, Mapping):
        return Node({str(k): (None, _from_python(v)) for k, v in value.items()}, None)
    if isinstance(value, (list, tuple)):
        return Node([_from_python(v) for v in value], None)
    return Node(value, None)


# ----------------------------------------------------------------- checking --

def _mapping(node: Node, what: str, hint: str) -> dict[str, tuple[Span | None, Node]]:
    if not isinstance(node.value, dict):
        raise SymflopsError(f"{what} must be a mapping, found {_kind(node.value)}", node.span, hint)
    return node.value


def _kind(value: Any, show: bool = True) -> str:
    """What a YAML value is, for a message: its kind, and (when ``show``) a
    short quote of it, never more than a few dozen characters."""
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):  # its items are located Nodes: name the keys only
        if not value:
            return "an empty mapping"
        keys = ", ".join(quote(k, 30) for k in list(value)[:5])
        return f"a mapping with keys {keys}" + (", ..." if len(value) > 5 else "")
    if value is None:
        return "nothing"
    if isinstance(value, str):
        return f"the text {quote(value)}" if show else "text"
    return f"{type(value).__name__} {quote(value)}" if show else type(value).__name__


def _identifier(name: str, span: Span | None, what: str) -> None:
    if not _IDENT.match(name) or keyword.iskeyword(name):
        raise SymflopsError(f"{what} {name!r} is not a valid name", span,
                            "use letters, digits and underscores, starting with a letter")


def _text(node: Node, what: str) -> str:
    if node.value is None:
        return ""
    if not isinstance(node.value, (str, int, float)) or isinstance(node.value, bool):
        raise SymflopsError(f"{what} must be text, found {_kind(node.value)}", node.span,
                            "write it as a plain string")
    return str(node.value)


DIM_KEYS = ("description", "equals")


def _dims(node: Node) -> tuple[tuple[Dim, ...], dict[str, Node]]:
    """The declared dims, and the ``equals:`` formulas of defined ones (read
    once every dim is known)."""
    items = _mapping(node, "'dims'", "list each dimension as 'NAME: what it means'")
    dims = []
    formulas: dict[str, Node] = {}
    for name, (key_span, value) in items.items():
        _identifier(name, key_span, "dimension")
        if isinstance(value.value, dict):
            fields = value.value
            for key, (kspan, _) in fields.items():
                if key not in DIM_KEYS:
                    raise SymflopsError(f"unknown key {key!r} in dimension {name!r}", kspan,
                                        closest(key, list(DIM_KEYS)))
            description = (_text(fields["description"][1], f"the description of {name!r}")
                           if "description" in fields else "")
            if "equals" in fields:
                formulas[name] = fields["equals"][1]
        else:
            description = _text(value, f"the description of dimension {name!r}")
        dims.append(Dim(name, description, key_span))
    return tuple(dims), formulas


def _definitions(formulas: Mapping[str, Node], symbols: dict[str, sympy.Symbol]
                 ) -> tuple[tuple[str, sympy.Expr], ...]:
    """``C: {equals: c_f * k * T / E}``: the formula in terms of other dims,
    with no dim defined through itself."""
    out = {}
    for name, node in formulas.items():
        text = _text(node, f"the formula of {name!r}")
        out[name] = parse_expression(text, symbols, span=node.span)
        check_size(out[name], f"dimension {name!r} equals", node.span,
                   "a defined dim is a positive whole number for every value of the dims: a "
                   "polynomial in them (4*D, P + K - 1), or one ratio of products of dims "
                   "that divides exactly at the values given (N / G, c*k*B*S/M)", quotient=True)
    for name, node in formulas.items():
        seen, todo = set(), [name]
        while todo:
            n = todo.pop()
            for sym in out.get(n, sympy.Integer(0)).free_symbols:
                if sym.name == name:
                    raise SymflopsError(f"dimension {name!r} is defined through itself", node.span,
                                        "define it from dims that do not depend on it")
                if sym.name not in seen:
                    seen.add(sym.name)
                    todo.append(sym.name)
    return tuple(out.items())


AXIS_HINT = ("an axis has a positive whole size for every value of the dims: write a "
             "polynomial in them such as B, 4*D or P + K - 1 (a ratio such as N / G goes into "
             "a defined dim, 'R: {equals: N / G}'; for S - 1 declare a dim of its own)")


def _shape(node: Node, symbols: dict[str, sympy.Symbol], tensor: str) -> tuple[sympy.Expr, ...]:
    if not isinstance(node.value, list):
        raise SymflopsError(f"the shape of {tensor!r} must be a list, found {_kind(node.value)}",
                            node.span, "write the shape as a list of dims, e.g. [B, D]")
    shape = []
    for axis in node.value:
        if isinstance(axis.value, bool) or not isinstance(axis.value, (str, int)):
            raise SymflopsError(f"an axis of {tensor!r} must be a dimension or an expression "
                                f"of dimensions, found {_kind(axis.value)}", axis.span,
                                "write dims by name, e.g. [B, D] or [B, P + K - 1]")
        if isinstance(axis.value, int):
            extent: sympy.Expr = sympy.Integer(axis.value)
        else:
            extent = parse_expression(axis.value, symbols, span=axis.span)
        check_size(extent, f"an axis of {tensor!r} has size", axis.span, AXIS_HINT)
        shape.append(extent)
    return tuple(shape)


def _tensors(node: Node, symbols: dict[str, sympy.Symbol]) -> dict[str, Tensor]:
    items = _mapping(node, "'tensors'",
                     "list each tensor as 'NAME: {shape: [B, D], role: input}'")
    tensors: dict[str, Tensor] = {}
    for name, (key_span, value) in items.items():
        _identifier(name, key_span, "tensor")
        fields = _mapping(value, f"tensor {name!r}",
                          "write it as {shape: [B, D], role: input|param|frozen}")
        for key, (kspan, _) in fields.items():
            if key not in TENSOR_KEYS:
                raise SymflopsError(f"unknown key {key!r} in tensor {name!r}", kspan,
                                    closest(key, list(TENSOR_KEYS)))
        if "shape" not in fields:
            raise SymflopsError(f"tensor {name!r} has no shape", value.span or key_span,
                                "add 'shape: [DIM, ...]'")
        shape = _shape(fields["shape"][1], symbols, name)
        role_node = fields.get("role", (None, Node("input", value.span)))[1]
        role = _text(role_node, f"the role of {name!r}")
        if role not in LEAF_ROLES:
            raise SymflopsError(f"unknown role {role!r} for tensor {name!r}", role_node.span,
                                f"use one of {', '.join(LEAF_ROLES)} (tensors an op produces "
                                "are not declared; their shapes are inferred)")
        requires_grad = role not in ("frozen", "index")
        if "requires_grad" in fields:
            rg = fields["requires_grad"][1]
            if not isinstance(rg.value, bool):
                raise SymflopsError(f"requires_grad of {name!r} must be true or false", rg.span,
                                    "write requires_grad: false (or true)")
            if rg.value and role == "frozen":
                raise SymflopsError(f"tensor {name!r} is frozen but asks for a gradient", rg.span,
                                    "use role: param for a trained weight")
            if rg.value and role == "index":
                raise SymflopsError(f"tensor {name!r} holds indices, which have no gradient",
                                    rg.span, "remove requires_grad; an index tensor only selects")
            requires_grad = rg.value
        description = _text(fields["description"][1], "a description") if "description" in fields else ""
        tensors[name] = Tensor(name, shape, role, requires_grad, description, key_span)
    return tensors


def _op_span(node: Node) -> Span | None:
    return node.span


def _bind(ref: Ref, tensor: Tensor, span: Span | None, bound: dict[str, tuple[sympy.Expr, str, Span | None]]) -> None:
    """Bind each index letter of ``ref`` to the extent of the axis it indexes."""
    at = (lambda col: span.shifted(col) if span else None)
    if len(ref.indices) != len(tensor.shape):
        shape = "[" + ", ".join(map(str, tensor.shape)) + "]"
        raise SymflopsError(
            f"{ref.name} has {len(tensor.shape)} axes {shape} but is used with "
            f"{len(ref.indices)} indices", at(ref.column),
            f"give {ref.name} one index per axis, e.g. {ref.name}"
            f"[{','.join('ijklmn'[k] for k in range(len(tensor.shape)))}]")
    for letter, column, extent in zip(ref.indices, ref.index_columns, tensor.shape):
        if letter in bound and sympy.simplify(bound[letter][0] - extent) != 0:
            first_extent, first_tensor, _ = bound[letter]
            raise SymflopsError(
                f"index {letter!r} ranges over {first_extent} in {first_tensor} "
                f"but over {extent} in {ref.name}", at(column),
                f"use a different letter for the axis of size {extent}")
        bound.setdefault(letter, (extent, ref.name, at(column)))


def _writes(st: Any, node: Node) -> list[tuple[str, Span | None]]:
    """The tensors an ops item writes, with where to point at them."""
    if isinstance(st, Included):
        return [(name, node.span) for name in st.outputs]
    return [(st.lhs.name, node.span.shifted(st.lhs.column) if node.span else None)]


def _reads(st: Any) -> list[str]:
    return list(st.reads) if isinstance(st, Included) else [ref.name for ref in st.refs]


def _order(parsed: list[tuple[Any, Node]], file_tensors: Mapping[str, Tensor]) -> list[tuple[Any, Node]]:
    """Order ops (and included blocks) so that each comes after the producers
    of its operands."""
    producer: dict[str, int] = {}
    for k, (st, node) in enumerate(parsed):
        for name, where in _writes(st, node):
            if name in file_tensors:
                raise SymflopsError(
                    f"op writes {name!r}, which is declared as {file_tensors[name].role}",
                    where, f"give the op's output a new name; '{name}' is a given tensor")
            if name in producer:
                first = parsed[producer[name]][1].span
                line = f" (first at line {first.line})" if first else ""
                raise SymflopsError(f"tensor {name!r} is defined twice{line}", where,
                                    "each tensor is written by one op; rename one output")
            producer[name] = k
    order: list[int] = []
    state: dict[int, str] = {}

    def visit(k: int, chain: list[int]) -> None:
        if state.get(k) == "done":
            return
        st, node = parsed[k]
        if state.get(k) == "active":
            names = " -> ".join(_writes(parsed[j][0], parsed[j][1])[0][0]
                                for j in chain[chain.index(k):] + [k])
            raise SymflopsError(f"the ops form a cycle: {names}", node.span,
                                "a tensor cannot depend on itself; rename one output")
        state[k] = "active"
        for name in _reads(st):
            if name in producer:
                visit(producer[name], chain + [k])
        state[k] = "done"
        order.append(k)

    for k in range(len(parsed)):
        visit(k, [])
    return [parsed[k] for k in order]


def _coefficient(term: Term, dims: dict[str, sympy.Symbol], span: Span | None) -> sympy.Expr:
    """The term's constant factor: its sign times every constant, read by the
    whitelisting expression parser."""
    value: sympy.Expr = sympy.Integer(-1 if term.negative else 1)
    for f in term.factors:
        if isinstance(f, Constant):
            c = parse_expression(f.text, dims, span=span.shifted(f.column) if span else None)
            value = value / c if f.divide else value * c
    return value


DROPOUT_DEFAULT = sympy.Rational(1, 10)


_NORMALIZE = re.compile(r"(softmax|layernorm|rmsnorm)_([A-Za-z_][A-Za-z0-9_]*)\Z")


def _normalize(call: Call, out: Factor, bound: dict[str, tuple[sympy.Expr, str, Span | None]],
               span: Span | None, text: str) -> Normalize:
    """``softmax_t(A[s,t])`` and the like, checked: the index is one of the
    tensor's letters, and no second argument."""
    at = (lambda col: span.shifted(col) if span else None)
    m = _NORMALIZE.match(call.name)
    assert m is not None
    kind, index = m.group(1), m.group(2)
    if call.argument is not None:
        raise SymflopsError(f"{call.name} takes one tensor", at(call.argument.column),
                            f"write {call.name}({call.ref.name}[...])")
    if index not in call.ref.indices:
        raise SymflopsError(
            f"{kind} over {index!r}, an index {call.ref.name} does not have", at(call.column),
            f"normalise over one of {call.ref.name}'s indices: "
            + ", ".join(f"{kind}_{i}" for i in dict.fromkeys(call.ref.indices)))
    if len(set(call.ref.indices)) != len(call.ref.indices):
        raise SymflopsError(f"{call.name} of a diagonal is not supported", at(call.column),
                            "give each axis its own letter")
    letters = tuple(dict.fromkeys(call.ref.indices))
    return Normalize(kind, out, Factor(call.ref.name, call.ref.indices, at(call.ref.column)), index,
                     tuple((i, bound[i][0]) for i in letters), text, span)


_LOSS = re.compile(r"cross_entropy(_mean)?_([A-Za-z_][A-Za-z0-9_]*)\Z")


def _loss(call: Call, out: Factor, bound: dict[str, tuple[sympy.Expr, str, Span | None]],
          known: dict[str, Tensor], span: Span | None, text: str) -> CrossEntropy:
    """``cross_entropy_v(Z[b,v], y[b])``, checked: a scalar output, ``v`` one of
    the logits' letters, integer targets indexed by the logits' other letters."""
    at = (lambda col: span.shifted(col) if span else None)
    m = _LOSS.match(call.name)
    assert m is not None
    mean, index = bool(m.group(1)), m.group(2)
    logits = call.ref
    if out.indices:
        raise SymflopsError(f"the loss {out.tensor} must be a scalar, written {out.tensor}[]",
                            out.span, f"write '{out.tensor}[] = {call.name}(...)'")
    if index not in logits.indices:
        raise SymflopsError(f"cross entropy over {index!r}, an index {logits.name} does not have",
                            at(call.column), "take it over the class index, one of "
                            + ", ".join(logits.indices))
    target = call.argument
    rows = tuple(i for i in logits.indices if i != index)
    if not isinstance(target, Ref):
        raise SymflopsError(f"{call.name} needs the target classes", at(call.column),
                            f"write {call.name}({logits.name}[...], y[{','.join(rows)}]) with y "
                            "declared as role: index")
    if target.name not in known:
        raise SymflopsError(f"unknown tensor {target.name!r}", at(target.column),
                            f"declare the targets under 'tensors:' as integer class labels, "
                            f"e.g. {target.name}: {{shape: [...], role: index}}; "
                            f"{closest(target.name, sorted(known))}")
    if known[target.name].role != "index":
        raise SymflopsError(f"the targets {target.name!r} must be integer class labels",
                            at(target.column), f"declare {target.name} with role: index")
    if sorted(target.indices) != sorted(rows):
        raise SymflopsError(f"the targets are indexed by [{','.join(target.indices)}] but the "
                            f"logits' rows by [{','.join(rows)}]", at(target.column),
                            f"index the targets by the logits' letters other than {index!r}")
    return CrossEntropy(out, Factor(logits.name, logits.indices, at(logits.column)),
                        Factor(target.name, target.indices, at(target.column)), index, mean,
                        tuple((i, bound[i][0]) for i in logits.indices), text, span)


def _lower_term(term: Term, out: str, dims: dict[str, sympy.Symbol], span: Span | None,
                known: dict[str, Tensor], new_leaves: dict[str, Tensor],
                bound: dict[str, tuple[sympy.Expr, str, Span | None]],
                pre_ops: list[Normalize], text: str) -> tuple[sympy.Expr, list[Factor]]:
    """A parsed term as (coefficient, factors).  Pointwise functions become a
    factor's ``fn``; ``dropout(A[..], p)`` becomes ``A[..] mask[..] / (1 - p)``
    with a keep-mask tensor the layer gains; ``softmax_t(A[..])`` and the norms
    become an op of their own (in ``pre_ops``) whose result is the factor."""
    at = (lambda col: span.shifted(col) if span else None)
    coefficient = _coefficient(term, dims, span)
    factors: list[Factor] = []
    for f in term.factors:
        if isinstance(f, Ref):
            factors += _lookups(f, at) + [Factor(f.name, f.indices, at(f.column))]
        elif isinstance(f, Call):
            ref = Factor(f.ref.name, f.ref.indices, at(f.ref.column))
            if ((f.ref.gathers or f.ref.shifts)
                    and (f.name == "dropout" or _NORMALIZE.match(f.name))):
                raise SymflopsError(f"a lookup or shift inside {f.name}(...)", at(f.column),
                                    "write the lookup as an op of its own, e.g. "
                                    "'X[b,d] = E[tok[b], d]', and apply the call to X")
            if _NORMALIZE.match(f.name):
                # The normalised tensor before gain and bias, printed with a hat.
                name = f"{out}_hat"
                k = 2
                while name in known or name in new_leaves:
                    name, k = f"{out}_hat{k}", k + 1
                temp = Factor(name, f.ref.indices, at(f.column))
                op = _normalize(f, temp, bound, span, text)
                pre_ops.append(op)
                shape = known[f.ref.name].shape
                new_leaves[name] = Tensor(name, shape, "activation", False, "", at(f.column))
                factors.append(temp)
                continue
            factors += _lookups(f.ref, at)
            if f.name in FUNCTIONS:
                if f.argument is not None:
                    raise SymflopsError(f"{f.name} takes one tensor", at(f.argument.column),
                                        f"write {f.name}({f.ref.name}[...])")
                factors.append(Factor(ref.tensor, ref.indices, ref.span, f.name))
            elif f.name == "dropout":
                if isinstance(f.argument, Ref):
                    raise SymflopsError("dropout's second argument is the drop probability",
                                        at(f.argument.column), "e.g. dropout(A[b,d], 0.1)")
                p = DROPOUT_DEFAULT
                if f.argument is not None:
                    p = parse_expression(f.argument.text, dims, span=at(f.argument.column))
                if not (p.is_number and 0 <= p < 1):
                    raise SymflopsError(f"dropout probability must be in [0, 1), got {p}",
                                        at(f.argument.column if f.argument else f.column),
                                        "give the drop probability, e.g. dropout(A[b,d], 0.1)")
                mask = f"mask_{out}" + (f"_{len(new_leaves)}" if f"mask_{out}" in new_leaves else "")
                if mask in known:
                    raise SymflopsError(f"the dropout mask name {mask!r} is taken",
                                        at(f.column), f"rename the tensor {mask!r}")
                if ref.tensor not in known:
                    raise SymflopsError(f"unknown tensor {ref.tensor!r}", ref.span,
                                        f"declare it under 'tensors:' or produce it with an op; "
                                        f"{closest(ref.tensor, sorted(known))}")
                new_leaves[mask] = Tensor(mask, known[ref.tensor].shape, "mask", False,
                                          f"dropout keep-mask of {out} (drop probability {p})",
                                          at(f.column))
                factors += [ref, Factor(mask, ref.indices, at(f.column))]
                coefficient = coefficient / (1 - p)
            else:
                raise SymflopsError(f"unknown function {f.name!r}", at(f.column),
                                    f"the pointwise functions are {known_functions()}; also "
                                    "dropout(A[..], p), and softmax_i, layernorm_i, rmsnorm_i "
                                    "over an index i")
    return coefficient, factors


def _lookups(ref: Ref, at: Any) -> list[Factor]:
    """The selections ``[v = tok[b]]`` of a lookup ``E[tok[b], d]`` (whose
    looked-up position already holds its fresh letter ``v``), and the shifts
    ``[q = p + k]`` of ``X[b,c,p+k]``."""
    return ([Factor(inner.name, (ref.indices[k], *inner.indices), at(inner.column), SELECT)
             for k, inner in ref.gathers]
            + [Factor("", (ref.indices[k], a, b), at(col), SHIFT)
               for k, a, col, b, _ in ref.shifts])


_LETTERS = "vwuxyzpqrjklmnoghiabcdef"
_SHIFT_LETTERS = "qrsjlmnuvwxyzghiaefpkbcdot"


def _solve_shifts(st: Statement, bound: dict[str, tuple[sympy.Expr, str, Span | None]],
                  at: Any) -> None:
    """Bind a letter of a shift ``p+k`` that no operand binds (``p``, on the
    output only): a valid convolution, ``ext(p) = ext(q) - ext(k) + 1``."""
    for ref in st.refs:
        for k, a, acol, b, bcol in ref.shifts:
            extent = bound[ref.indices[k]][0]
            if a in bound and b in bound:
                # Every (p, k) must land on the axis: the cost model counts them all.
                spare = sympy.simplify(extent - bound[a][0] - bound[b][0] + 1)
                if spare.is_nonnegative is not True:
                    raise SymflopsError(
                        f"the shift {a}+{b} runs past the axis of {ref.name}: it reaches "
                        f"{bound[a][0]} + {bound[b][0]} - 1 positions, the axis has {extent}",
                        at(acol), f"declare the axis of {ref.name} as {bound[a][0]} + "
                        f"{bound[b][0]} - 1 (valid convolution), or leave {a!r} on the output "
                        "only so that its extent follows from the axis")
                continue
            if a not in bound and b not in bound:
                raise SymflopsError(
                    f"the shift {a}+{b} leaves an index unbound", at(acol),
                    f"index {b!r} (or {a!r}) with another operand, e.g. a kernel "
                    f"W[o,c,{b}], so that the other letter's extent follows from the axis "
                    f"of {ref.name}: ext({a}) = ext(axis) - ext({b}) + 1")
            known_letter, free, col = (a, b, bcol) if a in bound else (b, a, acol)
            solved = sympy.simplify(extent - bound[known_letter][0] + 1)
            check_size(solved, f"the letter {free!r} of the shift {a}+{b} ranges over", at(col),
                       f"the axis of {ref.name} must hold at least {bound[known_letter][0]} "
                       f"positions for every value of the dims: declare it as "
                       f"P + {bound[known_letter][0]} - 1 (a valid convolution) with a dim P "
                       "for the positions")
            bound[free] = (solved, ref.name, at(col))


def _resolve_lookups(st: Statement, extent_of: Any, at: Any) -> Statement:
    """Give every looked-up position (``E[tok[b], d]``) a fresh letter, the
    lower-case name of the axis's dim when that is free (``v`` for ``V``)."""
    if st.lhs.gathers:
        raise SymflopsError(f"a lookup on the output {st.lhs.name}", at(st.lhs.gathers[0][1].column),
                            "write the output with plain letters; lookups select from operands")
    if st.lhs.shifts:
        _, a, col, b, _ = st.lhs.shifts[0]
        raise SymflopsError(f"a shifted index {a}+{b} on the output {st.lhs.name}", at(col),
                            "write the output with plain letters; shifts read operands, e.g. "
                            "Y[b,o,p] = X[b,c,p+k] W[o,c,k]")
    used = {i for r in (st.lhs, *st.refs) for i in r.indices}
    used |= {c.left for c in st.where} | {c.right for c in st.where}
    used |= {x for r in st.refs for _, a, _, b, _ in r.shifts for x in (a, b)}

    def fresh(ref: Ref, position: int, letters: str = _LETTERS) -> str:
        extent = extent_of(ref.name, position)
        named = str(extent).lower() if isinstance(extent, sympy.Symbol) else ""
        return fresh_letter(used, [named] if len(named) == 1 else [], letters, prefix="v")

    def resolve(ref: Ref) -> Ref:
        if not ref.gathers and not ref.shifts:
            return ref
        indices = list(ref.indices)
        for k, _ in ref.gathers:
            indices[k] = fresh(ref, k)
        for k, a, col, b, _ in ref.shifts:
            if a == b:
                raise SymflopsError(f"the shift {a}+{b} adds a letter to itself", at(col),
                                    "a shifted index adds two different letters, e.g. p+k")
            indices[k] = fresh(ref, k, _SHIFT_LETTERS)
        return replace(ref, indices=tuple(indices))

    terms = []
    for term in st.terms:
        factors = [resolve(f) if isinstance(f, Ref)
                   else replace(f, ref=resolve(f.ref)) if isinstance(f, Call) else f
                   for f in term.factors]
        terms.append(replace(term, factors=tuple(factors)))
    return replace(st, terms=tuple(terms))


def _check_lookups(st: Statement, known: Mapping[str, Tensor], at: Any,
                   ranges: dict[str, tuple[sympy.Expr, str]],
                   bound: Mapping[str, tuple[sympy.Expr, str, Span | None]]) -> None:
    """Index tensors only select, through tensors declared with ``role: index``;
    one index tensor selects along axes of one size (its values' range)."""
    inner = {id(r) for ref in st.refs for _, r in ref.gathers}
    for ref in st.refs:
        tensor = known[ref.name]
        if id(ref) in inner and tensor.role != "index":
            raise SymflopsError(
                f"{ref.name} is used as an index tensor but is declared as {tensor.role}",
                at(ref.column), f"declare it with integer values as "
                f"'{ref.name}: {{shape: [...], role: index}}', or look up through another tensor")
        if id(ref) not in inner and tensor.role == "index":
            raise SymflopsError(
                f"{ref.name} holds indices and is used as a factor", at(ref.column),
                f"index tensors only select, e.g. E[{ref.name}[{','.join(ref.indices) or 'b'}], d]")
        for k, r in ref.gathers:
            extent = bound[ref.indices[k]][0]
            if r.name in ranges and sympy.simplify(ranges[r.name][0] - extent) != 0:
                raise SymflopsError(
                    f"{r.name} selects along an axis of size {extent} in {ref.name} but of size "
                    f"{ranges[r.name][0]} in {ranges[r.name][1]}", at(r.column),
                    "an index tensor's values range over one axis size; use one index tensor "
                    "per table size")
            ranges.setdefault(r.name, (extent, ref.name))


def _check_where(st: Statement, bound: Mapping[str, Any], dims: Mapping[str, Any],
                 known: Mapping[str, Tensor], at: Any) -> None:
    """Every letter of the where-clause is an index of the op; no letter is
    compared with itself, and the conditions do not go round in a cycle."""
    letters = sorted(i for i in bound if i)
    for c in st.where:
        for letter, col in ((c.left, c.column), (c.right, c.right_column)):
            if letter in bound:
                continue
            what = ("a dimension" if letter in dims else "a tensor" if letter in known
                    else "not an index letter of this op")
            raise SymflopsError(
                f"{letter!r} in the where-clause is {what}", at(col),
                f"compare index letters of this op ({', '.join(letters)}; letters are local "
                "to one op), e.g. 'where t <= s'")
        if c.left == c.right:
            raise SymflopsError(f"the condition compares {c.left!r} with itself", at(c.column),
                                "compare two different letters, e.g. 'where t <= s'")
    below: dict[str, set[str]] = {}
    for c in st.where:
        low, high = (c.left, c.right) if c.op in ("<=", "<") else (c.right, c.left)
        below.setdefault(high, set()).add(low)
    state: dict[str, str] = {}

    def visit(letter: str) -> None:
        if state.get(letter) == "done":
            return
        if state.get(letter) == "active":
            raise SymflopsError("the where-clause's conditions form a cycle",
                                at(st.where[0].column),
                                "each letter must be bounded by letters it does not bound; "
                                "for equal letters use one letter")
        state[letter] = "active"
        for low in below.get(letter, ()):
            visit(low)
        state[letter] = "done"

    for letter in list(below):
        visit(letter)


def _ops(node: Node, tensors: dict[str, Tensor], dims: dict[str, sympy.Symbol],
         includes: Mapping[int, Included] | None = None
         ) -> tuple[tuple[Contraction, ...], dict[str, Tensor], list[Block], list[Included]]:
    if not isinstance(node.value, list) or not node.value:
        raise SymflopsError("'ops' must be a non-empty list of op statements", node.span,
                            "write each op on its own line, e.g. '- H[b,f] = X[b,d] W[d,f]'")
    includes = includes or {}
    for item in node.value:
        if not isinstance(item.value, str) and id(item) not in includes:
            raise SymflopsError(f"an op must be a statement, found {_kind(item.value)}", item.span,
                                "write the op as text, e.g. '- H[b,f] = X[b,d] W[d,f]'; "
                                "quote it if it contains ': ' or '#'")
    names = (frozenset(tensors) | {n for inc in includes.values() for n in inc.outputs}
             | {n for i in node.value if isinstance(i.value, str) for n in [output_name(i.value)] if n})
    parsed = [(includes[id(item)] if id(item) in includes
               else parse_statement(item.value, item.span, names), item) for item in node.value]
    given = dict(tensors)
    ordered = _order(parsed, given)
    known = dict(given)
    ops: list[Any] = []
    blocks: list[Block] = []
    used: list[Included] = []
    ranges: dict[str, tuple[sympy.Expr, str]] = {}
    for st, item in ordered:
        if isinstance(st, Included):
            for t in bind(st, known):
                known[t.name] = t
            ops.extend(st.layer.ops)
            blocks.extend((st.block, *st.nested))
            used.append(st)
            continue
        at = (lambda col, s=item.span: s.shifted(col) if s else None)
        bound: dict[str, tuple[sympy.Expr, str, Span | None]] = {}
        for ref in st.refs:
            if ref.name not in known:
                raise SymflopsError(f"unknown tensor {ref.name!r}", at(ref.column),
                                    f"declare it under 'tensors:' or produce it with an op; "
                                    f"{closest(ref.name, sorted(known))}")
        st = _resolve_lookups(st, lambda name, k: (known[name].shape[k] if k < len(known[name].shape)
                                                   else None), at)
        for ref in st.refs:
            _bind(ref, known[ref.name], item.span, bound)
        _solve_shifts(st, bound, at)
        _check_lookups(st, known, at, ranges, bound)
        seen: set[str] = set()
        for letter, col in zip(st.lhs.indices, st.lhs.index_columns):
            if letter not in bound:
                raise SymflopsError(
                    f"output index {letter!r} of {st.lhs.name} is on no operand", at(col),
                    f"every output index must index some operand; the operands carry "
                    f"{', '.join(sorted(bound)) or 'no indices'}")
            if letter in seen:
                raise SymflopsError(f"index {letter!r} appears twice on the output {st.lhs.name}",
                                    at(col), "an output index names one axis; use a new letter")
            seen.add(letter)
        _check_where(st, bound, dims, known, at)
        out_factor = Factor(st.lhs.name, st.lhs.indices, at(st.lhs.column))
        shape = tuple(bound[i][0] for i in st.lhs.indices)
        out = Tensor(st.lhs.name, shape, "activation", False, "", at(st.lhs.column))
        lone = st.terms[0].factors[0] if len(st.terms) == 1 and len(st.terms[0].factors) == 1 else None
        if isinstance(lone, Call) and _LOSS.match(lone.name):
            if len(st.terms) != 1 or st.terms[0].negative or st.where:
                raise SymflopsError(f"{lone.name}(...) must be the whole right side",
                                    at(lone.column), f"write e.g. 'L[] = {lone.name}(Z[b,v], y[b])'")
            op = _loss(lone, out_factor, bound, known, item.span, st.text)
            known[out.name] = out
            known.update(_aux_tensors(op, known))
            ops.append(op)
            continue
        if (isinstance(lone, Call) and _NORMALIZE.match(lone.name) and not st.terms[0].negative
                and lone.ref.indices == st.lhs.indices):
            op = _normalize(lone, out_factor, bound, item.span, st.text)
            if st.where:
                if op.kind != "softmax":
                    raise SymflopsError(f"a where-clause on {lone.name}(...) is not supported",
                                        at(st.where[0].column),
                                        "only softmax takes a domain (a causal mask)")
                if any(c.left not in lone.ref.indices or c.right not in lone.ref.indices
                       for c in st.where):
                    raise SymflopsError("the where-clause names a letter the softmax's input "
                                        "does not have", at(st.where[0].column),
                                        f"use letters of {lone.ref.name}[{','.join(lone.ref.indices)}]")
                op = dataclasses.replace(op, conditions=tuple(
                    Factor("", (c.left, c.right), at(c.column), c.op) for c in st.where))
            known[out.name] = out
            known.update(_aux_tensors(op, known))
            ops.append(op)
            continue
        new_leaves: dict[str, Tensor] = {}
        pre_ops: list[Normalize] = []
        terms = []
        for term in st.terms:
            coefficient, factors = _lower_term(term, st.lhs.name, dims, item.span, known,
                                               new_leaves, bound, pre_ops, st.text)
            # A condition restricts every term that carries both of its letters.
            carried = {i for f in (out_factor, *factors) for i in f.indices}
            factors += [Factor("", (c.left, c.right), at(c.column), c.op) for c in st.where
                        if c.left in carried and c.right in carried]
            terms.append(Einsum(out_factor, tuple(factors), coefficient))
        for c in st.where:
            if not any(f.indices == (c.left, c.right) and f.fn == c.op
                       for t in terms for f in t.operands):
                raise SymflopsError(f"no term of the op carries both {c.left!r} and {c.right!r}",
                                    at(c.column), "a condition restricts terms that sum or "
                                    "write both letters; remove it or put it on another op")
        known.update(new_leaves)
        for op in pre_ops:
            known.update(_aux_tensors(op, known))
        known[out.name] = out
        letters = dict.fromkeys(i for t in terms for i in t.indices)
        index_dims = tuple((letter, bound[letter][0]) for letter in letters)
        ops.extend(pre_ops)
        ops.append(Contraction(tuple(terms), index_dims, st.text, item.span))
    return tuple(ops), known, blocks, used


def _aux_tensors(op: Normalize | CrossEntropy, known: dict[str, Tensor]) -> dict[str, Tensor]:
    """The tensors an op saves besides its output (a norm's per-row ``rstd_N``,
    a loss's probabilities ``P_L``), as activations of the layer."""
    extents = op.dims()
    out = {}
    for f in op.aux:
        if f.tensor in known:
            raise SymflopsError(f"the name {f.tensor!r} is taken", op.span,
                                f"rename the tensor {f.tensor!r}: {op.kind} saves a tensor of "
                                "that name")
        out[f.tensor] = Tensor(f.tensor, tuple(extents[i] for i in f.indices), "activation",
                               False, ("probabilities saved by the loss" if op.kind == "cross_entropy"
                                       else f"reciprocal standard deviation saved by {op.kind}"),
                               op.span)
    return out


def _expression_key(top: Mapping[str, tuple[Span | None, Node]], key: str,
                    symbols: dict[str, sympy.Symbol]) -> sympy.Expr | None:
    if key not in top:
        return None
    node = top[key][1]
    return parse_expression(_text(node, f"'{key}'"), symbols, span=node.span)


def _recompute(top: Mapping[str, tuple[Span | None, Node]], ops: tuple[Any, ...],
               inherited: tuple[str, ...]) -> tuple[str, tuple[str, ...]]:
    """``recompute: {policy: none|full|selective, selective: [A, P]}``."""
    policy, selective = "none", list(inherited)
    if "recompute" not in top:
        return policy, tuple(selective)
    fields = _mapping(top["recompute"][1], "'recompute'",
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
            name = _text(item, "an op to recompute")
            if name not in outputs:
                raise SymflopsError(f"no op writes {name!r}", item.span,
                                    "name ops by the tensor they write; " + closest(name, outputs))
            selective.append(name)
    if "policy" in fields:
        node = fields["policy"][1]
        policy = _text(node, "the recompute policy")
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
    order = _text(node, "'forward_order'")
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
    fields = _mapping(top["sizes"][1], "'sizes'",
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
                                f"{_kind(node.value)}", node.span,
                                f"write e.g. '{name}: 4096'")
        out.append((name, int(value)))
    return tuple(out)


def _includes(ops_node: Node, file: str, dims: tuple[Dim, ...], stack: tuple[str, ...]
              ) -> tuple[dict[int, Included], tuple[Dim, ...]]:
    """Read the ``include:`` items first: they may bring dims the includer's
    tensors use."""
    found: dict[int, Included] = {}
    all_dims = {d.name: d for d in dims}
    if not isinstance(ops_node.value, list):
        return found, dims
    for item in ops_node.value:
        if isinstance(item.value, dict):
            inc = read_include(item, file, all_dims,
                               lambda path, span: _load_block(path, span, stack))
            found[id(item)] = inc
            for d in inc.new_dims:
                all_dims.setdefault(d.name, d)
    return found, tuple(all_dims.values())


def _load_block(path: str, span: Span | None, stack: tuple[str, ...]) -> Layer:
    full = os.path.abspath(path)
    if full in stack:
        chain = " -> ".join(os.path.basename(p) for p in (*stack[stack.index(full):], full))
        raise SymflopsError(f"the declarations include each other: {chain}", span,
                            "a block cannot include itself, directly or through others")
    text = read_text(path, "give a path relative to this file, e.g. 'include: ffn.yaml'", span,
                     lead=f"cannot include {path}")
    stem = os.path.splitext(os.path.basename(path))[0]
    return build_layer(parse_yaml(text, path), path, stem, stack)


def build_layer(root: Node, file: str, default_name: str, stack: tuple[str, ...] = ()) -> Layer:
    if not isinstance(root.value, dict):
        # Not a declaration at all: say what it is, but quote none of it.
        at = root.span or Span(file, 1, 1)
        raise SymflopsError(f"a declaration must be a mapping, found {_kind(root.value, False)}",
                            Span(at.file, at.line, at.column),  # no excerpt of its text
                            "start the file with keys such as 'name:', 'dims:', 'tensors:', 'ops:'")
    top = root.value
    for key, (kspan, _) in top.items():
        if key not in TOP_KEYS:
            raise SymflopsError(f"unknown key {key!r}", kspan, closest(key, list(TOP_KEYS)))
    for key in ("dims", "tensors", "ops"):
        if key not in top:
            raise SymflopsError(f"the declaration has no {key!r}", root.span or Span(file, 1, 1),
                                f"add a '{key}:' section (see the README's declaration format)")
    name = _text(top["name"][1], "'name'") if "name" in top else default_name
    title = _text(top["title"][1], "'title'") if "title" in top else name
    declared, formulas = _dims(top["dims"][1])
    stack = (*stack, os.path.abspath(file))
    includes, dims = _includes(top["ops"][1], file, declared, stack)
    symbols = {d.name: d.symbol for d in dims}
    definitions = _definitions(formulas, symbols)
    tensors = _tensors(top["tensors"][1], symbols)
    for t in tensors.values():
        if t.name.startswith("d") and t.name[1:] in tensors:
            raise SymflopsError(f"tensor name {t.name!r} clashes with the gradient of {t.name[1:]!r}",
                                t.span, f"rename {t.name!r}; 'd' + a tensor's name is reserved "
                                "for that tensor's gradient")
    ops, known, blocks, used = _ops(top["ops"][1], tensors, symbols, includes)
    for out in known.values():
        if out.role == "activation" and out.name.startswith("d") and out.name[1:] in known:
            raise SymflopsError(f"tensor name {out.name!r} clashes with the gradient of "
                                f"{out.name[1:]!r}", out.span,
                                f"rename {out.name!r}; 'd' + a tensor's name is reserved")
    precision = _text(top["precision"][1], "'precision'") if "precision" in top else None
    inherited = tuple(n for inc in used for n in inc.layer.selective)
    policy, selective = _recompute(top, ops, inherited)
    definitions = tuple(dict((*(d for inc in used for d in inc.layer.definitions),
                              *definitions)).items())
    layer = Layer(name, title, dims, tuple(known.values()), ops, file, precision, tuple(blocks),
                  _expression_key(top, "tokens", symbols), _expression_key(top, "sequences", symbols),
                  selective, policy, definitions, _forward_order(top),
                  _sizes(top, dims, definitions))
    _check_expansion(layer)
    return layer


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
        degree, terms, digits = measure(count)
        if degree > MAX_DEGREE or terms > MAX_EXPANDED_TERMS or digits > MAX_DIGITS:
            excess = (f"has a degree above {MAX_DEGREE}" if degree > MAX_DEGREE
                      else f"would expand to more than {MAX_EXPANDED_TERMS} terms"
                      if terms > MAX_EXPANDED_TERMS
                      else f"has coefficients of more than {MAX_DIGITS} digits")
            raise SymflopsError(f"the count of {op.statement()!r} (the product of its letters' "
                                f"extents and its copies) {excess}", getattr(op, "span", None),
                                "use simpler axis sizes and repeats: products of dims, or sums "
                                "of a few, with small numbers")


def load(path: str | os.PathLike[str]) -> Layer:
    """Read a declaration file into a :class:`~symflops.core.ir.Layer`.  The file
    is read by :func:`~symflops.core.errors.read_text` (regular files, at most
    1 MiB); its includes by :func:`~symflops.spec.include.resolve_include`."""
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
    return build_layer(parse_yaml(text, file), file, stem)


def declare(name: str, *, dims: Mapping[str, str], tensors: Mapping[str, Mapping[str, Any]],
            ops: list[str], title: str | None = None, precision: str | None = None) -> Layer:
    """Declare a layer from Python, in the same shape as the YAML format::

        declare("ffn", dims={"B": "tokens", "D": "width", "F": "hidden"},
                tensors={"X": {"shape": ["B", "D"], "role": "input"}, ...},
                ops=["H[b,f] = X[b,d] W_in[d,f]", "Y[b,e] = H[b,f] W_out[f,e]"])
    """
    data: dict[str, Any] = {"name": name, "dims": dict(dims), "tensors": dict(tensors),
                            "ops": list(ops)}
    if title is not None:
        data["title"] = title
    if precision is not None:
        data["precision"] = precision
    return build_layer(_from_python(data), "<python>", name)
