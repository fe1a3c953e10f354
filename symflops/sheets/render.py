"""Derivation sheets: a typed context from the engine, laid out by Jinja.

:func:`sheet_context` computes every formula of a sheet (as LaTeX math, which
Markdown viewers render between ``$``) and escapes every piece of user text
for the target format, so templates only place strings and never compute.
:func:`environment` builds the Jinja environment (``StrictUndefined``: a
missing variable is an error, not a blank); :func:`render` returns the sheet
as a string.  Only ``symflops build`` writes files.

A user template directory (``--templates DIR``) is searched before the
shipped templates, so any template or partial can be overridden by name.
Every template is rendered in Jinja's sandbox and read like any other file
(regular files, at most 1 MiB); whatever a user template does wrong is a
SymflopsError naming its ``file:line`` (:func:`render`).

Escaping invariants: user text never leaves its line (line breaks and
control characters are spaces in text, visible escapes in code), every
character with meaning in the target is escaped, and the LaTeX sheet is
refused, naming the character and its place, for text pdflatex cannot set
(:data:`TEX_SETTABLE`); the Markdown sheet takes any text.
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import threading
import unicodedata
from dataclasses import dataclass
from typing import Any, Literal, Mapping, Sequence, TypedDict, get_args

import jinja2
import jinja2.sandbox
import sympy
from jinja2.loaders import split_template_path

from . import printing as P
from ..ops.einsum.orders import bounds_of, size, steps, written
from ..count.cost import Costs
from ..ops.einsum.cost import einsum_flops
from ..ops.einsum.rules import contraction_rules
from ..core.records import Derivation, IndexTerm, MatrixProduct, Rule, grad_name, matrix_form
from ..core.errors import Span, SymflopsError, printable, quote, read_text, shorten
from ..count.evaluate import number
from ..core.ir import Einsum, Factor, Tensor, substitute
from ..ops.einsum.node import Contraction
from ..core.polynomial import quotient
from ..ops.functions import FUNCTIONS
from ..count.precision import dtype_name
from ..count.summary import whole_model

Format = Literal["md", "tex"]
FORMATS: tuple[Format, ...] = get_args(Format)
TEMPLATE_NAMES: dict[Format, str] = {"md": "sheet.md.j2", "tex": "sheet.tex.j2"}


def template_dir() -> str:
    """The shipped templates: ``templates/`` beside the package in a source
    checkout, else the installed package ``symflops.templates``."""
    here = os.path.dirname(os.path.abspath(__file__))
    checkout = os.path.join(os.path.dirname(os.path.dirname(here)), "templates")
    if os.path.isfile(os.path.join(checkout, TEMPLATE_NAMES["md"])):
        return checkout
    import importlib.util

    spec = importlib.util.find_spec("symflops.templates")
    if spec is None or spec.origin is None:
        raise RuntimeError("symflops' templates are not installed; reinstall the package")
    return os.path.dirname(spec.origin)


# ------------------------------------------------------------------ escaping --

_TEX = {"\\": r"\textbackslash{}", "{": r"\{", "}": r"\}", "$": r"\$", "&": r"\&",
        "#": r"\#", "^": r"\textasciicircum{}", "_": r"\_", "%": r"\%", "~": r"\textasciitilde{}",
        "<": r"\textless{}", ">": r"\textgreater{}", "|": r"\textbar{}"}
# Characters that Markdown or its math extensions act on anywhere in a line.
_MD = set("\\`*_[]<>|$~&")

#: The characters beyond ASCII that pdflatex sets with the sheets' preamble
#: (Latin Modern, T1 and TS1 encodings, LaTeX's default UTF-8 input): Latin-1,
#: most of Latin Extended-A and -B, dashes, quotes, daggers, the euro and a
#: few symbols.  Found by compiling each character of U+00A0..U+2200 in that
#: preamble; tests/test_hostile_io.py compiles this whole set again.
TEX_SETTABLE = tuple((int(a, 16), int(b or a, 16)) for a, _, b in (r.partition("-") for r in """
00A0-00AC 00AE-0125 0128-0137 0139-013E 0141-0148 014A-0165 0168-017E 0192 01C4-01D4 01E2-01E3
01E6-01EB 01F0 01F4-01F5 0218-021B 0232-0233 0237 2010-2016 2018-201A 201C-201E 2020-2022 2026
2030-2031 2039-203B 203D 2044 204E 2052 20A1 20A4 20A6 20A9 20AB-20AC 20B1 2103 2116-2117 211E
2120 2122 2126-2127 212E 2190-2193""".split()))


def _is_break(c: str) -> bool:
    """A control character or a line or paragraph separator: never written as it is."""
    return unicodedata.category(c) in ("Cc", "Zl", "Zp")


def tex_settable(c: str) -> bool:
    """Whether the LaTeX sheet can show ``c`` (after escaping)."""
    code = ord(c)
    return 0x20 <= code < 0x7F or _is_break(c) or any(a <= code <= b for a, b in TEX_SETTABLE)


def escape_tex(text: str) -> str:
    r"""Text that LaTeX prints literally: ``\input{x}`` becomes ``\textbackslash{}input\{x\}``.
    A line break or control character is a space (a blank line would end the
    paragraph, a raw control character is an error); a character the fonts do
    not have is a SymflopsError (:func:`check_tex` names the field first)."""
    out = []
    for c in str(text):
        if _is_break(c):
            out.append(" ")
        elif not tex_settable(c):
            raise _unsettable(c, "text", None)
        else:
            out.append(_TEX.get(c, c))
    return "".join(out)


def escape_md(text: str) -> str:
    """Text that Markdown (and the math renderers of common viewers) print
    literally.  A line break of any kind (``\\r`` too) or other control
    character is a space, so that user text never starts a line of its own
    (a heading, a list, an HTML block)."""
    out = []
    for c in str(text):
        if c == "<":
            out.append("&lt;")
        elif c == ">":
            out.append("&gt;")
        elif c == "&":
            out.append("&amp;")
        elif c in _MD:
            out.append("\\" + c)
        elif _is_break(c):
            out.append(" ")
        else:
            out.append(c)
    return "".join(out)


def _visible(text: str) -> str:
    """Code (a file name, a statement) with control characters shown as
    escapes (``\\n``), so that it stays on its line and reads as it is."""
    return "".join(printable(c) if _is_break(c) else c for c in str(text))


def code_md(text: str) -> str:
    """Text inside a Markdown code span: only a backtick could end it, and a
    line break could end the paragraph around it."""
    return _visible(text).replace("`", "'")


def code_tex(text: str) -> str:
    return r"\texttt{" + escape_tex(_visible(text)) + "}"


def _unsettable(c: str, field: str, span: Span | None) -> SymflopsError:
    name = unicodedata.name(c, "unnamed")
    return SymflopsError(
        f"the {field} contains {quote(c)} (U+{ord(c):04X} {name}), which the LaTeX sheet "
        "cannot typeset: pdflatex with the sheet's fonts has no glyph for it", span,
        "the Markdown sheet shows it (render --format md); for LaTeX and PDF write it in "
        "Latin letters (accented ones such as é and ü are fine)")


def _find(c: str, file: str) -> Span | None:
    """Where ``c`` first appears in the declaration ``file``, if it is readable."""
    try:
        text = read_text(file, "")
    except SymflopsError:
        return None
    at = text.find(c)
    if at < 0:  # written as a YAML escape ("\\u4e2d"): no place to show
        return None
    start = text.rfind("\n", 0, at) + 1
    end = text.find("\n", at)
    return Span(file, text.count("\n", 0, at) + 1, at - start + 1,
                text[start:end if end >= 0 else len(text)])


def check_tex(layer: Any) -> None:
    """Refuse, before anything is rendered, user text the LaTeX sheet cannot
    typeset: naming the character, the field and its place in the file."""
    fields = [("title", layer.title, layer.source), ("name", layer.name, layer.source),
              ("file name", os.path.basename(layer.source), None)]
    fields += [(f"description of dim {d.name}", d.description, layer.source) for d in layer.dims]
    fields += [(f"description of tensor {t.name}", t.description,
                t.span.file if t.span is not None else layer.source) for t in layer.tensors]
    for b in layer.blocks:
        fields += [(f"title of the included block {b.name}", b.title, b.source),
                   ("included file name", os.path.basename(b.source), None)]
    for field, text, file in fields:
        bad = next((c for c in str(text or "") if not tex_settable(c)), None)
        if bad is not None:
            raise _unsettable(bad, field, _find(bad, file) if file else None)


ESCAPES = {"md": escape_md, "tex": escape_tex}
CODE_ESCAPES = {"md": code_md, "tex": code_tex}


# ------------------------------------------------------------------- context --

class Row(TypedDict):
    cells: list[str]


class SheetContext(TypedDict):
    """Every variable a sheet template may use.  Math strings are LaTeX
    without delimiters; text strings are already escaped for the format."""

    fmt: str
    name: str
    title: str
    source: str
    unit: str
    unit_note: str
    order_note: str
    dims: list[dict[str, str]]
    tensors: list[dict[str, str]]
    outputs: str
    output_grads: str
    P: str | None
    forward: list[dict[str, Any]]
    forward_sum: str
    forward_total: str
    forward_elementwise: str
    backward_elementwise: str
    forward_per_param: str | None
    generic: list[dict[str, Any]]
    normalizations: list[dict[str, Any]]
    functions: list[dict[str, Any]]
    backward: list[dict[str, Any]]
    backward_lines: list[str]
    order_notes: list[str]
    backward_sum: str
    backward_total: str
    backward_per_param: str | None
    ratio: str | None
    chain: str | None
    saved: list[dict[str, str]]
    saved_names: str
    training_total: str
    training_per_param: str | None
    elementwise: str | None
    memory_rows: list[Row]
    precision: str
    fixed_bytes: str
    activation_bytes: str
    activation_elements: str
    inference_peak: str
    inference_candidates: list[str]
    batch_dims: str
    numbers: dict[str, Any] | None
    model: dict[str, Any] | None


def _ratio(a: sympy.Expr, b: sympy.Expr) -> str | None:
    if a == 0:
        return None
    q = sympy.cancel(b / a)
    if q.is_Integer:
        return f"1 : {int(q)}"
    if q.is_Rational:
        return f"{q.q} : {q.p}"
    return None


@dataclass(frozen=True)
class _Math:
    """LaTeX for one layer's formulas: its dims' order and its tensor names
    (so that gradients print as ``dW_{\text{in}}``)."""

    poly: P.PolyPrinter
    names: frozenset[str]

    def t(self, name: str) -> str:
        return P.tensor_name(name, self.names)

    def ts(self, names: Sequence[str]) -> str:
        return ", ".join(self.t(n) for n in names)

    def ix(self, f: Factor) -> str:
        return P.indexed(f, self.names)

    def term(self, t: IndexTerm) -> str:
        return P.term(t, self.poly, self.names)

    def terms(self, ts: Sequence[IndexTerm]) -> str:
        return P.terms(ts, self.poly, self.names)

    def einsum_rhs(self, e: Einsum) -> str:
        return P.term(IndexTerm(e.coefficient, e.operands, (), e.summed), self.poly, self.names,
                      inline=True)

    def index_form(self, e: Einsum) -> str:
        return f"{self.ix(e.output)} = {self.einsum_rhs(e)}"

    def matrix(self, m: MatrixProduct | None) -> str | None:
        return P.matrix(m, self.poly, self.names) if m is not None else None


def _generic(op: Contraction, term: int = 0) -> Contraction:
    """One term of the op, alone, with tensors renamed Y = X W V ... and letters
    i, j, k, ... in order of appearance: the textbook form of its pattern."""
    e = op.terms[term]
    pool = iter("ijklmnpqrsuvw")
    letters: dict[str, str] = {}
    on_operands = {i for f in e.operands for i in f.indices}  # lookups and shifts included
    # Output letters no operand carries (a bias broadcast over them) come
    # first, so that a bias reads Y_ij = X_j; then the operands' letters in
    # reading order, as in Y_ik = sum_j X_ij W_jk; then the conditions'.
    order = [i for i in e.output.indices if i not in on_operands]
    order += [i for f in (*e.factors, e.output, *(f for f in e.operands if f.is_indicator))
              for i in f.indices]
    for i in order:
        if i not in letters:
            letters[i] = next(pool, f"i{len(letters)}")
    names: dict[str, str] = {}
    pool_names = iter(["X", "W", "V", "U", "Z", "T"])
    for f in e.factors:
        if f.tensor not in names:
            names[f.tensor] = next(pool_names, f"A{len(names)}")

    def rename(f: Factor, name: str) -> Factor:
        return Factor(name, tuple(letters[i] for i in f.indices), fn=f.fn)

    # Indicators keep their index tensor's name: [k <= i], [j = tok_i].
    generic = Einsum(rename(e.output, "Y"),
                     tuple(rename(f, f.tensor if f.is_indicator else names[f.tensor])
                           for f in e.operands),
                     e.coefficient)
    dims = tuple((letters[i], ext) for i, ext in op.index_dims if i in letters)
    if len(op.terms) > 1:  # a term of a sum: its pattern is that of the term alone
        generic = Einsum(generic.output, generic.operands, generic.coefficient)
    return Contraction((generic,), dims, generic.statement())


#: Beyond this many characters of LaTeX, a derivation line's note goes on a
#: line of its own in the LaTeX sheet, so the line fits the page.
LONG_LINE = 150
NOTE = r"\qquad \text{("


def _fold(lines: list[str]) -> list[str]:
    """Move the note of a long line to a line of its own (for the page width)."""
    out = []
    for line in lines:
        at = line.rfind(NOTE)
        if len(line) > LONG_LINE and at > 0:
            out += [line[:at], "&" + line[at:]]
        else:
            out.append(line)
    return out


def _note(text: str) -> str:
    """A step's name beside its line, e.g. ``(chain rule)``."""
    return rf"\qquad \text{{({text})}}"


