"""The run verdict (:func:`diagnose`) on constructed runs, one per verdict, and the per-step group keys."""

from __future__ import annotations

import pytest

from openforge.analysis import diagnose as dg
from openforge.analysis.diagnose import DIAG_KEYS, diagnose, step_diagnostics
from openforge.core.trajectory import Trajectory, TrajectoryGroup
from openforge.core.types import RolloutStatus


def _step(i: int, **over) -> dict:
    """A healthy step line: mixed groups, a gradient, some clipping, the policy moved."""
    line = {"step": i, "gradient_step": True, "diag/tied_share": 0.25, "diag/pass_spread": 0.3,
            "diag/entropy_est": 0.8, "diag/kl_step": 2e-3, "diag/clip_frac": 0.02, "diag/grad_norm": 0.7,
            "diag/trained_tokens": 900.0}
    line.update(over)
    return line


def _run(n: int = 6, **over) -> list[dict]:
    return [_step(i + 1, **over) for i in range(n)]


def test_healthy_run_has_a_signal():
    assert diagnose(_run()) == "learning signal present"


def test_no_steps():
    assert diagnose([]).startswith("no GRPO steps")


def test_no_gradient_steps():
    run = _run(gradient_step=False, **{"diag/tied_share": 1.0, "diag/trained_tokens": 0.0, "diag/grad_norm": 0.0})
    v = diagnose(run)
    assert v.startswith("no gradient steps in 6 step(s) (100% of groups tied)")


def test_tied_groups_name_the_share_and_the_fix():
    v = diagnose(_run(**{"diag/tied_share": 0.92}))
    assert v.startswith("92% of groups tied: raise group_size or change the task mix")


def test_tied_just_below_threshold_is_not_the_verdict():
    assert diagnose(_run(**{"diag/tied_share": dg.TIED_HIGH - 0.01})) == "learning signal present"


def test_vanishing_gradient():
    assert diagnose(_run(**{"diag/grad_norm": 1e-9})).startswith("gradient norm ~0")


def test_clip_fraction_high():
    v = diagnose(_run(**{"diag/clip_frac": 0.35}))
    assert v.startswith("clip fraction high (35% of tokens clipped)") and "learning rate too high" in v


def test_kl_near_zero():
    v = diagnose(_run(**{"diag/kl_step": 1e-8}))
    assert v.startswith("KL near 0") and "learning rate too low" in v


def test_entropy_collapse():
    assert diagnose(_run(**{"diag/entropy_est": 0.001})).startswith("entropy near 0")


def test_idle_steps_are_not_judged_for_the_trainer_metrics():
    # the trained steps are healthy; the idle ones carry no trainer metrics (None) and a 0 gradient
    idle = _step(9, gradient_step=False, **{"diag/grad_norm": 0.0, "diag/kl_step": None, "diag/clip_frac": None,
                                            "diag/entropy_est": None})
    run = [*_run(3), idle]
    assert diagnose(run) == "learning signal present"


def test_older_run_without_diag_keys_is_not_misjudged():
    assert diagnose([{"step": 1, "gradient_step": True}]) == "learning signal present"


def _group(outcomes: list[tuple[float, bool]]) -> TrajectoryGroup:
    trajs = [Trajectory(rollout_id=f"r{i}", task_id="t", reward=r,
                        status=RolloutStatus.SUCCESS if ok else RolloutStatus.POLICY_FAILURE)
             for i, (r, ok) in enumerate(outcomes)]
    return TrajectoryGroup(task_id="t", trajectories=trajs)


def test_step_diagnostics_group_keys():
    groups = [_group([(1.0, True), (1.0, True)]),        # tied, pass 1
              _group([(0.0, False), (0.0, False)]),      # tied, pass 0
              _group([(1.0, True), (0.0, False)]),       # mixed, pass 0.5
              _group([(0.5, False), (0.0, False)])]      # mixed (partial reward), pass 0
    train = {"trained_tokens": 12.0, "grad_norm": 0.5, "entropy_est": 1.25, "kl_step": 3e-3, "pg_clipfrac": 0.1}
    d = step_diagnostics(groups, train)
    assert set(d) == set(DIAG_KEYS)
    assert d["diag/tied_share"] == 0.5
    assert d["diag/pass_spread"] == pytest.approx(0.4146, abs=1e-4)  # pstdev(1, 0, .5, 0)
    assert d["diag/grad_norm"] == 0.5 and d["diag/trained_tokens"] == 12.0
    assert (d["diag/entropy_est"], d["diag/kl_step"], d["diag/clip_frac"]) == (1.25, 3e-3, 0.1)


def test_step_diagnostics_without_a_gradient_step():
    d = step_diagnostics([_group([(0.0, False), (0.0, False)])], {"trained_tokens": 0.0})
    assert d["diag/tied_share"] == 1.0 and d["diag/grad_norm"] == 0.0 and d["diag/trained_tokens"] == 0.0
    assert d["diag/entropy_est"] is None and d["diag/kl_step"] is None and d["diag/clip_frac"] is None
    assert step_diagnostics([], {"trained_tokens": 0.0})["diag/tied_share"] is None
