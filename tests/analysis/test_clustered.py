"""The clustered interval of the learning benchmark (:mod:`openforge.analysis.clustered`), checked against
answers derived without its resampling code: the exact variance of the pigeonhole bootstrap (closed
form, and by enumerating every resample of a 2 × 2 table), the coverage of its interval on simulated
data whose sampling variance is known, and the per-trial interval it replaces being narrower on
clustered samples."""

from __future__ import annotations

import itertools
import random

import pytest

from openforge.analysis.clustered import crossed_bootstrap, differences, naive_trial_interval


def exact_bootstrap_variance(d: list[list[float]]) -> float:
    """Var of the mean under resampling R rows and C columns independently with replacement.

    The row counts W are multinomial(R, 1/R): E[W_i W_k] = 1 + δ_ik − 1/R (columns alike with C), so
    E[mean*²] = ((1−1/R)(1−1/C) T² + (1−1/R) Σ_j c_j² + (1−1/C) Σ_i r_i² + Σ x²) / (RC)², with T the
    total, r_i the row totals and c_j the column totals; minus mean² (E[mean*] = mean)."""
    r_n, c_n = len(d), len(d[0])
    total = sum(map(sum, d))
    rows = sum(sum(row) ** 2 for row in d)
    cols = sum(sum(d[i][j] for i in range(r_n)) ** 2 for j in range(c_n))
    sq = sum(x * x for row in d for x in row)
    second = ((1 - 1 / r_n) * (1 - 1 / c_n) * total ** 2 + (1 - 1 / r_n) * cols + (1 - 1 / c_n) * rows + sq)
    return second / (r_n * c_n) ** 2 - (total / (r_n * c_n)) ** 2


def test_the_closed_form_matches_every_resample_of_a_two_by_two_table():
    """2 seeds × 2 instances, d = [[1, 0], [0, 0]]: mean* = W0·V0 / 4 (W0, V0: how often seed 0 and
    instance 0 are drawn, each 2, 1, 1, 0 over the 4 ordered draws). By hand: 1 once, 1/2 four times,
    1/4 four times, 0 seven times; E = 4/16 = 1/4, E[x²] = (1 + 4/4 + 4/16) / 16 = 9/64, Var = 5/64."""
    d = [[1.0, 0.0], [0.0, 0.0]]
    means = [sum(d[r][c] for r in rows for c in cols) / 4
             for rows in itertools.product(range(2), repeat=2) for cols in itertools.product(range(2), repeat=2)]
    m = sum(means) / 16
    var = sum((x - m) ** 2 for x in means) / 16
    # by hand: mean* is 1 when both picks are (seed 0, instance 0): 1/16; 1/2 when one margin is doubled
    # on it and the other split: 2 × (1/4 × 1/2) = 1/4; 1/4 when both margins are split: 1/4; else 0
    assert sorted(set(means)) == [0.0, 0.25, 0.5, 1.0]
    assert (means.count(1.0), means.count(0.5), means.count(0.25)) == (1, 4, 4)
    assert m == pytest.approx(0.25)
    assert var == pytest.approx(5 / 64)
    assert exact_bootstrap_variance(d) == pytest.approx(var)


def test_the_bootstrap_variance_is_the_exact_one_on_a_clustered_table():
    rng = random.Random(3)
    inst = [rng.choice([-0.6, 0.0, 0.0, 0.5]) for _ in range(12)]  # instance effects: most of the spread
    d = [[0.1 + s_eff + u + rng.uniform(-0.1, 0.1) for u in inst] for s_eff in (-0.15, 0.0, 0.2)]
    iv = crossed_bootstrap(d, draws=20000, seed=1)
    assert iv.effect == pytest.approx(sum(map(sum, d)) / 36)
    assert iv.se ** 2 == pytest.approx(exact_bootstrap_variance(d), rel=0.05)
    assert iv.lo < iv.effect < iv.hi and (iv.instances, iv.seeds) == (12, 3)


