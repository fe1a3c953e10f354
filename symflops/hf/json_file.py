"""Read a Hugging Face ``config.json`` as JSON, safely, for :mod:`symflops.hf.config`.

The file is read as every file symflops reads
(:func:`~symflops.core.errors.read_text`: a regular file of at most
:data:`MAX_BYTES`, UTF-8), and only the standard :mod:`json` module parses
it: integers of at most :data:`MAX_DIGITS` digits (refused while parsing,
before ``int`` converts them), nesting as deep as the parser
allows, every key of an object once (transformers would keep the last of two,
silently); nothing in it is executed.  Each refusal is one SymflopsError
naming the file and, where it can, the line and column.
"""

from __future__ import annotations

import json
import re
from typing import Any

from ..core.errors import MAX_READ, Span, SymflopsError, read_text

MAX_BYTES = MAX_READ         # 1 MiB: a config.json is a few kilobytes
MAX_DIGITS = 30              # longer integers are refused while parsing


def key_name(key: str) -> str:
    """A key of the file for a message, quoted; a long one by its length."""
    return repr(key) if len(key) <= 40 else f"of {len(key)} characters"


def span_at(path: str, text: str, at: int, show: bool = True) -> Span | None:
    """The position of character ``at`` (None when negative); the line is shown
    only when ``show`` and it is short (a minified file is one long line)."""
    if at < 0:
        return None
    line = text.count("\n", 0, at) + 1
    start = text.rfind("\n", 0, at) + 1
    end = text.find("\n", at)
    shown = text[start:end if end >= 0 else None]
    return Span(path, line, at - start + 1, shown if show and len(shown) <= 200 else None)


def _an_object(text: str, at: int) -> bool:
    """Whether ``text`` is a JSON object as far as character ``at`` (where the
    parser stopped: what comes before is valid JSON): only then is a line of it
    shown in a message.  A file that is not JSON from its first character
    (``/etc/shadow`` by any name) is reported by position only."""
    start = len(text) - len(text.lstrip())
    return text[start:start + 1] == "{" and at > start


_SPACE = re.compile(r"[ \t\n\r]*")


def key_offsets(text: str) -> dict[str, int]:
    """Where each key of the top-level object of ``text`` (valid JSON) is
    written: the offset of its opening quote.  A key of the config is found
    at its own place, not where the same text first appears (inside a nested
    object written before it, or spelt with escapes)."""
    decoder, out = json.JSONDecoder(), {}
    at = _SPACE.match(text).end()
    if text[at:at + 1] != "{":
        return out
    at = _SPACE.match(text, at + 1).end()
    while text[at:at + 1] == '"':
        key, end = json.decoder.scanstring(text, at + 1)
        out.setdefault(key, at)
        value = _SPACE.match(text, _SPACE.match(text, end).end() + 1).end()  # past the ':'
        at = _SPACE.match(text, decoder.raw_decode(text, value)[1]).end()
        if text[at:at + 1] != ",":
            break
        at = _SPACE.match(text, at + 1).end()
    return out


class _LongInteger(Exception):
    pass


class _DuplicateKey(Exception):
    pass


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object whose keys are distinct (transformers would keep the last
    of two, silently)."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKey(key)
        out[key] = value
    return out


def _parse_int(digits: str) -> int:
    if len(digits.lstrip("-")) > MAX_DIGITS:
        raise _LongInteger(digits)
    return int(digits)


def _read(path: str) -> str:
    """The file's text, read as every file symflops reads is
    (:func:`~symflops.core.errors.read_text`: a regular file of at most
    :data:`MAX_BYTES`, never blocking; a byte that is not UTF-8 is reported at
    its line and column)."""
    return read_text(path, "give the path of a Hugging Face config.json", limit=MAX_BYTES)


def read_json(path: str) -> tuple[str, Any]:
    """The text of the JSON file at ``path`` and its parsed value; a file that
    is not a regular file of at most :data:`MAX_BYTES`, or not valid JSON
    within the limits, is a SymflopsError naming the place."""
    text = _read(path)
    try:
        data = json.loads(text, parse_int=_parse_int, object_pairs_hook=_unique)
    except json.JSONDecodeError as exc:
        lines = text.splitlines()
        line_text = lines[exc.lineno - 1] if 0 < exc.lineno <= len(lines) else None
        if line_text is not None and (len(line_text) > 200 or not _an_object(text, exc.pos)):
            line_text = None
        raise SymflopsError(f"not valid JSON: {exc.msg}",
                            Span(path, exc.lineno, exc.colno, line_text),
                            "a config.json is one JSON object") from None
    except RecursionError:
        raise SymflopsError(f"{path}: nested too deeply to be a config.json",
                            hint="a config.json is one JSON object of numbers, text and short "
                                 "lists") from None
    except _LongInteger:
        at = re.search(r"\d{%d,}" % (MAX_DIGITS + 1), text)
        start = at.start() if at else -1
        raise SymflopsError(f"{path}: an integer of more than {MAX_DIGITS} digits",
                            span_at(path, text, start, _an_object(text, start)),
                            "no count in a config.json is that long; check the file") from None
    except _DuplicateKey as exc:
        key = str(exc)
        second = text.find(f'"{key}"', text.find(f'"{key}"') + 1)
        raise SymflopsError(f"{path}: key {key_name(key)} appears twice",
                            span_at(path, text, second, _an_object(text, second)),
                            "keep one of the two") from None
    except ValueError as exc:  # a number the parser cannot convert
        raise SymflopsError(f"{path}: not valid JSON: {exc}",
                            hint="a config.json is one JSON object") from None
    return text, data
