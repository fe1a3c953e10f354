"""LaTeX for formulas, written the way a teacher writes them.

SymPy's printer sorts factors alphabetically and collapses sums; a sheet wants
``2BDF`` with the dimensions in the order the declaration introduced them,
``B(D + F)`` factored, tensor names such as ``W_in`` as :math:`W_\\text{in}`,
and index expressions with their sums written out.  Everything here returns
LaTeX math (no surrounding ``$``), which both the Markdown and the LaTeX sheet
use.  Names reaching this module are identifiers (checked by the declaration reader), so
escaping ``_`` is all they need: inside ``\\text{}`` and ``\\mathit{}``, and a
name or index letter that is ``_`` alone is written ``\\mathit{\\_}`` (a bare
``_`` in math is a subscript with nothing under it).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Iterable, Sequence

import sympy
from sympy.core.mul import _keep_coeff

from ..core.records import IndexTerm, MatrixProduct
from ..ops.functions import FUNCTIONS, Y
from ..core.factors import RECIPROCAL, Apply, offset_terms, quotient
from ..core.ir import Factor
from ..core.polynomial import by_exponents, common_factor, monomials
from ..core import factoring


@functools.lru_cache(maxsize=4096)
def readable(value: sympy.Expr) -> sympy.Expr:
    """``value`` with its common factor taken out: ``2*B*(D + F)``, and
    ``S*(4*E + S + 1)/2`` (the sum left with integer coefficients whose gcd
    is 1); a short sum that is a product of sums factored,
    ``2*B*C*(2*I + U - 2)*(2*J + V - 2)`` (:func:`_factored`).  A Max or a
    Min is left as it is; any other expression that is not a polynomial only
    has its common factors pulled out by SymPy."""
    if isinstance(value, (sympy.Max, sympy.Min)):
        return value
    expanded = sympy.expand(value)
    split = common_factor(expanded)
    if split is None:  # not a polynomial (a ceiling, a 1/G): SymPy's cheaper common-factor pass
        return sympy.factor_terms(expanded)
    coefficient, monomial, rest = split
    return _keep_coeff(coefficient, monomial * _factored(rest))


#: A sum of this many terms (or fewer, down to 4) is tried for a product of
#: sums: conv2d's saved input 4IJ + 2IV + 2JU + UV - 4I - 4J - 2U - 2V + 4 is
#: (2I + U - 2)(2J + V - 2).  Longer sums are left as they are: factoring
#: costs about 10 ms a polynomial, and a whole model prints hundreds.
FACTOR_TERMS = 9


def _factored(rest: sympy.Expr) -> sympy.Expr:
    """``rest`` as a product of sums where SymPy finds one (with integer
    coefficients), else ``rest``."""
    if not isinstance(rest, sympy.Add) or not 4 <= len(rest.args) <= FACTOR_TERMS:
        return rest
    f = factoring.factor(rest)
    parts = [p for p in sympy.Mul.make_args(f) if not p.is_number]
    if len(parts) < 2 or any(p.as_base_exp()[0].is_Symbol for p in parts) \
            or sympy.expand(f - rest) != 0:
        return rest
    return f


def _text_escape(name: str) -> str:
    return name.replace("_", r"\_")


GREEK = {"alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota", "kappa",
         "lambda", "mu", "nu", "xi", "pi", "rho", "sigma", "tau", "phi", "chi", "psi", "omega",
         "Gamma", "Delta", "Theta", "Lambda", "Xi", "Pi", "Sigma", "Phi", "Psi", "Omega"}


def symbol_name(name: str) -> str:
    r"""A dim or tensor name in math: ``B`` -> ``B``, ``W_in`` -> ``W_{\text{in}}``,
    ``d_ff`` -> ``d_{\text{ff}}``, ``heads`` -> ``\mathit{heads}``.

    >>> symbol_name("W_in")
    'W_{\\text{in}}'
    """
    if name in GREEK:
        return "\\" + name
    if name.startswith("rstd_") and len(name) > 5:  # a norm's saved 1/sigma per row
        return rf"\mathrm{{rstd}}_{{{symbol_name(name[5:])}}}"
    if name.endswith("_hat") and len(name) > 4:  # a normalised tensor: \hat{X}
        return rf"\hat{{{symbol_name(name[:-4])}}}"
    base, sep, rest = name.partition("_")
    if sep and base and rest:
        head = base if len(base) == 1 else rf"\mathit{{{_text_escape(base)}}}"
        return rf"{head}_{{\text{{{_text_escape(rest)}}}}}"
    # One letter is itself; '_' alone would be a subscript with no base.
    return name if len(name) == 1 and name != "_" else rf"\mathit{{{_text_escape(name)}}}"


#: The mark in a set of tensor names that primes a name: ``V'`` among the
#: names makes tensor ``V`` print as ``V'`` (no identifier holds a prime, so
#: the mark names no tensor).
PRIME = "'"


def tensor_name(name: str, tensors: frozenset[str] | set[str] = frozenset()) -> str:
    """A tensor or gradient name: with ``W_in`` among ``tensors``, the gradient
    ``dW_in`` prints as ``dW_{\\text{in}}`` (seed style), not as one long name;
    a name marked in ``tensors`` (:data:`PRIME`) is primed, ``V'``, ``dV'``."""
    if name not in tensors and name.startswith("d") and name[1:] in tensors:
        return "d" + tensor_name(name[1:], tensors)
    text = symbol_name(name)
    return text + "'" if name + PRIME in tensors else text


def _is_compound(name: str) -> bool:
    return "_" in name.strip("_") or len(name) > 1


def index_list(indices: Sequence[str]) -> str:
    """Subscript letters: ``bd`` when all are single letters (primes allowed), else ``b,d``."""
    if all(len(i.rstrip("'")) == 1 and i[0] != "_" for i in indices):
        return "".join(indices)
    return ",".join(symbol_name(i.rstrip("'")) + "'" * (len(i) - len(i.rstrip("'")))
                    for i in indices)


_RELATIONS = {"<=": r"\le", "<": "<", ">=": r"\ge", ">": ">"}


def iverson(f: Factor, tensors: frozenset[str] | set[str] = frozenset()) -> str:
    """An indicator factor as an Iverson bracket: ``[t \\le s]``, ``[v = \\mathit{tok}_{b}]``."""
    if f.is_select:
        return f"[{index_list(f.indices[:1])} = {indexed(Factor(f.tensor, f.indices[1:]), tensors)}]"
    if f.is_shift:
        return f"[{index_list(f.indices[:1])} = {affine_index(f, spaced=True)}]"
    if f.is_offset:
        return f"[{index_list(f.indices[:1])} = {moved(f)}]"
    a, b = f.indices
    return f"[{index_list([a])} {_RELATIONS[f.relation]} {index_list([b])}{_plus(f.offset)}]"


def _plus(offset: sympy.Expr) -> str:
    """`` + W``, `` - W + 1``: a comparison's offset (dims and a whole number) after its letter."""
    return "".join(f" {sign} " + (str(c) if x == 1 else ("" if c == 1 else f"{c} ")
                                   + symbol_name(str(x)))
                   for sign, c, x in offset_terms(offset))


