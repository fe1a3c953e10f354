"""The derivation sections of a sheet: each pattern's rules step by step, each
normalisation's stages, each pointwise function and its derivative.

Lines are LaTeX for an ``aligned`` environment (``&=`` marks the column).
"""

from __future__ import annotations

from typing import Any, Sequence

import sympy

from . import printing as P
from .notation import Math, signed, step_note, sympy_latex
from ..core.ir import Factor
from ..core.records import Derivation, IndexTerm, Rule


def derivation_lines(rules: Sequence[Rule], m: Math) -> list[str]:
    """The aligned lines of one gradient's derivation, from the engine's steps:
    chain rule, differentiate, contract the deltas, rename."""
    steps = {s.kind: s for s in rules[0].steps}
    upstream = steps["contribution"].terms[0].factors[0]      # dY[o]
    y = Factor(upstream.tensor[1:], upstream.indices)           # Y[o]
    w = Factor(rules[0].wrt, steps["differentiate"].lhs.indices)  # W[j',k']
    occurrence = next(Factor(f.tensor, f.indices) for f in steps["contribution"].terms[0].factors[1:]
                      if f.tensor == rules[0].wrt)                  # W[j,k], without its function
    over = ",".join(P.index_list([i]) for i in upstream.indices)
    chain = (rf"\frac{{\partial \mathcal{{L}}}}{{\partial {m.ix(w)}}} &= "
             + (rf"\sum_{{{over}}} " if over else "")
             + rf"\frac{{\partial \mathcal{{L}}}}{{\partial {m.ix(y)}}}\,\frac{{\partial {m.ix(y)}}}"
               rf"{{\partial {m.ix(w)}}}")
    deltas = r"\,".join(rf"\delta_{{{P.index_list(pair)}}}"
                        for pair in steps["differentiate"].terms[0].deltas)
    lines = [
        chain + step_note("chain rule"),
        "&= " + m.terms(steps["differentiate"].terms)
        + step_note("differentiate", rf"\partial {m.ix(occurrence)}/\partial {m.ix(w)} = "
                    + (deltas or "1")),
        "&= " + m.terms(steps["contract"].terms) + step_note("contract the deltas"),
    ]
    for k, r in enumerate(rules):
        rhs = m.terms([IndexTerm(t.coefficient, t.operands, (), t.summed) for t in r.terms])
        if r.matrix_form is not None and r.matrix_form.plain:  # a batched one has no element form
            rhs += (f" = ({P.matrix_product(r.matrix_form, m.poly, m.names)})"
                    f"_{{{P.index_list(r.terms[0].output.indices)}}}")
        lines.append((r"\Rightarrow\quad " if k == 0 else "") + f"{m.ix(r.terms[0].output)} &= {rhs}"
                     + (step_note("rename") if k == 0 else ""))
    # The first term of the chain-rule line reads dL/dW_{j'k'} with the
    # operand's own letters; dW_{j'k'} in the steps is the same element.
    del w
    return lines



def reduction_lines(red: Any, m: Math) -> list[str]:
    """The stages of a normalisation's derivation as aligned lines, one
    additive term per line so that long derivatives stay on the page."""
    d_out, d_in = m.ix(red.output), m.ix(Factor(red.inp.tensor, red.element.indices))

    def split(lhs: str, parts: Sequence[str], note: str) -> list[str]:
        out = []
        for k, part in enumerate(parts):
            sign = "-" if part.startswith("-") else "+"
            body = part[1:].lstrip() if part.startswith("-") else part
            head = f"{lhs} &= " + ("-" if sign == "-" else "") if k == 0 else rf"&\quad {sign} "
            out.append(head + body + (step_note(note) if k == 0 else ""))
        return out

    def expr_parts(expr: sympy.Expr) -> list[str]:
        return [sympy_latex(t, m) for t in sympy.Add.make_args(expr)]

    def term_parts(ts: Sequence[IndexTerm]) -> list[str]:
        return [m.terms([t]) for t in ts] or ["0"]

    lines = split(rf"\frac{{\partial {d_out}}}{{\partial {d_in}}}",
                  expr_parts(red.stage("derivative")), "differentiate (SymPy)")
    lines += split("", expr_parts(red.stage("substituted")), "name the saved tensors")
    lines += split(m.ix(red.element), term_parts(red.stage("scalar")), "chain rule")
    lines += split("", term_parts(red.stage("contracted")), "contract the deltas")
    lines += split(rf"\Rightarrow\quad {m.ix(red.lhs)}", term_parts(red.stage("rule")), "rename")
    return lines



def function_items(layer: Any, derivation: Derivation, m: Math) -> list[dict[str, Any]]:
    """Each pointwise function the layer uses: its formula and SymPy's derivative."""
    from ..ops.functions import FUNCTIONS, X, Y

    used = dict.fromkeys(f.function.name for op in layer.ops for t in op.terms for f in t.factors
                         if f.function)
    out = []
    for name in used:
        f = FUNCTIONS[name]
        x, y = sympy.Symbol("x"), sympy.Symbol("y")
        item = {"name": f.latex, "formula": sympy.latex(f.formula.xreplace({X: x}), long_frac_ratio=2),
                "derivative": sympy.latex(f.derivative.xreplace({X: x}), long_frac_ratio=2),
                "in_output": (sympy.latex(f.derivative_of_output.xreplace({Y: y}))
                              if f.saves == "output" else None),
                "derivative_lines": signed([sympy.latex(t.xreplace({X: x}), long_frac_ratio=2)
                                             for t in sympy.Add.make_args(f.derivative)]),
                "cost": f.cost, "derivative_cost": f.derivative_cost}
        out.append(item)
    return out
