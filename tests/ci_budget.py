"""A pytest plugin that keeps CI inside its time: with ``OPENFORGE_TEST_DEADLINE`` set (epoch seconds;
scripts/test.sh sets it from CI's budget), a test marked ``heavy(minutes=N)`` that would not end before it
is skipped, saying how much time is left and how much it needs, instead of running the job past its limit.
Without the variable nothing is skipped."""

from __future__ import annotations

import os
import time

import pytest

#: minutes a ``heavy`` test is assumed to take when its mark does not say (``heavy(minutes=N)``)
HEAVY_MINUTES = 15


def pytest_runtest_setup(item: pytest.Item) -> None:
    deadline = os.environ.get("OPENFORGE_TEST_DEADLINE")
    mark = item.get_closest_marker("heavy")
    if not deadline or mark is None:
        return
    need = 60 * float(mark.kwargs.get("minutes", HEAVY_MINUTES))
    left = float(deadline) - time.time()
    if need > left:
        pytest.skip(f"out of CI time: {max(left, 0):.0f} s left before OPENFORGE_TEST_DEADLINE, this heavy test "
                    f"takes about {need:.0f} s on 2 cores")