def moved(f: Factor) -> str:
    """An offset's target, ``M + s`` (``s`` for offset 0): a part's place along
    a concatenated axis (:data:`symflops.core.factors.OFFSET`)."""
    letter = index_list(f.indices[1:2])
    return letter if f.offset == 0 else f"{PolyPrinter(())(f.offset, factor=False)} + {letter}"


def affine_index(f: Factor, spaced: bool = False) -> str:
    """A shift factor's right side: ``p+k``, ``2p+k``, ``s-1``, ``P\\,i+u``
    (``spaced``, inside a bracket: ``p + k``)."""
    relation = f.affine
    plus, minus = (" + ", " - ") if spaced else ("+", "-")
    text = ""
    for k, (c, letter) in enumerate(zip(relation.coefficients, f.indices[1:])):
        negative = c.could_extract_minus_sign()
        size = -c if negative else c
        factor = "" if size == 1 else (str(size) if size.is_Integer
                                       else symbol_name(str(size)) + r"\,")
        sign = (minus if negative else plus) if k else ("-" if negative else "")
        text += sign + factor + index_list([letter])
    for sign, c, x in offset_terms(relation.offset):  # dims in name order, then the number
        text += (minus if sign == "-" else plus) + (
            str(c) if x == 1 else ("" if c == 1 else f"{c}\\,") + symbol_name(str(x)))
    return text