def _derivation_lines(rules: Sequence[Rule], m: _Math) -> list[str]:
    """The aligned lines of one gradient's derivation, from the engine's steps:
    chain rule, differentiate, contract the deltas, rename."""
    steps = {s.kind: s for s in rules[0].steps}
    upstream = steps["contribution"].terms[0].factors[0]      # dY[o]
    y = Factor(upstream.tensor[1:], upstream.indices)           # Y[o]
    w = Factor(rules[0].wrt, steps["differentiate"].lhs.indices)  # W[j',k']
    occurrence = next(Factor(f.tensor, f.indices) for f in steps["contribution"].terms[0].factors[1:]
                      if f.tensor == rules[0].wrt)                  # W[j,k], without its function
    over = ",".join(P.index_list([i]) for i in upstream.indices)
    chain = (rf"\frac{{\partial L}}{{\partial {m.ix(w)}}} &= "
             + (rf"\sum_{{{over}}} " if over else "")
             + rf"\frac{{\partial L}}{{\partial {m.ix(y)}}}\,\frac{{\partial {m.ix(y)}}}"
               rf"{{\partial {m.ix(w)}}}")
    deltas = r"\,".join(rf"\delta_{{{P.index_list(pair)}}}"
                        for pair in steps["differentiate"].terms[0].deltas)
    lines = [
        chain + _note("chain rule"),
        "&= " + m.terms(steps["differentiate"].terms)
        + rf"\qquad \text{{(differentiate: }}\partial {m.ix(occurrence)}/\partial {m.ix(w)} = "
        + (deltas or "1") + r"\text{)}",
        "&= " + m.terms(steps["contract"].terms) + _note("contract the deltas"),
    ]
    for k, r in enumerate(rules):
        rhs = m.terms([IndexTerm(t.coefficient, t.operands, (), t.summed) for t in r.terms])
        if r.matrix_form is not None:
            rhs += (f" = ({P.matrix_product(r.matrix_form, m.poly, m.names)})"
                    f"_{{{P.index_list(r.terms[0].output.indices)}}}")
        lines.append((r"\Rightarrow\quad " if k == 0 else "") + f"{m.ix(r.terms[0].output)} &= {rhs}"
                     + (_note("rename") if k == 0 else ""))
    # The first term of the chain-rule line reads dL/dW_{j'k'} with the
    # operand's own letters; dW_{j'k'} in the steps is the same element.
    del w
    return lines


