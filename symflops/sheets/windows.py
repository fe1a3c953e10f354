"""The sliding-window section of a sheet: the exact count beside the other
accounts' figures (:mod:`symflops.count.windows`), as LaTeX math and escaped
text for ``templates/windows.*.j2``; each figure also at the sheet's worked
configuration, with its ratio to the exact count, so that a number read
elsewhere can be matched to its convention."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import sympy

from ..core.ir import dim_symbol
from ..core.records import Derivation
from ..count.explain import SheetCounts
from ..count.windows import windows
from .notation import Math


def _group(value: int) -> str:
    return f"{value:,}".replace(",", "{,}")


def window_context(derivation: Derivation, counts: SheetCounts, m: Math, esc: Any
                   ) -> list[dict[str, Any]]:
    """One entry per window: ``ops`` and ``letters`` (math), ``width``,
    ``exact`` and ``per_pair`` (math; ``per_pair`` None when the FLOPs do not
    scale per pair), ``at`` (the worked configuration's name, escaped, or
    None), and ``rows``: each convention's ``label`` (escaped), ``pairs`` and
    ``flops`` (math; ``flops`` None as above), ``value`` (the pairs at the
    worked configuration, math) and ``ratio`` (to the exact count, text)."""
    layer = derivation.layer
    worked = counts.worked
    at = None if worked is None else {dim_symbol(k): v for k, v in worked.config}

    def value(expr: sympy.Expr) -> sympy.Expr | None:
        if at is None:
            return None
        done = sympy.sympify(expr).xreplace(dict(layer.substitutions)).xreplace(at)
        return done if done.is_number else None

    out = []
    for w in windows(derivation, counts.costs):
        exact = value(w.exact)
        rows = []
        for c in w.conventions:
            v = value(c.pairs)
            ratio = None
            if v is not None and exact:
                q = Fraction(int(sympy.numer(v)), int(sympy.denom(v))) / int(exact)
                ratio = f"{float(q):.5g}"
            rows.append({"label": esc(c.label), "pairs": m.poly(c.pairs),
                         "flops": None if c.flops is None else m.poly(c.flops),
                         "value": None if v is None else (_group(int(v)) if v.is_integer
                                                          else sympy.latex(v)),
                         "ratio": ratio})
        out.append({"ops": m.ts(w.ops), "letters": f"{w.query}, {w.key}",
                    "query": w.query, "key": w.key, "width": m.poly(w.width),
                    "exact": m.poly(w.exact),
                    "per_pair": None if w.per_pair is None else m.poly(w.per_pair),
                    "at": None if worked is None or worked.name is None else esc(worked.name),
                    "rows": rows})
    return out