def indexed(f: Factor, tensors: frozenset[str] | set[str] = frozenset(),
            lookups: dict[str, str] | None = None) -> str:
    """``X_{bd}``, or ``(W_{\\text{in}})_{df}`` when the name has its own subscript;
    through a function: ``\\operatorname{gelu}(H_{bf})``, ``\\operatorname{gelu}'(H_{bf})``,
    or for a derivative written in the output, that formula (``A_{bf}(1 - A_{bf})``).
    An indicator prints as an Iverson bracket; ``lookups`` writes a looked-up
    letter as its index tensor's element (``E_{\\mathit{tok}_{b},d}``)."""
    if f.is_indicator:
        return iverson(f, tensors)
    name = tensor_name(f.tensor, tensors)
    if f.indices:
        if "_" in name or "^" in name:
            name = f"({name})"
        if lookups and any(i in lookups for i in f.indices):
            name = f"{name}_{{{','.join(lookups.get(i) or index_list([i]) for i in f.indices)}}}"
        else:
            name = f"{name}_{{{index_list(f.indices)}}}"
    if f.function is None:
        return name
    function = FUNCTIONS[f.function.name]
    if f.function.name == RECIPROCAL and f.function.form != "derivative@out":
        # A divisor outside a quotient (a factor of an order's tree): Z_s^{-1}, -Z_s^{-2}.
        return rf"{name}^{{-1}}" if f.function.form == "value" else rf"\left(-{name}^{{-2}}\right)"
    if f.function.form == "value":
        return rf"{function.latex}({name})"
    if f.function.form == "derivative":
        return rf"{function.latex}'({name})"
    g = function.derivative_of_output.subs(Y, sympy.Symbol(name))
    return r"\left(" + sympy.latex(g) + r"\right)"


def join_signed(texts: Iterable[str]) -> str:
    """Printed terms joined into a sum: ``a + b - c`` (a term's own minus sign
    becomes the operator)."""
    out = ""
    for k, text in enumerate(texts):
        if k == 0:
            out = text
        elif text.startswith("-"):
            out += " - " + text[1:]
        else:
            out += " + " + text
    return out