@functools.lru_cache(maxsize=4096)
def _sympy_latex(expr: sympy.Expr, m: _Math) -> str:
    """A SymPy expression of tensor elements, with each element printed in
    the sheet's style (``P_{st}``, not SymPy's ``{P}_{s,t}``).  Remembered:
    both formats print the same derivation."""
    names = {e: sympy.Symbol(m.ix(Factor(str(e.base), tuple(str(i) for i in e.indices))))
             for e in expr.atoms(sympy.Indexed)}
    return sympy.latex(expr.xreplace(names))


def _reduction_lines(red: Any, m: _Math) -> list[str]:
    """The stages of a normalisation's derivation as aligned lines, one
    additive term per line so that long derivatives stay on the page."""
    d_out, d_in = m.ix(red.output), m.ix(Factor(red.inp.tensor, red.element.indices))

    def split(lhs: str, parts: Sequence[str], note: str) -> list[str]:
        out = []
        for k, part in enumerate(parts):
            sign = "-" if part.startswith("-") else "+"
            body = part[1:].lstrip() if part.startswith("-") else part
            head = f"{lhs} &= " + ("-" if sign == "-" else "") if k == 0 else rf"&\quad {sign} "
            out.append(head + body + (_note(note) if k == 0 else ""))
        return out

    def expr_parts(expr: sympy.Expr) -> list[str]:
        return [_sympy_latex(t, m) for t in sympy.Add.make_args(expr)]

    def term_parts(ts: Sequence[IndexTerm]) -> list[str]:
        return [m.terms([t]) for t in ts] or ["0"]

    lines = split(rf"\frac{{\partial {d_out}}}{{\partial {d_in}}}",
                  expr_parts(red.stage("derivative")), "differentiate (SymPy)")
    lines += split("", expr_parts(red.stage("substituted")), "name the saved tensors")
    lines += split(m.ix(red.element), term_parts(red.stage("scalar")), "chain rule")
    lines += split("", term_parts(red.stage("contracted")), "contract the deltas")
    lines += split(rf"\Rightarrow\quad {m.ix(red.lhs)}", term_parts(red.stage("rule")), "rename")
    return lines


def _signed(parts: list[str]) -> list[str]:
    """Terms of a sum for continued lines: the first as it is, the others
    with their sign in front (``+ t``, ``- t``)."""
    return parts[:1] + [("- " + p[1:].lstrip()) if p.startswith("-") else ("+ " + p)
                        for p in parts[1:]]


def _functions(layer: Any, derivation: Derivation, m: _Math) -> list[dict[str, Any]]:
    """Each pointwise function the layer uses: its formula and SymPy's derivative."""
    from ..ops.functions import FUNCTIONS, X, Y

    used = dict.fromkeys(f.fn for op in layer.ops for t in op.terms for f in t.factors if f.fn)
    out = []
    for name in used:
        f = FUNCTIONS[name]
        x, y = sympy.Symbol("x"), sympy.Symbol("y")
        item = {"name": f.latex, "formula": sympy.latex(f.formula.xreplace({X: x}), long_frac_ratio=2),
                "derivative": sympy.latex(f.derivative.xreplace({X: x}), long_frac_ratio=2),
                "in_output": (sympy.latex(f.derivative_of_output.xreplace({Y: y}))
                              if f.saves == "output" else None),
                "derivative_lines": _signed([sympy.latex(t.xreplace({X: x}), long_frac_ratio=2)
                                             for t in sympy.Add.make_args(f.derivative)]),
                "cost": f.cost, "derivative_cost": f.derivative_cost}
        out.append(item)
    return out


