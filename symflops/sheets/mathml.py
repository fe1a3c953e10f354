"""LaTeX math of a sheet as MathML, which browsers render natively (no
script, no font download, no network).

The conversion is latex2mathml's (pure Python, a registry package); it
covers every construct the sheets print (``\\mathit``, ``\\mathrm``,
``\\text``, ``\\hat``, sub- and superscripts, ``aligned`` and ``cases``,
``\\sum`` with limits, ``\\underbrace``, ``\\frac``, ``\\partial``...; the
tests convert every math fragment of every shipped sheet and find no
LaTeX command left in the text).

latex2mathml copies the text of ``\\text{...}`` into its output as it is:
``\\text{</mtext><script>...}`` would be live HTML.  So its output is never
trusted: :func:`sanitize` reads it as a sequence of tags of a fixed MathML
vocabulary (:data:`ELEMENTS`, :data:`ATTRIBUTES`, properly nested) and text,
escapes every other ``<``, ``>``, ``&`` and ``"`` as text, and the result is
parsed as XML once more before it is used.  Characters ``<``, ``>`` and
``"`` are carried through the converter as private-use characters, so that
one in a ``\\text`` reads literally.
"""

from __future__ import annotations

import functools
import re
import xml.etree.ElementTree as ET

from ..core.errors import SymflopsError

#: The MathML elements a sheet's math may produce.
ELEMENTS = frozenset("""math mrow mi mn mo ms mtext mspace msub msup msubsup munder mover
munderover mfrac msqrt mroot mstyle mtable mtr mtd mpadded mphantom menclose mfenced semantics
annotation merror mmultiscripts mprescripts none""".split())
#: Their attributes (values are checked to hold no markup).
ATTRIBUTES = frozenset("""xmlns display mathvariant stretchy fence form accent accentunder
columnalign columnspacing rowspacing columnlines rowlines displaystyle scriptlevel width height
depth lspace rspace separator linethickness movablelimits symmetric largeop minsize maxsize
notation align frame framespacing equalrows equalcolumns class encoding open close separators
rowalign linebreak""".split())

_ENTITY = re.compile(r"&(?:#x[0-9A-Fa-f]{1,6}|#[0-9]{1,7}|lt|gt|amp|quot|apos);")
_TAG = re.compile(r"<(/?)([a-z]+)((?:\s+[a-z-]+=\"[^\"<>&]*\")*)\s*(/?)>")
_ATTR = re.compile(r"\s+([a-z-]+)=\"([^\"<>&]*)\"")
_CARRY = {"<": "\ue000", ">": "\ue001", '"': "\ue002"}
_BACK = {"\ue000": "&lt;", "\ue001": "&gt;", "\ue002": "&quot;"}


#: Environments latex2mathml does not read, and the ones it does that set the same:
#: ``aligned`` is ``align*`` (pairs of right- and left-aligned columns) inside a formula.
_RENAMED = {"aligned": "align*", "gathered": "gather*"}
_ENVIRONMENTS = re.compile(r"\\(begin|end)\{(aligned|gathered)\}")


def _environment(m: re.Match) -> str:
    return f"\\{m.group(1)}{{{_RENAMED[m.group(2)]}}}"


class MathError(SymflopsError):
    """A fragment that does not convert to MathML (a bug of the sheet or the converter)."""


def sanitize(markup: str) -> str:
    """``markup`` with every tag outside the vocabulary, every unbalanced
    tag and every bare ``<``, ``>``, ``&``, ``"`` turned into escaped text."""
    out: list[str] = []
    stack: list[str] = []
    i, n = 0, len(markup)
    while i < n:
        c = markup[i]
        if c == "<":
            m = _TAG.match(markup, i)
            if m and _allowed(m, stack):
                closing, name, attrs, empty = m.groups()
                if closing:
                    stack.pop()
                elif not empty:
                    stack.append(name)
                out.append(m.group(0))
                i = m.end()
                continue
            out.append("&lt;")
        elif c == "&":
            m = _ENTITY.match(markup, i)
            if m:
                out.append(m.group(0))
                i = m.end()
                continue
            out.append("&amp;")
        elif c == ">":
            out.append("&gt;")
        elif c == '"':
            out.append("&quot;")
        else:
            out.append(_BACK.get(c, c))
        i += 1
    if stack:
        raise MathError(f"MathML left open: {', '.join(stack)}")
    return "".join(out)