@dataclass(frozen=True)
class PolyPrinter:
    """Prints polynomials in the dims with factors in declaration order."""

    order: tuple[str, ...]

    def rank(self, s: sympy.Symbol) -> tuple[int, str]:
        name = str(s)
        return (self.order.index(name) if name in self.order else len(self.order), name)

    def _joiner(self, symbols: Iterable[sympy.Symbol]) -> str:
        return r" \, " if any(_is_compound(str(s)) for s in symbols) else ""

    def _number(self, n: sympy.Expr) -> str:
        if n.is_Integer:
            return str(int(n))
        if n.is_Rational:
            return rf"\tfrac{{{n.p}}}{{{n.q}}}"
        return sympy.latex(n)

    def monomial(self, coefficient: sympy.Expr, powers: Sequence[tuple[sympy.Symbol, int]]) -> str:
        powers = sorted(powers, key=lambda sp: self.rank(sp[0]))
        parts = [symbol_name(str(s)) + (f"^{{{k}}}" if k != 1 else "") for s, k in powers]
        body = self._joiner(s for s, _ in powers).join(parts)
        if not body:
            return self._number(coefficient)
        if coefficient == 1:
            return body
        if coefficient == -1:
            return "-" + body
        return self._number(coefficient) + (r" \, " if body[0].isdigit() else "") + body

    def _sum(self, expr: sympy.Expr) -> str:
        gens = sorted(expr.free_symbols, key=self.rank)
        found = monomials(expr)
        if found is None:  # coefficients that are not rational numbers
            return self._fallback(expr)
        terms = sorted(by_exponents(found, gens).items(),
                       key=lambda t: (-sum(t[0]), [-e for e in t[0]]))
        return join_signed(self.monomial(sympy.Integer(1) if coeff == 1 else coeff,
                                         [(g, e) for g, e in zip(gens, exps) if e])
                           for exps, coeff in terms)

    def __call__(self, expr: sympy.Expr, factor: bool = True) -> str:
        """LaTeX for ``expr``: factored where that reads better (``B(D + F)``).
        Remembered: a sheet prints the same counts many times, in two formats."""
        return _print(self, expr, factor)

    def _print(self, expr: sympy.Expr, factor: bool = True) -> str:
        expr = sympy.expand(expr)
        if expr.is_number:
            return self._number(expr)
        if not expr.is_polynomial(*expr.free_symbols):
            return self._fallback(expr)
        if not factor:
            return self._sum(expr)
        f = readable(expr)
        coefficient, rest = f.as_coeff_Mul()
        monomial, sums = [], []
        for part in sympy.Mul.make_args(rest):
            base, exp = part.as_base_exp()
            if base.is_Symbol:
                monomial.append((base, int(exp)))
            else:
                sums.append((base, int(exp)))
        if not sums:
            return self.monomial(coefficient, monomial)
        if not monomial and coefficient == 1 and len(sums) == 1 and sums[0][1] == 1:
            return self._sum(sums[0][0])  # a bare sum needs no parentheses
        text = self.monomial(coefficient, monomial) if (monomial or coefficient != 1) else ""
        if text == "1":
            text = ""
        for base, exp in sums:
            inner = self._sum(base)
            text += f"({inner})" + (f"^{{{exp}}}" if exp != 1 else "")
        return text

    def _fallback(self, expr: sympy.Expr) -> str:
        # A Max or Min: each argument printed as a polynomial is, in the
        # declared order (SymPy's printer would sort them, and rebuilding the
        # Max with renamed symbols compares its arguments pairwise).
        if isinstance(expr, (sympy.Max, sympy.Min)):
            name = r"\max" if isinstance(expr, sympy.Max) else r"\min"
            return name + r"\left(" + ", ".join(self(a) for a in expr.args) + r"\right)"
        minima = sorted(expr.atoms(sympy.Min), key=sympy.default_sort_key)
        if minima and not expr.atoms(sympy.Max):
            # A polynomial in the dims and minima of them (a window's count): each
            # minimum stands for a symbol while the sum is printed term by term
            # (not factored: a line may break between its terms).
            # (a one-character name from Unicode's private use area, so that it
            # prints as itself and without the thin space of a compound name)
            marks = {m: sympy.Symbol(chr(0xE000 + k), positive=True) for k, m in enumerate(minima)}
            body = expr.xreplace(marks)
            if body.is_polynomial(*body.free_symbols):
                text = self._sum(sympy.expand(body))
                for m, mark in marks.items():
                    text = text.replace(symbol_name(str(mark)), "{" + self(m) + "}")
                return text
        names = {s: sympy.Symbol(symbol_name(str(s))) for s in expr.free_symbols}
        return sympy.latex(expr.xreplace(names), mul_symbol=None)

    def times_params(self, per_param: sympy.Expr, p: str = "P") -> str:
        r"""``6 \cdot P \cdot B`` for ``per_param = 6*B``: the count per parameter
        written the way the 6ND rule is (coefficient, parameters, tokens)."""
        coefficient, rest = sympy.expand(per_param).as_coeff_Mul()
        parts = [self._number(coefficient)] if coefficient != 1 else []
        parts.append(p)
        if rest != 1:
            parts.append(self(rest))
        return r" \cdot ".join(parts)


def term(t: IndexTerm, poly: PolyPrinter, tensors: frozenset[str] | set[str] = frozenset(),
         show_sum: bool = True, inline: bool = False) -> str:
    """``\\sum_{b} X_{bd} dH_{bf}`` with deltas as ``\\delta_{dd'}``; a factor read
    k times prints once, to the k-th power.  With ``inline``, a lookup
    ``\\sum_v [v = \\mathit{tok}_b] E_{vd}`` is written ``E_{\\mathit{tok}_{b},d}``,
    as declared."""
    used = [i for f in t.factors if not f.is_indicator for i in f.indices]
    # An offset is always written as the slice it reads, dK_{b,M+s,e}.
    lookups = {f.indices[0]: (indexed(Factor(f.tensor, f.indices[1:]), tensors) if f.is_select
                              else moved(f) if f.is_offset else affine_index(f))
               for f in t.factors if (f.is_select or f.is_shift or f.is_offset)
               and (inline or f.is_offset) and f.indices[0] in t.summed and f.indices[0] in used}
    if lookups:
        t = IndexTerm(t.coefficient,
                      tuple(f for f in t.factors
                            if not ((f.is_select or f.is_shift or f.is_offset)
                                    and f.indices[0] in lookups)),
                      t.deltas, tuple(i for i in t.summed if i not in lookups))
    coefficient, numerator, divisors = quotient(t.coefficient, t.factors)
    counts: dict[Factor, int] = {}
    for f in numerator:
        counts[f] = counts.get(f, 0) + 1
    parts = [indexed(f, tensors, lookups) + (f"^{{{k}}}" if k > 1 else "")
             for f, k in counts.items()]
    parts += [rf"\delta_{{{index_list((a, b))}}}" for a, b in t.deltas]
    body = r"\, ".join(parts) if parts else "1"
    if divisors:  # a division by a tensor, N / Z: \frac{N_{sf}}{Z_{s}}
        below = r"\, ".join(indexed(f, tensors, lookups) + (f"^{{{k}}}" if k > 1 else "")
                            for f, k in divisors)
        body = rf"\frac{{{body}}}{{{below}}}"
    if coefficient == -1 and (parts or divisors):  # a subtracted term, Y = A - B: no "- 1 B"
        body = "-" + body
    elif coefficient != 1:
        body = poly(coefficient) + r"\, " + body
    summed = [i for i in t.summed]
    if show_sum and summed:
        body = rf"\sum_{{{','.join(index_list([i]) for i in summed)}}} " + body
    return body