def _flops_story(e: Einsum, extents: Mapping[str, sympy.Expr], flops: sympy.Expr,
                 poly: P.PolyPrinter, unit: str) -> str:
    """How a forward op's count arises, from the pairwise step the cost model took."""
    found = steps(e, extents, unit, written(len(e.factors)))
    if len(found) != 1 or len(e.operands) != 2:
        return poly(flops)
    span, summed = found[0].span, found[0].kind != "product"
    out = [i for i in dict.fromkeys(e.output.indices) if i in span]
    inner = [i for i in sorted(span) if i not in out]

    def size(idx: Sequence[str]) -> str:
        return poly(sympy.Mul(*(extents[i] for i in idx)))

    if summed and inner:
        factor = "2" if unit == "FLOPs" else "1"
        return (rf"{factor} \times \underbrace{{{size(out)}}}_{{\text{{outputs}}}} \times "
                rf"\underbrace{{{size(inner)}}}_{{\text{{terms each}}}} = {poly(flops)}")
    return rf"\underbrace{{{size(out)}}}_{{\text{{products}}}} = {poly(flops)}"


def _domain_note(k: int, derivation: Derivation, costs: Costs, m: _Math, esc: Any) -> str:
    """What a lookup or a where-clause does to op ``k``'s count, in a sentence
    computed from the op (empty for an op with neither): a lookup copies and
    is no dense product with a one-hot matrix; a condition sums over part of
    the square only."""
    op, unit, poly = derivation.layer.ops[k], costs.unit, m.poly
    extents = op.dims()
    sentences = []
    for e in op.terms:
        lookups = [f for f in e.operands if f.is_select and f.indices[0] in e.summed]
        if lookups:
            tables = [f.tensor for f in e.factors if any(x.indices[0] in f.indices for x in lookups)]
            dense = einsum_flops(_dense(e), extents, unit)
            onehot = r",\ ".join(m.ix(f) for f in lookups)
            text = (esc("A lookup, not a multiplication: each of the ")
                    + f"${poly(size(set(e.output.indices), extents))}$"
                    + esc(" elements of ") + f"${m.t(e.output.tensor)}$" + esc(" copies the element of ")
                    + f"${m.ts(tables)}$" + esc(" that ")
                    + f"${m.ts([f.tensor for f in lookups])}$"
                    + esc(" selects, with no multiply-add; as a dense product with the one-hot "
                          "matrix ") + f"${onehot}$" + esc(" it would cost ") + f"${poly(dense)}$"
                    + esc(f" {unit}."))
            scatter = [(r, c) for r, c in zip(derivation.rules, costs.backward)
                       if r.op == k and any(f.is_select and f.indices[0] in t.output.indices
                                            for t in r.terms for f in t.operands)]
            for r, c in scatter:
                text += (esc(" Its backward ") + f"${m.t(r.grad)}$"
                         + esc(" is a scatter-add, one add per element of ")
                         + f"${m.t(grad_name(op.output))}$" + esc(" read: ")
                         + f"${poly(c.elementwise)}$"
                         + esc(" FLOPs of elementwise work, not a product."))
            sentences.append(text)
        shifts = [f for f in e.operands if f.is_shift]
        if shifts and e.factors:
            dense = einsum_flops(_dense(e), extents, unit)
            inputs = [f.tensor for f in e.factors if any(x.indices[0] in f.indices for x in shifts)]
            grads = [r.grad for r in derivation.rules
                     if r.op == k and r.wrt in inputs]
            brackets = r",\ ".join(m.ix(f) for f in shifts)
            text = (esc("A convolution: ") + f"${brackets}$"
                    + esc(" fixes the shifted position given the other two letters, so only "
                          "those terms are counted; as a dense product with that 0/1 tensor it "
                          "would cost ") + f"${poly(dense)}$" + esc(f" {unit}."))
            if grads:
                text += (esc(" The input gradient ") + f"${m.ts(grads)}$"
                         + esc(" is a full correlation of ") + f"${m.t(grad_name(op.output))}$"
                         + esc(" with the flipped kernel, at the same count."))
            sentences.append(text)
        conditions = [f for f in e.operands if f.is_comparison]
        if conditions and e.factors:
            letters = {i for f in conditions for i in f.indices}
            inside = size(letters, extents, bounds_of(e))
            full = einsum_flops(Einsum(e.output, e.factors, e.coefficient), extents, unit)
            pairs = ", ".join(sorted(letters, key=[i for i, _ in op.index_dims].index))
            domain = r",\ ".join(m.ix(f) for f in conditions)
            sentences.append(
                esc("Summed over the domain ") + f"${domain}$"
                + esc(" only: ") + f"${poly(inside)}$" + esc(" of the ")
                + f"${poly(size(letters, extents))}$" + esc(f" tuples ({pairs}); over the full "
                                                             "range it would cost ")
                + f"${poly(full)}$" + esc(f" {unit}."))
    return " ".join(dict.fromkeys(sentences))


def _order_latex(e: Einsum, tree: Any, m: "_Math") -> str:
    """An order of pairwise products in the sheet's notation: ``(dY_{sf} V_{tf}) Q_{se}``."""
    def text(t: Any, top: bool) -> str:
        if isinstance(t, int):
            return m.ix(e.factors[t])
        inner = rf"{text(t[0], False)}\, {text(t[1], False)}"
        return inner if top else rf"\left({inner}\right)"

    return text(tree, True)


def _order_notes(name: str, terms: Sequence[Einsum], c: Any, layer: Any, m: "_Math",
                 esc: Any) -> list[str]:
    """For each term whose cheapest orders cross: each order, its cost, when it
    is the cheapest, and which count the sheet uses."""
    notes = []
    dims = [d.name for d in layer.free_dims]
    names = {d.symbol: sympy.Symbol(P.symbol_name(d.name)) for d in layer.dims}
    for o in c.orders:
        e = terms[o.term]
        conditions = o.cheaper_when(dims) if len(o.candidates) <= 4 else (None,) * len(o.candidates)
        parts = []
        for cand, cond in zip(o.candidates, conditions):
            part = (f"${_order_latex(e, cand.tree, m)}$" + esc(" costs ") + f"${m.poly(cand.total)}$"
                    + esc(" FLOPs"))
            if cond is not None:
                part += esc(", the cheapest when ") + f"${sympy.latex(cond.xreplace(names))}$"
            parts.append(part)
        if o.chosen is not None:
            at = ", ".join(f"{P.symbol_name(n)} = {v}" for n, v in o.sizes)
            counted = (esc(" Counted here: ") + f"${_order_latex(e, o.candidates[o.chosen].tree, m)}$"
                       + esc(", the cheapest at the declared sizes ") + f"${at}$"
                       + esc("; symflops eval, sweep and plan count the cheapest order at the "
                             "sizes they are given."))
        else:
            counted = esc(" Counted here: the least of these, which depends on the sizes; "
                          "symflops eval, sweep and plan count the cheapest order at the sizes "
                          "they are given (declare typical sizes with sizes: to choose one).")
        notes.append(esc("The cost of ") + f"${name}$" + esc(" depends on the order of its "
                                                               "pairwise products: ")
                     + "; ".join(parts) + "." + counted)
    return notes


