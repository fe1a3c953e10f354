"""Live numbers: the engine's named quantities as a table of exact
expressions that the page's script evaluates in the browser.

Every quantity of ``symflops eval --json`` (its ``quantities`` object, the
names of :mod:`symflops.count.names`) is a SymPy expression over the dims
that take a value (defined dims substituted).  :func:`live_data` reads them
from the summary once per convention the page offers (each precision
policy; each attention convention where the layer has a product a
where-clause restricts) and puts every distinct sub-expression of all of
them once into one table (:class:`Nodes`), over exact rationals: a value is
a pair of BigInts ``[numerator, denominator]``, so a count of 10^20 FLOPs or
a per-token figure with a denominator is exact.  Nothing is recomputed by a
formula written in JavaScript: the script (``templates/live.js.j2``) only
walks the table, checks the inputs (a positive integer of at most
:data:`MAX_INPUT_DIGITS` digits; every defined dim a positive integer there,
as :func:`symflops.count.evaluate.check_definitions` checks) and formats.

The table is JSON data (numbers, indices, one-letter operators), like the
user text (names, descriptions, examples), and travels in one JSON element
escaped for a ``<script>`` element (:func:`script_json`): the page holds no
generated code.
"""

from __future__ import annotations

import json
from typing import Any, Sequence

import sympy

from ..core.errors import SymflopsError
from ..core.ir import Layer, dim_symbol
from ..core.records import Derivation
from ..core.numbers import MAX_RESULT_DIGITS
from ..core.polynomial import Cheapest
from ..count.names import find
from ..count.precision import POLICIES

#: The longest value an input takes (digits): results stay within MAX_RESULT_DIGITS.
MAX_INPUT_DIGITS = 300

class Unsupported(SymflopsError):
    """An expression the browser cannot evaluate exactly (a node with no helper)."""


class Unsettled(Unsupported):
    """A count that is the cost of whichever order of a product is cheapest
    (:class:`Cheapest`): the page would have to choose at the typed sizes."""


_UNSETTLED = ("the live numbers cannot choose among the orders of {what}, whose cheapest "
              "order depends on the sizes (its count is the cost of whichever is cheapest)")
_UNSETTLED_HINT = ("declare the typical sizes (sizes: {...}) so that one order is counted, "
                   "as eval does at given sizes")


def _unsettled_product(span: Any = None, what: str = "a product") -> Unsettled:
    return Unsettled(_UNSETTLED.format(what=what), span, _UNSETTLED_HINT)


def _unsettled(derivation: Derivation, counted: Any) -> Unsettled:
    """The refusal of :class:`Unsettled`, at the first op whose count (or one
    of whose gradients' count) is the cost of whichever order is cheapest."""
    layer = derivation.layer

    def unsettled(c: Any) -> bool:
        return bool(c.flops.has(Cheapest) or c.elementwise.has(Cheapest))

    found = [(layer.ops[k], None) for k, c in enumerate(counted.forward) if unsettled(c)]
    found += [(layer.ops[r.op], r) for r, c in zip(derivation.rules, counted.backward)
              if unsettled(c)]
    if not found:   # (every Cheapest of a count comes from one of its terms)
        return _unsettled_product()
    op, rule = found[0]
    what = (f"the product {op.statement()}" if rule is None
            else f"the gradient {rule.statement} of the product {op.statement()}")
    return _unsettled_product(op.span, what)


#: A node of the table: a constant ``"p"`` or ``"p/q"`` (decimal text, read as
#: BigInts), or ``[op, ...]``: ``["v", i]`` the i-th dim, ``["A", ...]`` a sum,
#: ``["M", ...]`` a product, ``["P", node, k]`` an integer power,
#: ``["F"|"C", node]`` floor and ceiling, ``["X"|"N", ...]`` max and min, the
#: other entries indices of earlier nodes.
Node = Any

_HELPERS = {sympy.floor: "F", sympy.ceiling: "C", sympy.Max: "X", sympy.Min: "N"}


class Nodes:
    """The table of every distinct sub-expression of the page's quantities,
    each once, children before parents: a quantity is the index of its root.
    Two quantities that share a sub-expression (the bytes moved in an
    intensity and in ``bytes_moved.*``, one monomial under several
    coefficients, the same polynomial under two precision policies) share
    its node, so the page carries and evaluates it once.  The table is data
    (numbers, indices and one-letter operators), never code."""

    def __init__(self, index: dict[sympy.Symbol, int]):
        self.index = index
        self.nodes: list[Node] = []
        self._seen: dict[Any, int] = {}

    def add(self, expr: sympy.Expr) -> int:
        """The index of ``expr``'s node (made with its children if new);
        Unsupported on a node the browser cannot evaluate exactly."""
        return self._add(sympy.sympify(expr))

    def _put(self, key: Any, node: Node) -> int:
        if key not in self._seen:
            self._seen[key] = len(self.nodes)
            self.nodes.append(node)
        return self._seen[key]

    def _add(self, e: sympy.Expr) -> int:
        if e in self._seen:
            return self._seen[e]
        if e.is_Integer:
            return self._put(e, str(int(e)))
        if e.is_Rational:
            return self._put(e, f"{int(e.p)}/{int(e.q)}")
        if e.is_Symbol:
            if e not in self.index:
                raise Unsupported(f"the symbol {e} is not a dim that takes a value")
            return self._put(e, ["v", self.index[e]])
        if e.is_Mul:
            coeff, rest = e.as_coeff_Mul()
            if coeff != 1 and coeff.is_Rational:  # 14*B*S and 16*B*S share B*S
                return self._put(e, ["M", self._add(coeff), self._add(rest)])
            return self._put(e, ["M", *(self._add(a) for a in e.args)])
        if e.is_Add:
            return self._put(e, ["A", *(self._add(a) for a in e.args)])
        if e.is_Pow:
            base, exp = e.args
            if not exp.is_Integer:
                raise Unsupported(f"the power {e} has an exponent that is not an integer")
            return self._put(e, ["P", self._add(base), int(exp)])
        helper = _HELPERS.get(e.func)
        if helper is None and isinstance(e, Cheapest):
            raise _unsettled_product()
        if helper is None:
            raise Unsupported(f"no exact browser evaluation of {e.func.__name__} (in {e})")
        return self._put(e, [helper, *(self._add(a) for a in e.args)])


