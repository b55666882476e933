"""A pytest plugin that keeps CI inside its time: with ``OPENFORGE_TEST_DEADLINE`` set (epoch seconds;
scripts/test.sh sets it from CI's budget), a test marked ``heavy(minutes=N)`` that would not end before it
is skipped, saying how much time is left and how much it needs, instead of running the job past its limit;
one that starts but overruns its minutes is failed by a timeout :data:`GRACE_S` after the deadline (so the
job still ends, with its report, before CI's own limit). Without the variable nothing changes."""

from __future__ import annotations

import os
import time

import pytest

#: minutes a ``heavy`` test is assumed to take when its mark does not say (``heavy(minutes=N)``)
HEAVY_MINUTES = 15
#: how long after the deadline a heavy test that overran is stopped (scripts/test.sh: 4800 s + 300 < 90 min;
#: ``OPENFORGE_TEST_GRACE_S`` overrides it)
GRACE_S = 300


def _left(item: pytest.Item) -> float | None:
    deadline = os.environ.get("OPENFORGE_TEST_DEADLINE")
    if not deadline or item.get_closest_marker("heavy") is None:
        return None
    return float(deadline) - time.time()


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    left = _left(item)
    if left is not None:  # before pytest-timeout reads the closest timeout mark (or the ini's)
        own = item.get_closest_marker("timeout")
        timeout = float(own.args[0]) if own is not None and own.args else float(item.config.getini("timeout") or 0)
        cap = max(1, int(left + float(os.environ.get("OPENFORGE_TEST_GRACE_S", GRACE_S))))
        if not timeout or timeout > cap:
            item.add_marker(pytest.mark.timeout(cap), append=False)
    yield


def pytest_runtest_setup(item: pytest.Item) -> None:
    left = _left(item)
    if left is None:
        return
    need = 60 * float(item.get_closest_marker("heavy").kwargs.get("minutes", HEAVY_MINUTES))
    if need > left:
        pytest.skip(f"out of CI time: {max(left, 0):.0f} s left before OPENFORGE_TEST_DEADLINE, this heavy test "
                    f"takes about {need:.0f} s on 2 cores")