def _dense(e: Einsum) -> Einsum:
    """``e`` with each lookup's one-hot matrix as an ordinary dense operand."""
    return Einsum(e.output, tuple(Factor(f"onehot_{f.tensor}", f.indices) if f.is_select
                                  else Factor("shift", f.indices) if f.is_shift else f
                                  for f in e.operands), e.coefficient)


def _group(value: int) -> str:
    return f"{value:,}".replace(",", "{,}")


def _sci(value: int | float) -> str:
    """``2.815 \\times 10^{14}``: four significant digits, for tables of numbers
    (an int beyond a float's range too: Decimal rounds it exactly)."""
    if value == 0:
        return "0"
    if abs(value) < 100_000:
        return _group(value) if isinstance(value, int) else f"{value:.4g}"
    from decimal import Decimal  # exact for any int, and for a float the same as float's format
    mantissa, exp = f"{Decimal(value):.3e}".split("e")
    return rf"{float(mantissa):.4g} \times 10^{{{int(exp)}}}"


def _at_each_size(derivation: Derivation, c: Costs) -> Costs:
    """The costs a numbers table evaluates: where a term's orders cross, the
    least of them, which at each configuration is the cheapest order there
    (as ``symflops eval`` counts), not the one chosen at the declared sizes."""
    crossing = any(o.orders for o in (*c.forward, *c.backward))
    if not (crossing and derivation.layer.sizes):
        return c
    from ..count.cost import costs

    return costs(derivation, c.unit, c.precision, "minimum")


def _numbers(c: Costs, configs: Sequence[Mapping[str, sympy.Expr]], esc: Any,
             subs: Mapping[sympy.Symbol, sympy.Expr]) -> dict[str, Any] | None:
    """The numbers table at each configuration (values of the free dims; a
    defined dim takes its formula's value)."""
    if not configs:
        return None
    mem = c.memory()
    rows = [
        (f"forward ({c.unit})", c.flops_forward),
        (f"backward ({c.unit})", c.flops_backward),
        (f"training ({c.unit})", c.flops_total),
        ("parameters (elements)", c.params),
        ("saved activations (elements)", c.activations),
        ("fixed memory (bytes)", mem["fixed_bytes"]),
        ("activation memory (bytes)", mem["activation_bytes"]),
        ("training memory (bytes)", mem["total_bytes"]),
    ]
    return {
        "heads": [r",\ ".join(f"{P.symbol_name(k)} = "
                              + (_group(int(v)) if abs(v) < 10**21 else _sci(int(v)))
                              for k, v in cfg.items())
                  for cfg in configs],
        "rows": [{"label": esc(label), "cells": [_sci(number(substitute(expr, subs), cfg))
                                                 for cfg in configs]}
                 for label, expr in rows],
    }


def _memory_rows(c: Costs, tensors: Sequence[Tensor], m: _Math, esc: Any,
                 scales_batch: str) -> list[Row]:
    """The seed's memory table: item, elements, bytes per element, bytes, scaling."""
    prec, mem, poly = c.precision, c.memory(), m.poly
    params = [t.name for t in tensors]
    trainable = [t.name for t in tensors if t.requires_grad]

    def row(item: str, elements: sympy.Expr, width: int, nbytes: sympy.Expr, scales: str) -> Row:
        return {"cells": [item, f"${poly(elements)}$", f"{width} ({dtype_name(width)})",
                          f"${poly(nbytes)}$", scales]}

    def names(ns: Sequence[str]) -> str:  # one math span each, so a long list can wrap
        return ", ".join(f"${m.t(n)}$" for n in ns)

    rows = [row(esc("Parameters") + (" " + names(params) if params else ""), c.params, prec.params,
                mem["params_bytes"], esc("model"))]
    if c.trainable != 0:
        rows.append(row(esc("Gradients") + " " + names(["d" + n for n in trainable]),
                        c.trainable, prec.grads, mem["grads_bytes"], esc("model")))
        for state in prec.state_names:
            rows.append(row(esc(state), c.trainable, prec.optimizer,
                            c.trainable * prec.optimizer, esc("model")))
        if prec.master:
            rows.append(row(esc("Master weights"), c.trainable, prec.master,
                            mem["master_bytes"], esc("model")))
    if c.saved:
        rows.append(row(esc("Activations") + " " + names([s.name for s in c.saved]),
                        c.activations, prec.activations, mem["activation_bytes"], scales_batch))
    return rows


@dataclass(frozen=True)
class _Substituted:
    """A polynomial printer that first replaces defined dims by their
    formulas.  Compared by value, so that what is printed with it is
    remembered across a sheet's two formats."""

    poly: P.PolyPrinter
    subs: tuple[tuple[sympy.Symbol, sympy.Expr], ...]

    def __call__(self, e: sympy.Expr) -> str:
        e = e if isinstance(e, sympy.Basic) else sympy.Integer(e)
        return self.poly(substitute(e, dict(self.subs)))

    def __getattr__(self, name: str) -> Any:
        if name == "poly":  # not set yet (a copy being made): no recursion
            raise AttributeError(name)
        return getattr(self.poly, name)


_POLICY_TEXT = {"none": "none (keep every saved tensor)",
                "full": "full (each block keeps its input and runs its forward again)",
                "selective": "selective (recompute only the listed ops)"}


