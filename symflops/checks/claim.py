"""The grammar of a claim, on top of the whitelisted expressions of
:mod:`symflops.lang.expr` (nothing here hands user text to ``eval``,
``exec`` or ``sympify``)::

    claim := side OP side
    OP    := '==' | '!=' | '<' | '<=' | '>' | '>=' | '≈' | '~='   # '≈', '~=': approximately
    side  := expression [UNIT]          # UNIT: a word of symflops.checks.units.WORDS
    NAME  := a dim | a quantity (symflops.count.names) | ALIAS ':' quantity

``ALIAS:flops.total`` names a quantity of a second declaration given with
``--with ALIAS=PATH``.  Each side is parsed twice: once with every name
standing for its formula (what is decided, with the parser's size guards
and positions), once with every quantity standing for a symbol of its own
name (what the units are read from, and what the explanations substitute
into).  A dim defined by a formula (``C: {equals: c*k*T/M}``) stands for
its formula: a claim about ``C`` is a claim about ``c*k*T/M``.

Errors point into the claim: ``<claim 2>:1:18`` on the command line, the
claim's own line and column in a claims file.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Mapping

import sympy

from ..core.errors import Span, SymflopsError
from ..lang.expr import parse_expression
from . import units
from .units import Mixed, Unit, Word

#: Claim operators, as written; '~=' reads as '≈'.
OPERATORS = ("==", "!=", "<", "<=", ">", ">=", "≈")
_OP = re.compile(r"~=|≈|==|!=|<=|>=|<|>")
_ALIAS = re.compile(r"(?<![A-Za-z0-9_.])([A-Za-z_][A-Za-z0-9_]*):(?=[A-Za-z_])")


@dataclass(frozen=True)
class Claim:
    """A parsed claim: the text as written, split at its operator; each side
    as a formula of the dims (``lhs``, ``rhs``: what is decided, a unit word's
    scale applied) and in named quantities (``lhs_named``, ``rhs_named``)."""

    text: str
    lhs_text: str
    op: str
    rhs_text: str
    lhs: sympy.Expr
    rhs: sympy.Expr
    lhs_named: sympy.Expr = sympy.Integer(0)
    rhs_named: sympy.Expr = sympy.Integer(0)
    unit: Unit = units.NONE            # what both sides measure
    words: tuple[str | None, str | None] = (None, None)  # unit words written on each side
    span: Span | None = field(default=None, compare=False)

    @property
    def approx(self) -> bool:
        return self.op == "≈"

    @property
    def names(self) -> tuple[str, ...]:
        """The quantities the claim names, in name order."""
        found = (self.lhs_named.free_symbols | self.rhs_named.free_symbols)
        return tuple(sorted(s.name for s in found if getattr(s, "quantity", False)))


class Name(sympy.Symbol):
    """A symbol standing for a named quantity in ``Claim.lhs_named``: not a dim."""

    quantity = True


def named_symbol(name: str) -> Name:
    return Name(name, positive=True)


@dataclass(frozen=True)
class Names:
    """What a claim may name: ``values`` (every name -> its formula) and
    ``kinds`` (each quantity's kind; a dim is not listed); ``aliases``: the
    second declarations' names (a claim writes ``full:flops.total``, read
    as ``full.flops.total``)."""

    values: Mapping[str, sympy.Expr]
    kinds: Mapping[str, str]
    aliases: tuple[str, ...] = ()
    work: str = "FLOPs"  # the counting unit of the quantities of kind FLOPs


def _split(text: str, span: Span) -> tuple[int, int, str] | None:
    """The operator's start, end and code; None when there is none.  A second
    comparison is refused at its column."""
    found = list(_OP.finditer(text))
    if not found:
        return None
    m = found[0]
    if len(found) > 1:
        second = found[1]
        raise SymflopsError(f"misplaced comparison {second.group()!r}", span.shifted(second.start()),
                            "the whole text must be one comparison like B*D <= 4096, "
                            "unchained and unparenthesised")
    op = "≈" if m.group() in ("≈", "~=") else m.group()
    return m.start(), m.end(), op


def _aliases(text: str, span: Span, aliases: tuple[str, ...]) -> str:
    """``full:flops.total`` as the one name ``full.flops.total`` (same length)."""
    def swap(m: re.Match[str]) -> str:
        if m.group(1) not in aliases:
            known = (f"the declarations given are {', '.join(aliases)}" if aliases
                     else "give it with --with NAME=PATH (or 'with:' in a claims file)")
            raise SymflopsError(f"no declaration named {m.group(1)!r}", span.shifted(m.start()),
                                known)
        return m.group(1) + "."
    return _ALIAS.sub(swap, text)


def _side(text: str, offset: int, span: Span, names: Names, number_: int
          ) -> tuple[sympy.Expr, sympy.Expr, Word | None, int]:
    body, word, at = units.trailing_word(text)
    where = span.shifted(offset)
    if not body.strip():
        what = "before" if offset == 0 else "after"
        raise SymflopsError(f"nothing {what} the comparison", where if offset else span,
                            "write a comparison such as flops.total == 6*params*B")
    try:
        value = parse_expression(body, names.values, span=where)
    except SymflopsError as exc:
        if not exc.message.startswith("unknown name"):
            raise
        # The parser lists only the first names; a claim's author needs them all.
        guess = (exc.hint or "").split("known names:")[0]
        raise SymflopsError(exc.message.replace(".", ":", 1) if _is_alias(exc.message, names)
                            else exc.message, exc.span,
                            f"{guess}known names: {known_names(names.values)}") from None
    placeholders = {n: (named_symbol(n) if n in names.kinds else v)
                    for n, v in names.values.items()}
    named = parse_expression(body, placeholders, span=where)
    assert isinstance(value, sympy.Expr) and isinstance(named, sympy.Expr)
    return value, named, word, offset + at


def _is_alias(message: str, names: Names) -> bool:
    """Whether an unknown name is a second declaration's (``full.flops.totl``)."""
    m = re.match(r"unknown name '([A-Za-z_][A-Za-z0-9_]*)\.", message)
    return bool(m) and m.group(1) in names.aliases