def terms(ts: Sequence[IndexTerm], poly: PolyPrinter,
          tensors: frozenset[str] | set[str] = frozenset()) -> str:
    """A sum of terms, a negative one joined by a minus sign: ``a - \\sum_e b``."""
    if not ts:
        return "0"
    text = ""
    for k, t in enumerate(ts):
        # A derivative divisor 1/Z**2 carries a sign: fold it in before choosing the operator.
        coefficient, numerator, divisors = quotient(t.coefficient, t.factors)
        if divisors:
            plain = tuple(Factor(f.tensor, f.indices, fn=Apply(RECIPROCAL)) for f, k in divisors
                          for _ in range(k))
            t = IndexTerm(coefficient, numerator + plain, t.deltas, t.summed)
        negative = t.coefficient.could_extract_minus_sign()
        body = term(IndexTerm(-t.coefficient, t.factors, t.deltas, t.summed) if negative else t,
                    poly, tensors)
        text += (" - " if negative else " + ") + body if k else ("-" if negative else "") + body
    return text


def matrix_product(m: MatrixProduct, poly: PolyPrinter,
                   tensors: frozenset[str] | set[str] = frozenset()) -> str:
    """The right side ``X^\\top dH`` of a matrix product; a batched one with
    its sum and what it is taken over: ``\\sum_{r} P^\\top\\, dO \\quad
    \\text{per } g``, ``X^\\top\\, dQ \\quad (b, s) \\text{ flattened}``
    (see :class:`~symflops.core.records.MatrixProduct`)."""
    parts = [tensor_name(name, tensors) + (r"^\top" if transposed else "")
             for name, transposed in m.factors]
    sign = "-" if m.coefficient == -1 else ""   # -G S^T, where it printed -1\, G S^T
    coefficient = "" if m.coefficient in (1, -1) else poly(m.coefficient) + r"\, "
    total = rf"\sum_{{{_letters(m.summed)}}} " if m.summed else ""
    return sign + total + coefficient + r"\, ".join(parts) + matrix_note(m)


def _letters(letters: Sequence[str]) -> str:
    return ", ".join(index_list([x]) for x in letters)


def _group(letters: Sequence[str]) -> str:
    return index_list(letters) if len(letters) == 1 else f"({_letters(letters)})"


def matrix_note(m: MatrixProduct) -> str:
    """What a batched matrix product is taken over, or nothing for a plain one:
    ``\\quad \\text{per } (g, r)``, and the matrix indices made of several
    letters, flattened into one: ``\\quad (b, s), (n, e) \\text{ flattened}``."""
    notes = []
    if m.batch:
        notes.append(r"\text{per } " + _group(m.batch))
    if m.groups:
        notes.append(", ".join(_group(g) for g in m.groups) + r" \text{ flattened}")
    return r" \quad " + r";\ ".join(notes) if notes else ""


def matrix(m: MatrixProduct, poly: PolyPrinter, tensors: frozenset[str] | set[str] = frozenset()) -> str:
    """``dW_{\\text{in}} = X^\\top dH``."""
    return f"{tensor_name(m.output, tensors)} = " + matrix_product(m, poly, tensors)


def shape(extents: Sequence[sympy.Expr], poly: PolyPrinter) -> str:
    return "[" + ", ".join(poly(e, factor=False) for e in extents) + "]"


@functools.lru_cache(maxsize=16384)
def _print(printer: PolyPrinter, expr: sympy.Expr, factor: bool) -> str:
    return printer._print(expr, factor)
