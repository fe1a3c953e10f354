"""Escaping user text for a sheet: Markdown, LaTeX and code spans.

Invariants: user text never leaves its line nor reorders the text around
it (line breaks, control and format characters are spaces in text, visible
escapes in code: :data:`HIDDEN`), every character with meaning in the
target is escaped, and the LaTeX sheet is refused,
naming the character and its place, for text pdflatex cannot set
(:data:`TEX_SETTABLE`); the Markdown sheet takes any text.
"""

from __future__ import annotations

import os
import unicodedata
from typing import Any

from ..core.errors import Span, SymflopsError, printable, quote, read_text
# Markdown escaping lives with the planner's Markdown report, in core/text.py
from ..core.text import HIDDEN, escape_md, hidden as _is_break  # noqa: F401 (escape_md re-exported)

_TEX = {"\\": r"\textbackslash{}", "{": r"\{", "}": r"\}", "$": r"\$", "&": r"\&",
        "#": r"\#", "^": r"\textasciicircum{}", "_": r"\_", "%": r"\%", "~": r"\textasciitilde{}",
        "<": r"\textless{}", ">": r"\textgreater{}", "|": r"\textbar{}"}

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


def plain(text: str) -> str:
    """User text for a place with no escaping of its own (a figure's title
    drawn by matplotlib): each :data:`HIDDEN` character a space."""
    return "".join(" " if _is_break(c) else c for c in str(text))


def tex_settable(c: str) -> bool:
    """Whether the LaTeX sheet can show ``c`` (after escaping)."""
    code = ord(c)
    return 0x20 <= code < 0x7F or _is_break(c) or any(a <= code <= b for a, b in TEX_SETTABLE)


def escape_tex(text: str) -> str:
    r"""Text that LaTeX prints literally: ``\input{x}`` becomes ``\textbackslash{}input\{x\}``.
    A line break, control or format character (:data:`HIDDEN`) is a space (a
    blank line would end the paragraph, a raw control character is an error,
    a format character has no glyph); a character the fonts do
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


def _visible(text: str) -> str:
    """Code (a file name, a statement) with control and format characters
    shown as escapes (``\\n``, ``\\u202e``), so that it stays on its line and reads as it is."""
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
    fields += [("name of an example", e.name, layer.source) for e in layer.examples]
    for b in layer.blocks:
        fields += [(f"title of the included block {b.name}", b.title, b.source),
                   ("included file name", os.path.basename(b.source), None)]
    for field, text, file in fields:
        bad = next((c for c in str(text or "") if not tex_settable(c)), None)
        if bad is not None:
            raise _unsettable(bad, field, _find(bad, file) if file else None)


ESCAPES = {"md": escape_md, "tex": escape_tex}
CODE_ESCAPES = {"md": code_md, "tex": code_tex}