def _allowed(m: re.Match, stack: list[str]) -> bool:
    closing, name, attrs, empty = m.groups()
    if name not in ELEMENTS:
        return False
    if closing:
        return not attrs and not empty and bool(stack) and stack[-1] == name
    if not stack and name != "math":
        return False
    return all(a in ATTRIBUTES for a, _ in _ATTR.findall(attrs))


@functools.lru_cache(maxsize=16384)
def mathml(latex: str, display: bool = False) -> str:
    """The MathML of one LaTeX fragment (without ``$`` delimiters), safe to
    place in HTML; the LaTeX source rides along as an annotation-free
    ``alttext`` is not added (it would show raw TeX to screen readers)."""
    from latex2mathml.converter import convert

    carried = "".join(_CARRY.get(c, c) for c in _ENVIRONMENTS.sub(_environment, latex))
    try:
        raw = convert(carried, display="block" if display else "inline")
    except Exception as exc:  # the converter's own errors: a fragment it cannot read
        raise MathError(f"cannot convert the math {latex[:60]!r} to MathML: {exc}") from None
    if re.search(r"<m[a-z]+(?: [^>]*)?>&</m", raw):  # an alignment mark read as a letter
        raise MathError(f"the math {latex[:60]!r} has an alignment '&' outside an environment "
                        "the converter reads", hint="this is a bug in symflops")
    raw = raw.replace("<mi>\ue000</mi>", "<mo>&lt;</mo>").replace("<mi>\ue001</mi>", "<mo>&gt;</mo>")
    safe = sanitize(raw)
    try:
        ET.fromstring(safe)
    except ET.ParseError as exc:  # pragma: no cover - sanitize yields well-formed XML
        raise MathError(f"the MathML of {latex[:60]!r} is not well formed: {exc}") from None
    return _compact(safe)


_XMLNS = ' xmlns="http://www.w3.org/1998/Math/MathML"'
_NUMERIC = re.compile(r"&#x([0-9A-Fa-f]{1,6});")
_KEEP = {"<": "&lt;", ">": "&gt;", "&": "&amp;", '"': "&quot;"}


def _compact(markup: str) -> str:
    """The same MathML, shorter for a page: no namespace (HTML's parser puts
    ``<math>`` in it), characters for numeric references (but markup's), and
    the tree trimmed (:func:`_trim`): an ``<mrow>`` of one element is that
    element, an ``<mrow>`` directly in an element that reads its children as
    a row (``math``, ``mtd``, ``msqrt``...) is its children, and a
    one-letter ``<mi>`` does not say ``mathvariant="italic"`` nor ``<math>``
    ``display="inline"``, their defaults."""
    markup = markup.replace(_XMLNS, "")
    markup = _NUMERIC.sub(lambda m: _char(int(m.group(1), 16)), markup)
    return _write(_trim(ET.fromstring(markup)))


#: Elements whose children form one row (MathML's inferred mrow).
_ROWS = frozenset("math mrow mtd msqrt mstyle mpadded mphantom menclose merror".split())


def _trim(e: ET.Element) -> ET.Element:
    children = [_trim(c) for c in e]
    if e.tag in _ROWS:
        spliced: list[ET.Element] = []
        for c in children:
            if c.tag == "mrow" and not c.attrib and not (c.text or "").strip():
                spliced.extend(c)
            else:
                spliced.append(c)
        children = spliced
    for c in list(e):
        e.remove(c)
    e.extend(children)
    if e.tag == "mi" and e.attrib.get("mathvariant") == "italic" and len(e.text or "") == 1:
        del e.attrib["mathvariant"]
    if e.tag == "math" and e.attrib.get("display") == "inline":  # the default
        del e.attrib["display"]
    if e.tag == "mrow" and not e.attrib and len(e) == 1 and not (e.text or "").strip() \
            and not (e[0].tail or "").strip():
        only = e[0]
        only.tail = e.tail
        return only
    return e


def _escape(text: str) -> str:
    return "".join(_KEEP.get(c, c) for c in text)


def _write(e: ET.Element) -> str:
    attrs = "".join(f' {k}="{_escape(v)}"' for k, v in e.attrib.items())
    inner = _escape(e.text or "") + "".join(_write(c) + _escape(c.tail or "") for c in e)
    return f"<{e.tag}{attrs}>{inner}</{e.tag}>"


def _char(code: int) -> str:
    c = chr(code) if code < 0x110000 else "\ufffd"
    return _KEEP.get(c, c) if code >= 0x20 else f"&#x{code:X};"