def _model(derivation: Derivation, costs: Costs, poly: Any, m: "_Math", esc: Any
           ) -> dict[str, Any] | None:
    """The whole-model section: blocks, parameter classes, FLOPs per token
    against 6N, recomputation, the key/value cache.  None for a layer that
    declares no tokens and includes no block."""
    layer = derivation.layer
    if layer.tokens is None and not layer.blocks:
        return None
    w = whole_model(derivation, costs)
    par = w.parameters
    per = w.per_token
    tok = layer.tokens

    def scaled(e: sympy.Expr) -> str:  # a whole-layer count, per token when tokens are declared
        return poly(quotient(e, tok) if tok is not None else e)

    def named(kind: str) -> Any:  # the parameters of one class
        return m.ts([n for n, c in par.classes.items() if c == kind])

    blocks = [{
        "title": esc(b.title), "source": esc(os.path.basename(b.source)),
        "copies": poly(b.copies), "params": poly(b.params),
        "forward": poly(b.flops.forward), "backward": poly(b.flops.backward),
        "activation_bytes": poly(b.activation_bytes),
        "saved": [{"name": m.t(s.tensor), "bytes": poly(s.bytes),
                   "mask": s.mask, "needed_by": m.ts(s.needed_by)} for s in b.saved],
    } for b in w.blocks]
    policies = [{
        "name": esc(_POLICY_TEXT[name]),
        "ops": m.ts(r.ops) if name == "selective" else None,
        "executed": scaled(r.flops_executed),
        "recomputed": scaled(r.flops_recomputed),
        "activation_bytes": poly(r.activation_bytes),
        "working": poly(r.working) if r.working != 0 else None,
    } for name, r in w.recompute.policies.items()]
    inf = w.inference
    return {
        "tokens": poly(tok) if tok is not None else None,
        "definitions": [f"{P.symbol_name(n)} = {poly(e)}" for n, e in w.definitions.items()],
        "blocks": blocks,
        "params": {"total": poly(par.total), "trainable": poly(par.trainable),
                   "active": poly(par.active), "active_dense": poly(par.active_dense),
                   "dense": poly(par.dense), "lookup": poly(par.lookup),
                   "elementwise": poly(par.elementwise)},
        "params_differ": {"trainable": par.trainable != par.total,
                          "active": par.active != par.total},
        "dense_names": named("dense"),
        "lookup_names": named("lookup"),
        "elementwise_names": named("elementwise"),
        "per_token": None if per is None else {
            "total": poly(per.flops.total), "forward": poly(per.flops.forward),
            "backward": poly(per.flops.backward), "six_n": poly(per.six_n),
            "beyond": poly(per.beyond_six_n),
            "beyond_sign": "zero" if per.beyond_six_n == 0 else "other",
            "elementwise": poly(per.flops_elementwise),
            "inference": poly(per.inference_forward),
        },
        "policy": esc(layer.recompute),
        "activation_width": costs.precision.activations,
        "mask_width": costs.precision.masks,
        "policies": policies,
        "inference": None if inf is None else {
            "cache": m.ts(inf.cache),
            "elements": poly(inf.cache_elements_per_sequence
                             if inf.cache_elements_per_sequence is not None
                             else inf.cache_elements),
            "bytes": poly(inf.cache_bytes_per_sequence if inf.cache_bytes_per_sequence is not None
                          else inf.cache_bytes),
            "per_sequence": inf.cache_elements_per_sequence is not None,
            "weights_bytes": poly(inf.weights_bytes),
            "per_token_bytes": (poly(inf.bytes_per_decoded_token)
                                if inf.bytes_per_decoded_token is not None else None),
            "activation_width": costs.precision.activations,
        },
    }


