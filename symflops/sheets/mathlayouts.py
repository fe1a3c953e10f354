"""One layout of each math text for every figure a sheet draws.

A log axis labels its ticks in matplotlib's math text (``$10^{3}$``).
matplotlib keeps the layout of a math text in a cache of the parser that
made it, and every renderer makes a parser of its own; saving a figure
makes two renderers (one to lay the figure out, one to draw it), so each
save parses every tick label twice, and the next figure, with the same
labels, parses them again: a fifth of the time a sheet's figures take.

Within :func:`shared_math_layouts` the layouts are kept across parsers and
figures.  A layout is what matplotlib's parser returns for the same
arguments; it depends on the parser only through its output kind (outlines
for the vector formats, an image for PNG) and on the ``mathtext.*``
settings, and both are in the key.  Outside the block matplotlib is as it
was: a user's own figures never read this cache.

A layout holds matplotlib's font objects, and those must not cross a fork
(matplotlib empties its own font cache in a forked child for that reason):
a child shares the parent's open font files, file offsets and all, and two
forked build workers reading glyphs through them at once drew wrong glyphs
or failed.  A forked child therefore starts with no layout kept.
"""

from __future__ import annotations

import contextlib
import os
import threading
from typing import Any, Callable, Iterator

#: The layouts kept, oldest first, at most :data:`KEPT` (a sheet's figures
#: lay out a few dozen distinct math texts).
KEPT = 2048
_kept: dict[Any, Any] = {}
_lock = threading.Lock()
_depth = 0
_original: Any = None


def _forget() -> None:
    """In a forked child: no layout of the parent's (nor its lock's state)."""
    global _lock
    _kept.clear()
    _lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget)


@contextlib.contextmanager
def shared_math_layouts() -> Iterator[None]:
    """Within it, every math text matplotlib lays out is laid out once per
    output kind, arguments and ``mathtext.*`` settings; nested blocks share
    one.  A matplotlib whose parser is not the one this knows is left alone."""
    global _depth, _original
    from matplotlib.mathtext import MathTextParser

    with _lock:
        if _depth == 0:
            current = MathTextParser.__dict__.get("_parse_cached")
            parse = getattr(current, "__wrapped__", None)
            if parse is not None and "_output_type" in vars(MathTextParser("path")):
                _original = current
                MathTextParser._parse_cached = _sharing(parse)  # type: ignore[method-assign]
        if _original is not None:
            _depth += 1
    try:
        yield
    finally:
        with _lock:
            if _original is not None:
                _depth -= 1
                if _depth == 0:
                    MathTextParser._parse_cached = _original  # type: ignore[method-assign]
                    _original = None


def _sharing(parse: Callable[..., Any]) -> Callable[..., Any]:
    """A method standing for matplotlib's cached ``_parse_cached`` (``parse``
    is the function it caches): one cache for every parser."""

    def _parse_cached(parser: Any, *args: Any) -> Any:
        key = (parser._output_type, _settings(), args)
        with _lock:
            found = _kept.get(key)
        if found is None:
            found = parse(parser, *args)
            with _lock:
                while len(_kept) >= KEPT:
                    _kept.pop(next(iter(_kept)))
                _kept[key] = found
        return found

    return _parse_cached


def _settings() -> tuple[str, ...]:
    import matplotlib

    global _names
    if _names is None:
        _names = tuple(sorted(k for k in matplotlib.rcParams if k.startswith("mathtext.")))
    return tuple(repr(matplotlib.rcParams[k]) for k in _names)


_names: tuple[str, ...] | None = None
