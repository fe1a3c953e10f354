"""core/memo.per_records: one result for the same record objects, never for
equal ones, and no error kept (counted by hand in each test)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from symflops.core.memo import per_records


@dataclass(frozen=True)
class Record:
    value: int


def test_the_same_objects_share_a_result_and_equal_ones_do_not():
    calls = []

    @per_records(kept=2)
    def double(r, *, twice=True):
        calls.append(r.value)
        return [r.value * (2 if twice else 1)]   # a new object each call

    a, b = Record(3), Record(3)
    assert a == b and a is not b
    first = double(a)
    assert double(a) is first                      # made once
    assert double(b) == first and double(b) is not first  # equal, not the same: made again
    assert double(a, twice=False) == [3]           # another option: made again
    assert calls == [3, 3, 3]
    double(Record(5))                               # only the 2 latest are kept
    assert double(a) is not first and calls == [3, 3, 3, 5, 3]


def test_an_error_is_raised_again():
    calls = []

    @per_records()
    def fail(r):
        calls.append(r)
        raise ValueError("no")

    r = Record(1)
    for _ in range(2):
        with pytest.raises(ValueError):
            fail(r)
    assert len(calls) == 2
