"""The CI time budget (tests/ci_budget.py): a heavy test that cannot end before the deadline is skipped."""

from __future__ import annotations

import time

pytest_plugins = ["pytester"]

TESTS = """
import time

import pytest

@pytest.mark.heavy(minutes=0)
@pytest.mark.timeout(600)
def test_overruns():
    time.sleep(float(__import__("os").environ.get("SLEEP_S", "0")))

@pytest.mark.heavy(minutes=10)
def test_ten_minutes():
    pass

@pytest.mark.heavy
def test_unsized():
    pass

def test_light():
    pass
"""


def _run(pytester, monkeypatch, deadline: float | None, sleep_s: float = 0):
    pytester.makeini("[pytest]\nmarkers =\n    heavy: heavy\n")
    monkeypatch.setenv("SLEEP_S", str(sleep_s))
    pytester.makepyfile(TESTS)
    if deadline is None:
        monkeypatch.delenv("OPENFORGE_TEST_DEADLINE", raising=False)
    else:
        monkeypatch.setenv("OPENFORGE_TEST_DEADLINE", str(deadline))
    return pytester.runpytest("-p", "ci_budget", "-rs")


def test_heavy_tests_that_do_not_fit_are_skipped_with_the_time_left(pytester, monkeypatch):
    r = _run(pytester, monkeypatch, time.time() + 5 * 60)
    r.assert_outcomes(passed=2, skipped=2)
    r.stdout.fnmatch_lines(["*out of CI time: * s left*takes about 600 s*"])


def test_a_heavy_test_runs_when_it_fits_and_an_unsized_one_counts_fifteen_minutes(pytester, monkeypatch):
    _run(pytester, monkeypatch, time.time() + 12 * 60).assert_outcomes(passed=3, skipped=1)
    _run(pytester, monkeypatch, time.time() + 16 * 60).assert_outcomes(passed=4)


def test_a_heavy_test_that_overruns_is_stopped_soon_after_the_deadline(pytester, monkeypatch):
    monkeypatch.setenv("OPENFORGE_TEST_GRACE_S", "2")
    t0 = time.monotonic()
    r = _run(pytester, monkeypatch, time.time() + 1, sleep_s=60)  # its own mark says 600 s
    assert time.monotonic() - t0 < 30
    r.assert_outcomes(failed=1, skipped=2, passed=1)
    r.stdout.fnmatch_lines(["*Timeout*"])


def test_without_a_deadline_nothing_is_skipped(pytester, monkeypatch):
    _run(pytester, monkeypatch, None).assert_outcomes(passed=4)