def known_names(symbols: Mapping[str, object]) -> str:
    """All names, grouped compactly: ``B, D, F, params, flops.forward|backward|total, ...``."""
    groups: dict[str, list[str]] = {}
    for name in symbols:
        head, dot, tail = name.partition(".")
        groups.setdefault(head if dot else name, []).append(tail)
    return ", ".join(head + ("." + "|".join(tails) if tails != [""] else "")
                     for head, tails in groups.items())


def _kinds(names: Names) -> dict[sympy.Symbol, str]:
    return {named_symbol(n): k for n, k in names.kinds.items()}


def side_unit(named: sympy.Expr, names: Names, span: Span, text: str = "") -> Unit:
    """The unit of one side; SymflopsError at the side when it adds two units."""
    try:
        return units.unit_of(named, _kinds(names))
    except Mixed as exc:
        raise mixed_error(exc, names, span, text) from None


def _written_order(expr: sympy.Expr, text: str) -> list[sympy.Expr]:
    """The terms of a sum in the order the claim writes their names."""
    def first(term: sympy.Expr) -> int:
        found = [text.find(s.name) for s in term.free_symbols if getattr(s, "quantity", False)]
        return min((f for f in found if f >= 0), default=len(text))
    return sorted(sympy.Add.make_args(expr), key=first)


def _sum_text(expr: sympy.Expr, text: str) -> str:
    return " + ".join(sympy.sstr(t) for t in _written_order(expr, text)).replace("+ -", "- ")


def mixed_error(exc: Mixed, names: Names, span: Span, text: str = "") -> SymflopsError:
    if exc.how == "takes":
        u, part = exc.groups[0]
        return SymflopsError(f"{sympy.sstr(part)} is in {units.text(u, names.work)}, and a "
                             "function here takes a number", span,
                             "apply it to a number or a formula of dims and counts")
    groups = sorted(exc.groups, key=lambda g: min(
        (text.find(s.name) for s in g[1].free_symbols if getattr(s, "quantity", False)
         and text.find(s.name) >= 0), default=len(text)))
    parts = [f"{units.text(u, names.work)} ({_sum_text(e, text)})" for u, e in groups]
    return SymflopsError("the claim adds " + " to ".join(parts), span,
                         "add like to like: " + convert_hint([e for _, e in groups], names, text))


#: The same quantity in bytes and in elements.
COUNTERPARTS = {"activations": "memory.activation_bytes",
                "memory.params": "memory.params_bytes", "memory.grads": "memory.grads_bytes",
                "memory.optimizer": "memory.optimizer_bytes",
                "memory.master": "memory.master_bytes", "memory.fixed": "memory.fixed_bytes",
                "memory.activations": "memory.activation_bytes",
                "memory.total": "memory.total_bytes",
                "memory.inference_peak": "memory.inference_peak_bytes",
                "memory.buffers": "memory.buffers_bytes",
                "kv_cache.elements": "kv_cache.bytes",
                "kv_cache.elements_per_sequence": "kv_cache.bytes_per_sequence"}
_BACK = {v: k for k, v in COUNTERPARTS.items() if k != "activations"}


def counterpart(name: str) -> str | None:
    """The name of the same quantity in the other memory unit (``full.memory.params``
    of a second declaration too)."""
    found = COUNTERPARTS.get(name) or _BACK.get(name)
    if found is None and "." in name:
        head, rest = name.split(".", 1)
        other = COUNTERPARTS.get(rest) or _BACK.get(rest)
        found = None if other is None else f"{head}.{other}"
    return found