def evaluate_nodes(nodes: Sequence[Node], root: int, values: Sequence[int]) -> sympy.Rational:
    """What the page's script computes for node ``root`` at dims ``values``
    (the same walk in Python, for the tests)."""
    memo: dict[int, sympy.Rational] = {}

    def val(i: int) -> sympy.Rational:
        if i in memo:
            return memo[i]
        n = nodes[i]
        if isinstance(n, str):
            p, _, q = n.partition("/")
            out = sympy.Rational(int(p), int(q or 1))
        elif n[0] == "v":
            out = sympy.Integer(values[n[1]])
        elif n[0] == "P":
            out = val(n[1]) ** n[2]
        else:
            args = [val(k) for k in n[1:]]
            out = {"A": lambda: sum(args, sympy.Integer(0)), "M": lambda: sympy.Mul(*args),
                   "F": lambda: sympy.floor(args[0]), "C": lambda: sympy.ceiling(args[0]),
                   "X": lambda: max(args), "N": lambda: min(args)}[n[0]]()
        memo[i] = out
        return out

    return val(root)


def _attention_choices(layer: Layer) -> tuple[str, ...]:
    """('exact', 'full-square') where the layer has a restricted product, else ('exact',)."""
    from ..count.attention import restricted_products

    return ("exact", "full-square") if restricted_products(layer) else ("exact",)


def live_data(layer: Layer, macs: bool = False,
              derivation: Derivation | None = None) -> dict[str, Any]:
    """The page's numbers as data: the dims, the examples, the conventions
    offered, each convention's quantities (indices into ``nodes``, the
    table of every distinct sub-expression, :class:`Nodes`), and the defined
    dims' checks.  Each convention's quantities are its summary's, the ones
    ``symflops eval --json`` evaluates (:func:`symflops.count.summary.summary`),
    read once per convention: ``derivation`` (the layer's, when the caller
    has it) is not derived again."""
    from ..count.attention import full_square
    from ..count.cost import costs as count_costs
    from ..count.summary import summary
    from ..derive.backward import derive

    free = layer.free_dims
    table = Nodes({dim_symbol(d.name): i for i, d in enumerate(free)})
    fn = table.add

    default_precision = layer.precision or "bf16-adam"
    attention = _attention_choices(layer)
    conventions: dict[str, dict[str, int]] = {}
    names: list[str] = []
    unit = "MACs" if macs else "FLOPs"
    for a in attention:
        if a == "exact":
            d = derivation if derivation is not None else derive(layer)
        else:
            d = derive(full_square(layer))
        counted = count_costs(d, unit)  # type: ignore[arg-type]
        for p in POLICIES:  # a policy changes a count's bytes, never its polynomials
            qs = summary(d, counted.at(POLICIES[p])).quantities
            try:
                conventions[f"{a}|{p}"] = {n: fn(v) for n, v in qs.items()}
            except Unsettled:
                raise _unsettled(d, counted) from None
            names += [n for n in qs if n not in names]
    subs = layer.substitutions
    quantities = []
    for n in names:
        q = find(n)
        quantities.append({"name": n, "kind": q.kind if q else "count",
                           "per": q.per if q else "pass",
                           "description": q.description if q else n})
    return {
        "name": layer.name,
        "unit": "MACs" if macs else "FLOPs",
        "dims": [{"name": d.name, "description": d.description} for d in free],
        "examples": [{"name": e.name, "values": [e.config.get(d.name) for d in free]}
                     for e in layer.examples],
        "definitions": [{"name": n, "formula": sympy.sstr(f), "fn": fn(subs[dim_symbol(n)])}
                        for n, f in layer.definitions],
        "precisions": [{"name": p, "description": POLICIES[p].description} for p in POLICIES],
        "precision": default_precision if default_precision in POLICIES else next(iter(POLICIES)),
        "attention": list(attention),
        "quantities": quantities,
        "conventions": conventions,
        "nodes": table.nodes,
        "max_input_digits": MAX_INPUT_DIGITS,
        "max_result_digits": MAX_RESULT_DIGITS,
    }


def script_json(data: Any) -> str:
    """``data`` as JSON safe inside a ``<script>`` element: no ``</script>``,
    no ``<!--``, no line or paragraph separator (which end a line in older
    JavaScript), no character that HTML would read (``<``, ``>``, ``&``)."""
    text = json.dumps(data, ensure_ascii=False, sort_keys=False, separators=(",", ":"))
    return (text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
            .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029"))
