"""Live numbers: the engine's named quantities compiled to JavaScript that
evaluates them exactly in the browser.

Every quantity of ``symflops eval --json`` (its ``quantities`` object, the
names of :mod:`symflops.count.names`) is a SymPy expression over the dims
that take a value (defined dims substituted).  :func:`live_data` computes
them with the engine once per convention the page offers (each precision
policy; each attention convention where the layer has a product a
where-clause restricts) and compiles each distinct expression into one
JavaScript function over exact rationals: a value is a pair of BigInts
``[numerator, denominator]``, so a count of 10^20 FLOPs or a per-token
figure with a denominator is exact.  Nothing is recomputed by a formula
written in JavaScript: the script (``templates/live.js``) only applies the
compiled functions, checks the inputs (a positive integer of at most
:data:`MAX_INPUT_DIGITS` digits; every defined dim a positive integer there,
as :func:`symflops.count.evaluate.check_definitions` checks) and formats.

The compiled code holds numbers, indices and helper names only, never user
text (:func:`compile_expr` refuses anything else); user text (names,
descriptions, examples) travels as JSON data (:func:`script_json`), escaped
for a ``<script>`` element.
"""

from __future__ import annotations

import json
import re
from typing import Any, Sequence

import sympy

from ..core.errors import SymflopsError
from ..core.ir import Layer, dim_symbol
from ..count.evaluate import MAX_RESULT_DIGITS
from ..count.names import find
from ..count.precision import POLICIES

#: The longest value an input takes (digits): results stay within MAX_RESULT_DIGITS.
MAX_INPUT_DIGITS = 300

#: What compiled code may contain: helper calls, BigInt literals, indices.
_SAFE = re.compile(r"[A-Za-z0-9_\[\](),\-]*")


class Unsupported(SymflopsError):
    """An expression the browser cannot evaluate exactly (a node with no helper)."""


def compile_expr(expr: sympy.Expr, index: dict[sympy.Symbol, int]) -> str:
    """``expr`` as a JavaScript expression over the helpers of ``live.js``
    (``R(p, q)`` a rational, ``A`` sum, ``M`` product, ``P`` integer power,
    ``F``/``C`` floor/ceiling, ``X``/``N`` max/min), the dims read as
    ``v[i]`` (``index``).  Unsupported on any other node."""
    out = _compile(sympy.sympify(expr), index)
    assert _SAFE.fullmatch(out), out  # numbers and helper names only
    return out


def _compile(e: sympy.Expr, index: dict[sympy.Symbol, int]) -> str:
    if e.is_Integer:
        return f"R({int(e)}n,1n)"
    if e.is_Rational:
        return f"R({int(e.p)}n,{int(e.q)}n)"
    if e.is_Symbol:
        if e not in index:
            raise Unsupported(f"the symbol {e} is not a dim that takes a value")
        return f"v[{index[e]}]"
    args = ",".join(_compile(a, index) for a in e.args)
    if e.is_Add:
        return f"A({args})"
    if e.is_Mul:
        return f"M({args})"
    if e.is_Pow:
        base, exp = e.args
        if not exp.is_Integer:
            raise Unsupported(f"the power {e} has an exponent that is not an integer")
        return f"P({_compile(base, index)},{int(exp)})"
    helper = {sympy.floor: "F", sympy.ceiling: "C", sympy.Max: "X", sympy.Min: "N"}.get(e.func)
    if helper is None:
        raise Unsupported(f"no exact browser evaluation of {e.func.__name__} (in {e})")
    return f"{helper}({args})"


def _attention_choices(layer: Layer) -> tuple[str, ...]:
    """('exact', 'full-square') where the layer has a restricted product, else ('exact',)."""
    from ..count.attention import restricted_products

    return ("exact", "full-square") if restricted_products(layer) else ("exact",)


def live_data(layer: Layer, macs: bool = False) -> dict[str, Any]:
    """The page's numbers as data: the dims, the examples, the conventions
    offered, each convention's quantities (indices into ``code``, the
    compiled functions, each distinct expression once), and the defined
    dims' checks.  Computed by the engine (:mod:`symflops.checks.declarations`)."""
    from ..checks.declarations import Convention, Declaration

    free = layer.free_dims
    index = {dim_symbol(d.name): i for i, d in enumerate(free)}
    code: list[str] = []
    seen: dict[str, int] = {}

    def fn(expr: sympy.Expr) -> int:
        js = compile_expr(expr, index)
        if js not in seen:
            seen[js] = len(code)
            code.append(js)
        return seen[js]

    decl = Declaration(layer)
    default_precision = layer.precision or "bf16-adam"
    attention = _attention_choices(layer)
    conventions: dict[str, dict[str, int]] = {}
    names: list[str] = []
    for a in attention:
        for p in POLICIES:
            qs = decl.quantities(Convention(attention=None if a == "exact" else a, precision=p,
                                            macs=macs))
            conventions[f"{a}|{p}"] = {n: fn(v) for n, v in qs.items()}
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
        "code": code,
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


def functions_js(code: Sequence[str]) -> str:
    """The compiled functions as one JavaScript array literal (checked: no user text)."""
    for js in code:
        if not _SAFE.fullmatch(js):  # pragma: no cover - compile_expr guarantees it
            raise AssertionError(js)
    return "[" + ",\n".join(f"(v)=>{js}" for js in code) + "]"
