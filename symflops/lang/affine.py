"""The affine index expressions of the statement grammar: ``2*p+k``,
``p+2*k``, ``s-1``, ``s-t``, ``P*i+u``, ``i+u-R`` (see :mod:`symflops.lang.statement`).

Pure: tokens in, :class:`~symflops.lang.syntax.AffineTerm` records and the
constant out, or a :class:`SymflopsError` naming the expression.  Whether a
named coefficient (``P`` in ``P*i``) is a dim is known only with the dims,
and checked there (:mod:`symflops.declaration.letters`).
"""

from __future__ import annotations

from typing import Sequence

from ..core.errors import Span, SymflopsError
from .syntax import AffineTerm, Token


def affine_terms(run: Sequence[Token], tensor: str, span: Span | None
                 ) -> tuple[tuple[AffineTerm, ...], int]:
    """``[+|-] term ((+|-) term)*`` with ``term := letter | N*letter |
    letter*N | NAME*letter | N`` (``N`` a whole number): the terms and the
    sum of the constants.  A name alone may be a dim (``R`` in ``i+u-R``),
    known only with the dims: it is a term here, and the binding moves it to
    the constant (:mod:`symflops.declaration.letters`).  Anything else (a product of three factors,
    division, parentheses, powers, a fraction) is refused by name at the
    expression's column: grammar advice would change its meaning."""
    expr = "".join(t.text for t in run)

    def refuse(why: str) -> SymflopsError:
        return SymflopsError(
            f"index arithmetic of the form {expr} in {tensor}[...] is not supported",
            span,
            f"{why}; an index is a letter (b), a lookup through an index tensor (tok[b]) "
            "or an affine expression of letters: a sum or difference of letters, each "
            "times a positive whole number or a dim (2*p+k, p+2*k, P*i+u, s-t), plus a "
            "constant of whole numbers and dims (s-1; i+u-R, a kernel of 2*R + 1 taps "
            "centred on i)")

    terms: list[AffineTerm] = []
    constant, k, first = 0, 0, True
    while first or k < len(run):
        negative = False
        if run[k].kind == "punct" and run[k].text in ("+", "-"):
            negative, k = run[k].text == "-", k + 1
        elif not first:
            raise refuse(f"{run[k].text!r} stands where '+' or '-' must")
        first = False
        if k == len(run):
            raise refuse("the expression ends after a sign")
        parts = [run[k]]
        k += 1
        while k < len(run) and run[k].text == "*":
            if k + 1 == len(run):
                raise refuse("the expression ends after '*'")
            parts.append(run[k + 1])
            k += 2
        if any(t.kind not in ("name", "number") for t in parts):
            raise refuse("only whole numbers, dims and letters are multiplied or added")
        if any(t.kind == "number" and not t.text.isdigit() for t in parts):
            raise refuse("a number in an index is a whole number")
        if len(parts) > 2:
            raise refuse("a term is a letter times one coefficient")
        names = [t for t in parts if t.kind == "name"]
        if not names:
            if len(parts) == 2:
                raise refuse("a product of two numbers")
            constant += -int(parts[0].text) if negative else int(parts[0].text)
            continue
        coefficient: int | str = 1
        if len(parts) == 2:
            other = parts[0] if parts[1] is names[-1] else parts[1]
            coefficient = other.text if other.kind == "name" else int(other.text)
            if coefficient == 0:
                raise refuse("a coefficient is a positive whole number or a dim")
        # NAME*letter keeps the name as the coefficient: whether it is a dim
        # (P*i) or a letter (p*k, refused) is known once the dims are.
        terms.append(AffineTerm(names[-1].text, names[-1].column, coefficient, negative))
    if not terms:
        raise refuse("an index holds at least one letter")
    return tuple(terms), constant