def sheet_context(derivation: Derivation, costs: Costs, fmt: Format,
                  configs: Sequence[Mapping[str, sympy.Expr]] = ()) -> SheetContext:
    """Everything the sheet shows, computed by the engine, escaped for ``fmt``."""
    esc, code = ESCAPES[fmt], CODE_ESCAPES[fmt]
    fold = _fold if fmt == "tex" else (lambda lines: lines)
    layer = derivation.layer
    shape_poly = P.PolyPrinter(tuple(d.name for d in layer.dims))
    poly = _Substituted(shape_poly, tuple(layer.substitutions.items()))
    # The candidates once defined dims are substituted (C = c k B S / M can
    # reveal that one bounds another), as `--json` reports them.
    peak = substitute(costs.inference_peak, layer.substitutions)
    m = _Math(poly, frozenset(t.name for t in layer.tensors))
    tensors = layer.tensor_map
    unit = costs.unit

    # The parameter count is P, unless a dim is named P (a convolution's positions).
    psym = r"N_{\mathrm{param}}" if any(d.name == "P" for d in layer.dims) else "P"

    def per_param(expr: sympy.Expr) -> str | None:  # "= 6 P B"; nothing to say about 0
        q = costs.per_param(expr) if costs.params != 0 and expr != 0 else None
        return poly.times_params(q, psym) if q is not None else None

    forward = [{
        "statement": code(op.statement()),
        "index": op.latex(m),
        "definition": (None if op.formula() is None else
                       f"{m.ix(op.out)} = " + _sympy_latex(op.formula(), m)),
        "matrix": m.matrix(matrix_form(op.terms[0])) if len(op.terms) == 1 else None,
        "flops": poly(c.flops),
        "elementwise": poly(c.elementwise) if c.elementwise != 0 else None,
        "story": (_flops_story(op.einsum, op.dims(), c.flops, poly, unit)
                  if len(op.terms) == 1 and c.flops != 0 else poly(c.flops)),
        "note": " ".join(filter(None, [_domain_note(k, derivation, costs, m, esc), *_order_notes(
            m.t(op.output), op.terms, c, layer, m, esc)])),
    } for k, (op, c) in enumerate(zip(layer.ops, costs.forward))]

    normalizations = []
    for op in layer.ops:
        red = op.shown()
        if red is None or op.output not in derivation.needs_grad:
            continue
        normalizations.append({"op": op.latex(m), "grad": m.t(red.lhs.tensor),
                               "lines": fold(_reduction_lines(red, m))})

    generic: list[dict[str, Any]] = []
    patterns: dict[str, list[str]] = {}
    representative: dict[str, tuple[Contraction, bool]] = {}
    for op in layer.ops:
        if not op.terms:  # a softmax, a norm, a loss: its derivation is shown apart
            continue
        lone = len(op.terms) == 1
        for k in range(len(op.terms)):
            g = _generic(op, k)
            # Only an output-saving function's rule depends on the term being alone.
            output_form = any(f.fn and FUNCTIONS[f.fn].saves == "output" for f in g.einsum.factors)
            key = g.einsum.statement() + ("" if lone or not output_form else " (a term of a sum)")
            patterns.setdefault(key, []).append(op.output)
            representative.setdefault(key, (g, lone))
    for key, users in patterns.items():
        g, lone = representative[key]
        if not any(name in derivation.needs_grad for name in users) or not g.inputs:
            continue
        gm = _Math(poly, frozenset(f.tensor for f in (g.einsum.output, *g.einsum.operands)))
        by_wrt = {wrt: rules for wrt in g.inputs
                  if (rules := contraction_rules(g, 0, wrt, output_form=lone))}
        generic.append({
            "op": gm.index_form(g.einsum),
            "matrix": gm.matrix(matrix_form(g.einsum)),
            "output": gm.t("Y"),
            "gradient": gm.t("dY"),
            "applies_to": m.ts(list(dict.fromkeys(users))),
            "rules": [{"wrt": gm.t(wrt), "lines": fold(_derivation_lines(rules, gm))}
                      for wrt, rules in by_wrt.items()],
            "boxed": [gm.matrix(r.matrix_form) for rules in by_wrt.values() for r in rules
                      if r.matrix_form is not None],
        })

    backward = []
    for r, c in zip(derivation.rules, costs.backward):
        terms = [IndexTerm(t.coefficient, t.operands, (), t.summed) for t in r.terms]
        lhs = m.ix(r.terms[0].output)
        pieces = [m.terms([t]) for t in terms]
        backward.append({
            "grad": m.t(r.grad),
            "index": f"{lhs} = " + m.terms(terms),
            "index_lines": [f"{lhs} &= {pieces[0]}"] + [
                (r"&\quad - " + p[1:]) if p.startswith("-") else (r"&\quad + " + p)
                for p in pieces[1:]],
            "matrix": m.matrix(r.matrix_form),
            "flops": poly(c.flops),
            "elementwise": poly(c.elementwise),
            "op": m.t(layer.ops[r.op].output),
        })

    # The gradient chain through activations and inputs: dY -> dH -> dX.
    flow = ["d" + n for n in layer.outputs]
    for r in derivation.rules:
        if not tensors[r.wrt].is_param and r.grad not in flow:
            flow.append(r.grad)
    chain = r" \;\longrightarrow\; ".join(m.t(n) for n in flow) if len(flow) > 1 else None

    param_dims = set().union(*(t.elements.free_symbols for t in layer.params))
    batch = sorted(costs.activations.free_symbols - param_dims, key=poly._rank)
    batch_dims = ", ".join(P.symbol_name(str(s)) for s in batch)
    scales_batch = esc("batch") + (f" (${batch_dims}$)" if batch_dims else "")
    mem = costs.memory()
    ew = sympy.expand(costs.elementwise_forward + costs.elementwise_backward)
    params = layer.params
    p_line = None
    if params:
        p_line = f"{psym} = " + " + ".join(poly(t.elements) for t in params)
        if len(params) > 1:
            p_line += f" = {poly(costs.params)}"

    return SheetContext(
        fmt=fmt,
        name=esc(layer.name),
        title=esc(layer.title),
        source=code(os.path.basename(layer.source)),
        unit=esc(unit),
        unit_note=esc("one multiply-add = 2 FLOPs" if unit == "FLOPs"
                      else "one multiply-accumulate = 1 MAC"),
        order_note=esc("Products of several tensors are contracted pairwise: forward terms "
                       + ("in the cheapest order" if layer.forward_order == "cheapest"
                          else "in the order written")
                       + ", backward rules in the cheapest order. A pairwise product that "
                         "multiplies two tensors, sums over a letter and keeps a letter only one "
                         "of them has (a matrix product) counts as matmul-type; all other work "
                         "is elementwise."),
        dims=[{"name": P.symbol_name(d.name), "description": esc(d.description)}
              for d in layer.dims],
        tensors=[{"name": m.t(t.name),
                  "role": esc({"activation": "computed"}.get(t.role, t.role)
                              + ("" if t.requires_grad or t.role in ("activation", "frozen")
                                 else ", no gradient")),
                  "shape": P.shape(t.shape, shape_poly), "description": esc(t.description)}
                 for t in layer.tensors],
        outputs=m.ts(layer.outputs),
        output_grads=", ".join(rf"{m.t('d' + n)} = \partial L / \partial {m.t(n)}"
                               for n in layer.outputs),
        P=p_line,
        forward=forward,
        forward_sum=" + ".join(f["flops"] for f in forward if f["flops"] != "0") or "0",
        forward_total=poly(costs.flops_forward),
        forward_elementwise=poly(costs.elementwise_forward),
        backward_elementwise=poly(costs.elementwise_backward),
        forward_per_param=per_param(costs.flops_forward),
        generic=generic,
        normalizations=normalizations,
        functions=_functions(layer, derivation, m),
        backward=backward,
        backward_lines=[line for b in backward for line in b["index_lines"]],
        order_notes=[n for r, c in zip(derivation.rules, costs.backward)
                     for n in _order_notes(m.t(r.grad), r.terms, c, layer, m, esc)],
        backward_sum=" + ".join(b["flops"] for b in backward if b["flops"] != "0") or "0",
        backward_total=poly(costs.flops_backward),
        backward_per_param=per_param(costs.flops_backward),
        ratio=_ratio(costs.flops_forward, costs.flops_backward),
        chain=chain,
        saved=[{"name": m.t(s.name), "elements": poly(s.elements),
                "rules": ", ".join("$" + (m.matrix(r.matrix_form) or m.index_form(r.terms[0])) + "$"
                                   for r in derivation.rules if s.name in r.reads)}
               for s in costs.saved],
        saved_names=", ".join(f"${m.t(s.name)}$" for s in costs.saved),  # one span each: wraps
        training_total=poly(costs.flops_total),
        training_per_param=per_param(costs.flops_total),
        elementwise=poly(ew) if ew != 0 else None,
        memory_rows=_memory_rows(costs, layer.params, m, esc, scales_batch),
        precision=esc(f"{costs.precision.name}: {costs.precision.description}"),
        fixed_bytes=poly(mem["fixed_bytes"]),
        activation_bytes=poly(mem["activation_bytes"]),
        activation_elements=poly(costs.activations),
        inference_peak=poly(peak),
        inference_candidates=[poly(a) for a in (peak.args if isinstance(peak, sympy.Max)
                                                 else (peak,))],
        batch_dims=batch_dims,
        numbers=_numbers(_at_each_size(derivation, costs), configs, esc, layer.substitutions),
        model=_model(derivation, costs, poly, m, esc),
    )


# ---------------------------------------------------------------- rendering --

class _Loader(jinja2.FileSystemLoader):
    """Templates are read like every other file (:func:`~symflops.core.errors.read_text`):
    regular files only, at most 1 MiB, UTF-8; a FIFO never blocks the render."""

    def get_source(self, environment: jinja2.Environment, template: str
                   ) -> tuple[str, str, Any]:
        pieces = split_template_path(template)
        for folder in self.searchpath:
            filename = os.path.normpath(os.path.join(folder, *pieces))
            if not os.path.lexists(filename):
                continue
            source = read_text(filename, "give a template file (UTF-8 text)",
                               lead=f"template {shorten(filename, 200)}")
            mtime = os.path.getmtime(filename)

            def uptodate(filename: str = filename, mtime: float = mtime) -> bool:
                try:
                    return os.path.getmtime(filename) == mtime
                except OSError:
                    return False

            return source, filename, uptodate
        raise jinja2.TemplateNotFound(template)


