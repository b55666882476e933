"""The paired interval behind GRPO's own held-out share (``openforge.analysis.ci``), checked against a
worked example done by hand, and the pairing of two held-out points by task and trial."""

from __future__ import annotations

import pytest

from openforge.analysis.ci import diff_interval, paired_diff_interval, paired_table, wilson_interval
from openforge.analysis.heldout import compare_points, shares


def test_the_worked_example():
    """20 pairs: both succeed 2, only the first arm 1, only the second 7, neither 10.

    p1 = 3/20 = 0.15, p2 = 9/20 = 0.45, difference 0.30. Wilson 95 %: 3/20 → (0.05237, 0.36042),
    9/20 → (0.25820, 0.65791). ad − bc = 20 − 7 = 13 > 0, corrected by n/2 = 10 → 3;
    phi = 3 / sqrt(3·17·9·11) = 3 / 71.057 = 0.04222.
    low  = 0.30 − sqrt(0.19180² − 2·0.04222·0.19180·0.21042 + 0.21042²) = 0.30 − sqrt(0.077655) = 0.02133
    high = 0.30 + sqrt(0.20791² − 2·0.04222·0.20791·0.09763 + 0.09763²) = 0.30 + sqrt(0.051046) = 0.52593
    """
    assert wilson_interval(3, 20) == pytest.approx((0.05237, 0.36042), abs=5e-5)
    assert wilson_interval(9, 20) == pytest.approx((0.25820, 0.65791), abs=5e-5)
    d, lo, hi = paired_diff_interval(2, 1, 7, 10)
    assert (d, lo, hi) == pytest.approx((0.30, 0.02133, 0.52593), abs=5e-5)


def test_pairing_narrows_the_interval_only_when_the_arms_agree():
    """Uncorrelated pairs (phi = 0) give the unpaired interval; arms that succeed and fail on the same
    trials give a narrower one; the table counts each kind of pair."""
    assert paired_table([1, 1, 0, 0, 1], [1, 0, 1, 0, 1]) == (2, 1, 1, 1)
    unpaired = diff_interval(10, 20, 10, 20)
    assert paired_diff_interval(5, 5, 5, 5) == pytest.approx(unpaired)  # ad − bc = 0
    _, lo, hi = paired_diff_interval(10, 0, 0, 10)  # the same trials succeed in both arms
    assert 0 > lo > unpaired[1] and 0 < hi < unpaired[2]
    assert paired_diff_interval(0, 0, 0, 0) == (0.0, -1.0, 1.0)  # nothing paired: nothing known
    with pytest.raises(ValueError):
        paired_table([1], [1, 0])


def _point(outcomes: dict[str, list[int]]) -> dict:
    flat = [o for v in outcomes.values() for o in v]
    return {"per_harness": {"react": {"successes": sum(flat), "trials": len(flat), "outcomes": outcomes}}}


def test_points_pair_by_task_and_trial_and_each_stage_gets_its_share():
    """Trial j of a task pairs with trial j of the same task; a trial one point lost to infrastructure
    (shorter list) leaves its partner unpaired; SFT's share and GRPO's own share are separate rows."""
    before = _point({"a": [0, 0, 0], "b": [0, 0, 0]})
    warm = _point({"a": [1, 0, 0], "b": [0, 0]})  # one trial of b lost
    after = _point({"a": [1, 1, 0], "b": [1, 0, 0]})
    d = compare_points(warm, after)["react"]
    assert d["paired"] and d["pairs"] == 5 and d["delta"] == pytest.approx(0.4)  # (a: 1→1, 0→1, 0→0; b: 0→1, 0→0)
    s = shares({"before": before, "warmstart": warm, "after": after})
    assert s["sft"]["react"]["delta"] == pytest.approx(0.2) and s["sft"]["react"]["pairs"] == 5
    assert s["total"]["react"]["delta"] == pytest.approx(3 / 6)
    # without a warm-start point GRPO's share is measured from the untrained model
    assert shares({"before": before, "after": after})["grpo"] == s["total"]


def test_points_without_outcomes_fall_back_to_the_unpaired_interval():
    old = {"per_harness": {"react": {"successes": 1, "trials": 10}}}
    d = compare_points(old, {"per_harness": {"react": {"successes": 5, "trials": 10}}})["react"]
    assert d["paired"] is False and d["ci95"] == pytest.approx(list(diff_interval(1, 10, 5, 10)[1:]), abs=1e-4)


def test_the_report_shows_the_three_points_and_both_shares(tmp_path):
    import json

    from openforge.analysis.report import _heldout_rows, build_report
    from openforge.analysis.rundir import RunData

    for name, outcomes in (("before", {"a": [0, 0]}), ("warmstart", {"a": [1, 0]}), ("after", {"a": [1, 1]})):
        flat = outcomes["a"]
        d = tmp_path / "heldout" / name
        d.mkdir(parents=True)
        (d / "heldout.json").write_text(json.dumps({"point": name, "per_harness": {"react": {
            "successes": sum(flat), "trials": 2, "pass_rate": sum(flat) / 2, "ci95": [0, 1], "outcomes": outcomes}}}))
    run = RunData(path=tmp_path, name="run")
    [row] = _heldout_rows(run)
    assert row["before"].startswith("0/2") and row["warmstart"].startswith("1/2") and row["after"].startswith("2/2")
    assert row["sft"].startswith("+50 pts") and row["grpo"].startswith("+50 pts") and "within noise" in row["grpo"]
    html = build_report(run)
    assert "GRPO: final − warm-start" in html and row["grpo"] in html
