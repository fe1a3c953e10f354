"""One result per set of records: a sheet's formats read one analysis.

A sheet is written in Markdown, LaTeX and HTML, and its figures beside them,
each from the same derivation and counts.  An analysis of those records that
takes seconds (the roofline's thresholds, the many-devices report) is made
once for them: :func:`per_records` keeps a function's last results, each
with the records it was made of, and gives one back only when called with
the very same record objects (``is``, not ``==``: a record equal to another
is still analysed afresh) and equal options.  The records are frozen, so the
same objects give the same result; a result is kept with its records, so no
object's identity is reused while it is kept.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, TypeVar

F = TypeVar("F", bound=Callable[..., Any])


def per_records(kept: int = 8) -> Callable[[F], F]:
    """``fn(*records, **options)`` made once for the same records (by
    identity) and options (by value, hashable); the ``kept`` latest results
    are kept.  An error is not kept: the call raises it again."""
    def wrap(fn: F) -> F:
        made: list[tuple[tuple[Any, ...], tuple[tuple[str, Any], ...], Any]] = []

        @functools.wraps(fn)
        def once(*records: Any, **options: Any) -> Any:
            key = tuple(sorted(options.items()))
            for were, was, result in made:
                if was == key and len(were) == len(records) and all(
                        a is b for a, b in zip(were, records)):
                    return result
            result = fn(*records, **options)
            made.append((records, key, result))
            del made[:-kept]
            return result
        return once  # type: ignore[return-value]
    return wrap