@functools.lru_cache(maxsize=32)
def environment(fmt: Format, user_templates: str | None = None) -> jinja2.Environment:
    """The Jinja environment for ``fmt``; a user's directory comes first.
    Sandboxed (:class:`jinja2.sandbox.SandboxedEnvironment`): a template can
    place the sheet's strings and call safe methods on them, never reach
    Python's internals (``cycler.__init__.__globals__`` is refused).  One
    per format and directory, so each template is compiled once per
    process (Jinja checks the file's time stamp before reusing it)."""
    dirs = ([user_templates] if user_templates else []) + [template_dir()]
    options: dict[str, Any] = {}
    if fmt == "tex":
        # LaTeX is full of braces and percent signs; give Jinja its own marks.
        options = dict(block_start_string="((*", block_end_string="*))",
                       variable_start_string="(((", variable_end_string=")))",
                       comment_start_string="((=", comment_end_string="=))",
                       line_comment_prefix="%%")
    return _Bounded(loader=_Loader(dirs), undefined=jinja2.StrictUndefined, autoescape=False,
                    keep_trailing_newline=True, trim_blocks=True, lstrip_blocks=True, **options)


#: A rendered sheet may be at most this long, and take at most this long to
#: render; a user template beyond either is stopped (the shipped sheets are
#: under 200 kB and render in well under a second).
MAX_SHEET_CHARACTERS = 32 * 1024 * 1024
MAX_RENDER_SECONDS = 60


class _Bounded(jinja2.sandbox.SandboxedEnvironment):
    """The sandbox, with bounded arithmetic: ``'x' * 10**10`` or ``9**9**9``
    in a template is refused before Python builds it (the sandbox already
    bounds ``range``)."""

    intercepted_binops = frozenset(["*", "**"])

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        if operator == "**" and isinstance(right, int) and abs(right) > 64 and left not in (0, 1, -1):
            raise _Limit(f"the power {left!r} ** {right!r} is too large")
        if operator == "*":
            for seq, n in ((left, right), (right, left)):
                if isinstance(seq, (str, list, tuple)) and isinstance(n, int) \
                        and len(seq) * n > MAX_SHEET_CHARACTERS:
                    raise _Limit("a repetition longer than a sheet may be")
        return super().call_binop(context, operator, left, right)


def _bounded_render(template: jinja2.Template, context: Mapping[str, Any]) -> str:
    """``template.render`` with the sheet's length and render time bounded."""
    parts, length = [], 0
    with _deadline(MAX_RENDER_SECONDS):
        for piece in template.generate(**context):
            length += len(piece)
            if length > MAX_SHEET_CHARACTERS:
                raise _Limit(
                    f"the sheet grew beyond {MAX_SHEET_CHARACTERS:,} characters")
            parts.append(piece)
    return "".join(parts)


class _Limit(jinja2.sandbox.SecurityError):
    """A template went past the sheet's bounds of length or time."""


@contextlib.contextmanager
def _deadline(seconds: float) -> Any:
    """Raise :class:`_Limit` in the main thread after ``seconds`` (elsewhere: no bound)."""
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer"):
        yield
        return

    def stop(signum: int, frame: Any) -> None:
        raise _Limit(f"rendering took longer than {seconds:g} s")

    previous = signal.signal(signal.SIGALRM, stop)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _template_line(exc: BaseException, dirs: Sequence[str]) -> str | None:
    """``file:line`` of the innermost template frame of ``exc``'s traceback
    (Jinja rewrites its tracebacks so that template code shows as its lines)."""
    roots = [os.path.realpath(d) for d in dirs]
    where = None
    tb = exc.__traceback__
    while tb is not None:
        name = tb.tb_frame.f_code.co_filename
        real = os.path.realpath(name)
        if any(os.path.commonpath([real, r]) == r for r in roots):
            where = f"{name}:{tb.tb_lineno}"
        tb = tb.tb_next
    return where


def _in_user_templates(where: str | None, user_templates: str | None) -> bool:
    if where is None or not user_templates:
        return False
    root = os.path.realpath(user_templates)
    return os.path.commonpath([os.path.realpath(where.rpartition(":")[0]), root]) == root


def _template_error(exc: Exception, fmt: Format, user_templates: str | None) -> SymflopsError | None:
    """The SymflopsError for an exception raised while rendering, or None for
    one that is a bug (raised by a shipped template alone, and not a Jinja
    error): syntax, an undefined variable, a sandbox refusal, a missing
    template, a template that raises or calls itself without end."""
    if isinstance(exc, jinja2.TemplateSyntaxError):
        where = f"{exc.filename or exc.name}:{exc.lineno}"
        return SymflopsError(f"template {where}: syntax error: {exc.message}",
                             hint="fix the template")
    dirs = ([user_templates] if user_templates else []) + [template_dir()]
    where = _template_line(exc, dirs)
    if not isinstance(exc, jinja2.TemplateError) and not _in_user_templates(where, user_templates):
        return None
    at = f"template {where}" if where else f"template {TEMPLATE_NAMES[fmt]}"
    if isinstance(exc, _Limit):
        return SymflopsError(f"{at}: {exc}", hint=f"a sheet renders in at most "
                             f"{MAX_RENDER_SECONDS} s and {MAX_SHEET_CHARACTERS:,} characters; "
                             "loop over the sheet's lists rather than over large ranges")
    if isinstance(exc, jinja2.sandbox.SecurityError):
        return SymflopsError(f"{at}: refused by the sandbox: {exc}",
                             hint="a template places the sheet's strings; it cannot reach "
                                  "Python objects, their attributes or functions")
    if isinstance(exc, jinja2.UndefinedError):
        return SymflopsError(f"{at}: {exc.message}",
                             hint="a template used a variable the sheet does not have; the "
                                  "variables are listed in symflops/render.py (SheetContext)")
    if isinstance(exc, jinja2.TemplateNotFound):
        return SymflopsError(f"{at}: template not found: {exc.name}",
                             hint="a --templates directory overrides templates by file name; "
                                  "the shipped ones are sheet.md.j2 and sheet.tex.j2 (with "
                                  "base.md.j2 and base.tex.j2)")
    if isinstance(exc, RecursionError):
        return SymflopsError(f"{at}: the template calls itself without end (Python's "
                             "recursion limit was reached)",
                             hint="give the recursive macro or include a condition that stops it")
    return SymflopsError(f"{at}: the template raised {type(exc).__name__}: {exc}",
                         hint="fix the template")


def render(derivation: Derivation, costs: Costs, fmt: Format,
           configs: Sequence[Mapping[str, sympy.Expr]] = (), user_templates: str | None = None) -> str:
    """The sheet as a string in ``fmt`` ('md' or 'tex').  Whatever a user
    template does wrong is a SymflopsError naming the template and line."""
    if fmt not in FORMATS:
        raise ValueError(f"format must be one of {FORMATS}")
    if fmt == "tex":
        check_tex(derivation.layer)
    env = environment(fmt, user_templates)
    context = sheet_context(derivation, costs, fmt, configs)
    try:
        return _bounded_render(env.get_template(TEMPLATE_NAMES[fmt]), context)
    except SymflopsError:
        raise
    except Exception as exc:
        error = _template_error(exc, fmt, user_templates)
        if error is None:
            raise
        raise error from None
