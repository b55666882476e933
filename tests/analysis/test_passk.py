"""pass@k / pass^k estimators against brute force, and the eval summary."""

from __future__ import annotations

from itertools import combinations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from openforge.analysis.passk import pass_at_k, pass_hat_k, summarize_eval
from openforge.core.task import Task

from .factory import traj


def _brute(n: int, c: int, k: int) -> tuple[float, float]:
    outcomes = [True] * c + [False] * (n - c)
    subsets = list(combinations(range(n), k))
    any_ok = sum(any(outcomes[i] for i in s) for s in subsets) / len(subsets)
    all_ok = sum(all(outcomes[i] for i in s) for s in subsets) / len(subsets)
    return any_ok, all_ok


@given(st.integers(1, 9).flatmap(lambda n: st.tuples(st.just(n), st.integers(0, n), st.integers(1, n))))
def test_estimators_equal_the_average_over_all_k_subsets(nck: tuple[int, int, int]) -> None:
    n, c, k = nck
    any_ok, all_ok = _brute(n, c, k)
    assert pass_at_k(n, c, k) == pytest.approx(any_ok)
    assert pass_hat_k(n, c, k) == pytest.approx(all_ok)


def test_known_values() -> None:
    assert pass_at_k(3, 1, 3) == 1.0 and pass_hat_k(3, 1, 3) == 0.0
    assert pass_at_k(4, 2, 2) == pytest.approx(5 / 6) and pass_hat_k(4, 2, 2) == pytest.approx(1 / 6)
    assert pass_at_k(5, 2, 1) == pytest.approx(0.4) == pass_hat_k(5, 2, 1)


def test_bad_arguments_are_explained() -> None:
    with pytest.raises(ValueError, match="at least k=3"):
        pass_at_k(2, 1, 3)
    with pytest.raises(ValueError, match="between 0 and trials"):
        pass_hat_k(2, 3, 1)
    with pytest.raises(ValueError, match="k must be"):
        pass_at_k(2, 1, 0)


def _t(task: str, i: int, status: str, reward: float | None = None):
    return traj([("bash", {"command": "ls"}, "ok")], task_id=task, rollout_id=f"{task}-{i}", status=status,
                reward=reward)


def test_summary_per_task_category_and_infra_failures() -> None:
    tasks = {
        "a": Task(id="a", instruction="x", category="files"),
        "b": Task(id="b", instruction="x", category="files"),
        "c": Task(id="c", instruction="x", category="web"),
    }
    trajs = [
        _t("a", 0, "success"), _t("a", 1, "success"), _t("a", 2, "policy_failure"),
        _t("b", 0, "policy_failure"), _t("b", 1, "timeout"), _t("b", 2, "policy_failure"),
        # c: one infra failure -> only 2 valid trials < k=3: not scored for pass@3
        _t("c", 0, "success"), _t("c", 1, "infra_error"), _t("c", 2, "success"),
    ]
    s = summarize_eval(trajs, k=3, tasks=tasks)
    by = {r.task_id: r for r in s.per_task}
    assert (by["a"].trials, by["a"].successes, by["a"].pass_at_k, by["a"].pass_hat_k) == (3, 2, 1.0, 0.0)
    assert (by["b"].pass_at_k, by["b"].pass_hat_k) == (0.0, 0.0)
    assert by["c"].trials == 2 and by["c"].infra_failures == 1 and by["c"].pass_at_k is None
    assert s.scored_tasks == 2 and s.pass_at_k == 0.5 and s.pass_hat_k == 0.0
    assert s.pass_at_1 == pytest.approx((2 / 3 + 0 + 1) / 3)
    assert s.mean_reward == pytest.approx((2 / 3 + 0 + 1) / 3)
    assert s.statuses == {"success": 4, "policy_failure": 3, "timeout": 1, "infra_error": 1}
    assert (s.trials, s.valid_trials) == (9, 8)
    cats = {c.category: c for c in s.categories}
    assert cats["files"].tasks == 2 and cats["files"].pass_at_k == 0.5
    assert cats["web"].pass_at_k is None and cats["web"].pass_at_1 == 1.0
    assert cats["files"].statuses == {"success": 2, "policy_failure": 3, "timeout": 1}
    assert cats["web"].statuses == {"success": 2, "infra_error": 1}
    assert s.behaviour is not None and s.behaviour.rollouts == 8


def test_summary_json_round_trip() -> None:
    s = summarize_eval([_t("a", 0, "success")], k=1)
    assert type(s).model_validate_json(s.model_dump_json()) == s
    assert s.pass_at_k == 1.0 and s.categories[0].category == "general"
