"""Plain-text report of a derivation, for ``symflops derive`` and ``eval``.

The sheets (Markdown, LaTeX) are rendered by :mod:`symflops.sheets.render`; this is
the terminal view: aligned columns, formulas in SymPy's plain syntax.
"""

from __future__ import annotations

from typing import Any, Mapping

import sympy

from ..count.records import Summary
from ..core.errors import printable
from ..core.text import table
from ..sheets.printing import readable


def _fmt(value: Any) -> str:
    if isinstance(value, sympy.Basic):
        return sympy.sstr(readable(value)) if value.free_symbols else sympy.sstr(value)
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def text_report(s: Summary[Any], at: Mapping[str, Any] | None = None) -> str:
    """Render a :func:`symflops.count.summary.summary` (symbolic or evaluated)."""
    unit = s.unit
    lines = [f"{printable(s.name)}: {printable(s.title)}"]
    if at:
        lines.append("at " + ", ".join(f"{k} = {_fmt(v)}" for k, v in at.items()))
    else:
        lines.append("dims: " + ", ".join(f"{k} ({printable(v)})" if v else k
                                          for k, v in s.dims.items()))
    lines += [f"convention: {s.conventions}", "", f"forward ({unit})"]
    lines += table([(f.op, f.matrix_form or "", _fmt(f.flops)) for f in s.forward])
    lines += ["", f"backward, in the order computed ({unit})"]
    lines += table([(b.rule, b.matrix_form or "", _fmt(b.flops))
                     for b in s.backward] or [("(no gradient is needed)",)])
    bounded = [(f.output, o) for f in s.forward for o in f.orders if o.bounded]
    bounded += [(b.grad, o) for b in s.backward for o in b.orders if o.bounded]
    for name, o in bounded:
        at = ", ".join(f"{k} = {v}" for k, v in (o.sizes or {}).items())
        lines.append(f"  note: {name}: the order search was bounded ({o.bounded}); counted in "
                     f"{o.counted}, the cheapest at {at}")
    fl, pp = s.flops, s.flops_per_param
    lines += ["", f"totals ({unit}, contractions only)"]
    rows = [(key, _fmt(value), f"= {_fmt(per)} * params" if pp and not at else "")
            for key, value, per in (("forward", fl.forward, pp and pp.forward),
                                    ("backward", fl.backward, pp and pp.backward),
                                    ("total", fl.total, pp and pp.total))]
    rows.append(("elementwise (apart)", _fmt(s.flops_elementwise.total), ""))
    lines += table(rows)
    m = s.memory
    names = [n for n, t in s.tensors.items() if t.role == "buffer"]

    def buffers(value: str, note: str) -> list[tuple[str, str]]:  # only where there are buffers
        return [(f"buffers ({', '.join(names)}; {note})", value)] if names else []

    saved = ", ".join(f"{d.tensor} (read by {', '.join(d.needed_by)})" for d in s.saved_detail)
    lines += ["", "memory (elements)"]
    lines += table([("params", _fmt(s.params)), ("trainable params", _fmt(s.trainable_params)),
                     ("saved for backward", saved or "nothing"),
                     ("activations (training)", _fmt(m.activations)),
                     ("live at peak (inference)", _fmt(m.inference_peak)),
                     *buffers(_fmt(m.buffers), "constants: no gradient, not params")])
    p = s.precision
    lines += ["", f"memory (bytes, precision '{p.name}': {p.description})"]
    lines += table([("params", _fmt(m.params_bytes)), ("grads", _fmt(m.grads_bytes)),
                     ("optimizer state", _fmt(m.optimizer_bytes)),
                     ("master weights", _fmt(m.master_bytes)),
                     ("fixed (model)", _fmt(m.fixed_bytes)),
                     ("activations (batch)", _fmt(m.activation_bytes)),
                     *buffers(_fmt(m.buffers_bytes), f"at the params' {p.params} bytes"),
                     ("total", _fmt(m.total_bytes))])
    if s.notes:
        lines += ["", "notes"] + [f"  {n}" for n in s.notes]
    return "\n".join(lines) + "\n"