def convert_hint(parts: list[sympy.Expr], names: Names, text: str = "") -> str:
    """Each part written in bytes and in elements, where the names allow."""
    out = []
    for unit_name in ("bytes", "elements"):
        texts = []
        for e in parts:
            swap = {}
            for s in e.free_symbols:
                if getattr(s, "quantity", False) and names.kinds.get(s.name) not in (unit_name, None):
                    other = counterpart(s.name)
                    if other is None or names.kinds.get(other) != unit_name:
                        break
                    swap[s] = named_symbol(other)
            else:
                texts.append(_sum_text(e.xreplace(swap), text.replace(
                    " ", "").translate({})) if not swap else _swapped_text(e, swap, text))
                continue
            break
        else:
            out.append(f"in {unit_name}, {' + '.join(texts)}")
    return "; or ".join(out) if out else "name quantities of one unit on each side"


def _swapped_text(e: sympy.Expr, swap: dict, text: str) -> str:
    """A part with its names swapped, its terms in the order the claim writes them."""
    terms = _written_order(e, text)
    return " + ".join(sympy.sstr(t.xreplace(swap)) for t in terms).replace("+ -", "- ")


def parse_claim(text: str, names: Names | Mapping[str, sympy.Expr], number_: int = 1,
                span: Span | None = None) -> Claim:
    """Parse one claim; SymflopsError (pointing into the claim) when it is not
    one comparison of whitelisted arithmetic over known names in one unit."""
    if not isinstance(names, Names):  # a plain mapping: every name without a unit
        names = Names(dict(names), {})
    span = span or Span(f"<claim {number_}>", 1, 1, text)
    text_ = _aliases(text, span, names.aliases)
    cut = _split(text_, span)
    if cut is None:  # the expression grammar says what is wrong
        parse_expression(text_, names.values, span=span, comparisons=True)
        raise SymflopsError(f"{text.strip()[:60]!r} is not a comparison", span,
                            "write e.g. B <= 4096")  # pragma: no cover (the parser raised)
    start, end, op = cut
    lhs, lhs_named, lword, lat = _side(text_[:start], 0, span, names, number_)
    rhs, rhs_named, rword, rat = _side(text_[end:], end, span, names, number_)
    lunit = side_unit(lhs_named, names, span, text_[:start])
    runit = side_unit(rhs_named, names, span.shifted(end), text_[end:])
    for word, u, at, scale_side in ((lword, lunit, lat, "lhs"), (rword, runit, rat, "rhs")):
        if word is not None and u:
            raise SymflopsError(f"the unit {word.word!r} follows a side that is in "
                                f"{units.text(u, names.work)} already", span.shifted(at),
                                "write a unit after a number or a formula of dims and counts "
                                "(80 GB, 6*params*tokens FLOPs), or leave it out")
    if lword is not None:
        lunit = units.kind_unit(lword.kind)
    if rword is not None:
        runit = units.kind_unit(rword.kind)
    if lunit and runit and lunit != runit:
        raise SymflopsError(
            f"the claim compares {units.text(lunit, names.work)} ({text[:start].strip()}) with "
            f"{units.text(runit, names.work)} ({text[end:].strip()})", span.shifted(end),
            _compare_hint(lhs_named, rhs_named, lunit, runit, names, (lword, rword)))
    unit = lunit or runit
    base = sympy.Integer(2) if names.work == "MACs" else sympy.Integer(1)
    if lword is not None:
        lhs = lhs * (lword.factor / base if lword.kind == "FLOPs" else lword.factor)
    if rword is not None:
        rhs = rhs * (rword.factor / base if rword.kind == "FLOPs" else rword.factor)
    return Claim(text.strip(), text[:start].strip(), op, text[end:].strip(), lhs, rhs,
                 lhs_named, rhs_named, unit,
                 (lword.word if lword else None, rword.word if rword else None), span)


def _compare_hint(lhs: sympy.Expr, rhs: sympy.Expr, lunit: Unit, runit: Unit,
                  names: Names, words: tuple[Word | None, Word | None]) -> str:
    """A conversion that makes the comparison meaningful: a quantity in the
    unit written on the other side, or the ratio of the two sides (a number
    of bytes per element)."""
    for side, unit, word in ((lhs, runit, words[1]), (rhs, lunit, words[0])):
        if word is not None and not side.is_number:
            target = next(iter(dict(unit)))
            for part in convert_hint([side], names).split("; or "):
                if part.startswith(f"in {target},"):
                    return f"name the quantity {part}"
            return f"compare a quantity in {units.text(unit, names.work)}"
    quantities = [s for s in rhs.free_symbols if getattr(s, "quantity", False)]
    plain, rest = rhs.as_independent(*quantities, as_Add=False)
    ratio = (f"{sympy.sstr(lhs)} / {sympy.sstr(rest)} == {sympy.sstr(plain)}" if rest != 1 else
             f"{sympy.sstr(lhs)} / ({sympy.sstr(rhs)}) == ...")
    return f"state the conversion as a ratio, {ratio}, or compare like with like"


def difference_label(claim: Claim) -> str:
    """``lhs - rhs`` in the claim's own words, e.g. ``flops.total - 4*params*B``."""
    rhs = claim.rhs_text
    if re.search(r"[-+]", rhs.lstrip("+-")):  # a sum needs parentheses after '-'
        rhs = f"({rhs})"
    return f"{claim.lhs_text} - {rhs}"