def test_coverage_on_data_with_a_known_sampling_distribution():
    """d[s][i] = 0.1 + u_i + v_s + e_si (u ~ N(0, .3²), v ~ N(0, .1²), e ~ N(0, .2²)): the mean's true
    sd is sqrt(.09/I + .01/S + .04/(IS)). Over 60 datasets the crossed interval covers 0.1 about 95 % of
    the time; holding the seeds fixed covers less (it ignores the runs' own variance)."""
    rng = random.Random(11)
    n_i, n_s, sets = 20, 6, 60
    covered = fixed = 0
    ses = []
    for k in range(sets):
        u = [rng.gauss(0, 0.3) for _ in range(n_i)]
        v = [rng.gauss(0, 0.1) for _ in range(n_s)]
        d = [[0.1 + ui + vs + rng.gauss(0, 0.2) for ui in u] for vs in v]
        iv = crossed_bootstrap(d, draws=300, seed=k)
        fx = crossed_bootstrap(d, draws=300, seed=k, resample_seeds=False)
        covered += iv.lo <= 0.1 <= iv.hi
        fixed += fx.lo <= 0.1 <= fx.hi
        ses.append(iv.se)
    true_sd = (0.09 / n_i + 0.01 / n_s + 0.04 / (n_i * n_s)) ** 0.5
    assert covered >= 0.88 * sets
    assert fixed < covered
    assert sum(ses) / sets == pytest.approx(true_sd, rel=0.25)


def _clustered_outcomes(seed: int = 5):
    """40 instances × 3 trials; every trial of an instance has the same outcome (the instance decides),
    GRPO flips a few instances per seed."""
    rng = random.Random(seed)
    base = {f"t{i}": [int(rng.random() < 0.4)] * 3 for i in range(40)}
    arm = {}
    for s in range(3):
        arm[s] = {i: ([1] * 3 if rng.random() < 0.2 else list(o)) for i, o in base.items()}
    return base, arm


def test_the_per_trial_interval_is_narrower_than_the_clustered_one():
    base, arm = _clustered_outcomes()
    seeds, inst, d = differences(arm, base, shared_base=True)
    crossed = crossed_bootstrap(d, draws=3000)
    naive = naive_trial_interval(arm, base, shared_base=True)
    per_seed = naive_trial_interval(arm, {s: base for s in arm}, shared_base=False)
    assert (per_seed.lo, per_seed.hi) == (naive.lo, naive.hi)
    assert naive.effect == pytest.approx(crossed.effect)  # the same pairs, the same mean
    assert (naive.hi - naive.lo) < 0.75 * (crossed.hi - crossed.lo)
    assert (seeds, len(inst)) == ([0, 1, 2], 40)


def test_differences_pair_instances_and_refuse_what_cannot_pair():
    arm = {0: {"a": [1, 1, 0], "b": [0], "c": [1]}, 1: {"a": [1], "b": [1]}}
    seeds, inst, d = differences(arm, {"a": [0, 0, 1], "b": [0, 1]}, shared_base=True)
    assert (seeds, inst) == ([0, 1], ["a", "b"])  # c: not measured for seed 1 nor in the baseline
    assert [x for row in d for x in row] == pytest.approx([2 / 3 - 1 / 3, -0.5, 1 - 1 / 3, 0.5])
    _, _, d2 = differences(arm, {0: {"a": [1], "b": [1]}, 1: {"a": [0], "b": [0]}}, shared_base=False)
    assert [x for row in d2 for x in row] == pytest.approx([-1 / 3, -1.0, 1.0, 1.0])
    with pytest.raises(ValueError, match="no baseline point"):
        differences(arm, {0: {"a": [1]}}, shared_base=False)
    with pytest.raises(ValueError, match="share no held-out instance"):
        differences(arm, {"z": [1]}, shared_base=True)
    with pytest.raises(ValueError, match="no trial outcome"):
        differences({0: {"a": []}}, {"a": [1]}, shared_base=True)
    with pytest.raises(ValueError, match="seeds × instances"):
        crossed_bootstrap([[0.1, 0.2], [0.3]])
