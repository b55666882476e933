"""Multi-harness runs: ``harness.name`` as a list or weighted mix, validated like every other config error;
each group's harness chosen deterministically per slot and seed; ``run_groups`` runs each group through
its own harness (real react processes, real proxy, real sandboxes)."""

from __future__ import annotations

from collections import Counter

import pytest

from openforge.config import load_config
from openforge.core.errors import ConfigError
from openforge.harnesses.prompt_fit import check_prompt_fits
from openforge.recipes import load_recipe_config
from openforge.runner.harness_mix import GroupHarnesses, HarnessMix, harness_breakdown


def problems(*overrides: str, preset: str | None = None) -> list[str]:
    with pytest.raises(ConfigError) as e:
        load_recipe_config("claw-grpo", preset=preset, overrides=list(overrides))
    return e.value.problems


# -- selection ------------------------------------------------------------------------------------


def test_a_weighted_mix_holds_exactly_over_every_block():
    mix = HarnessMix({"react": 2, "pi": 1}, seed=0)
    picks = mix.assign(range(300))
    for b in range(100):  # every block of sum(weights) slots holds each harness weight times
        assert Counter(picks[3 * b : 3 * b + 3]) == {"react": 2, "pi": 1}
    assert Counter(HarnessMix({"react": 1, "pi": 1}).assign(range(4 * 7))) == {"react": 14, "pi": 14}


def test_the_pick_is_a_pure_function_of_slot_and_seed():
    a, b = HarnessMix({"react": 1, "pi": 1}, seed=3), HarnessMix({"react": 1, "pi": 1}, seed=3)
    assert a.assign(range(64)) == b.assign(range(64))  # a rerun or a resumed run picks the same
    assert [a.pick(s) for s in (40, 7, 40)] == [a.pick(40), a.pick(7), a.pick(40)]  # no hidden state
    assert a.assign(range(64)) != HarnessMix({"react": 1, "pi": 1}, seed=4).assign(range(64))
    assert set(HarnessMix({"react": 1}).assign(range(10))) == {"react"}


def test_a_task_is_not_tied_to_one_harness():
    """4 tasks cycled over slots with 2 harnesses: every task meets both (a fixed pattern would not)."""
    picks = HarnessMix({"react": 1, "pi": 1}, seed=0).assign(range(64))
    for task in range(4):
        assert {picks[s] for s in range(task, 64, 4)} == {"react", "pi"}


# -- config ---------------------------------------------------------------------------------------


def test_list_and_mix_in_the_recipe_each_harness_with_its_own_block():
    cfg = load_recipe_config("claw-grpo", overrides=["harness.name=[react, pi]"])
    assert cfg.harness.weights() == {"react": 1, "pi": 1}
    assert cfg.harness.options_for("react")["max_turns"] == 4 and cfg.harness.options_for("pi") == {}
    dumped = cfg.model_dump(mode="json")  # the resolved config keeps the blocks and reproduces the run
    assert dumped["harness"]["per_harness"]["react"]["max_turns"] == 4
    assert load_config(dumped).harness == cfg.harness
    mix = load_recipe_config("claw-grpo", preset="test", overrides=["harness.name={react: 2, pi: 1}"])
    assert mix.harness.weights() == {"react": 2, "pi": 1} and mix.harness.options_for("react")["max_turns"] == 2


def test_a_wrong_option_of_one_harness_of_a_mix_is_a_config_error():
    got = problems("harness.name=[react, pi]", "harness.per_harness.pi.max_turns=3", "rollout.group_size=1")
    assert any(p.startswith("harness.per_harness.pi.max_turns: not an option of pi") for p in got), got
    assert any(p.startswith("rollout.group_size:") for p in got)  # reported together with the others
    got = problems("harness.name=[react, pi]", "harness.options.wire_api=chat")  # common: checked for each
    assert any(p.startswith("harness.options.wire_api: not an option of react") for p in got), got
    assert any(p.startswith("harness.name.nope: unknown harness 'nope'") for p in problems("harness.name=[react, nope]"))


@pytest.mark.parametrize(("override", "expected"), [
    ("harness.name=[]", "an empty list of harnesses"),
    ("harness.name=[react, react]", "harness react given more than once"),
    ("harness.name={react: 0, pi: 1}", "name.react: weight 0 must be an integer >= 1"),
])
def test_a_malformed_mix_is_a_config_error(override, expected):
    assert any(expected in p for p in problems(override)), problems(override)


def test_veRL_takes_one_harness_and_every_harness_of_a_mix_must_fit_the_context():
    assert any("veRL back-end runs one harness per run" in p for p in problems("harness.name=[react, pi]", preset="verl"))
    with pytest.raises(ConfigError, match="codex's prompt is ~9200 tokens"):
        check_prompt_fits(load_recipe_config("claw-grpo", overrides=["harness.name=[react, codex]"]))
    assert check_prompt_fits(load_recipe_config("claw-grpo", overrides=["harness.name=[react, pi]"])).tokens == 1500


# -- run_groups: each group through its own harness --------------------------------------------------


async def test_each_group_runs_the_harness_it_was_given(rig, monkeypatch):
    pytest.importorskip("openai")
    from openforge.envs.claw import ClawEnvironment, reference_solution
    from openforge.harnesses.react import ReactHarness
    from openforge.plugins import HARNESSES
    from openforge.runner.rollout import run_groups

    class ReactB(ReactHarness):  # a second harness: react's loop under another name
        name = "react-b"

    monkeypatch.setitem(HARNESSES._refs, "react-b", ReactB)
    env = ClawEnvironment()
    ids = ["files-create-hello", "files-append-line", "files-rename"]
    script = {"tasks": {i: [{"shell": c} for c in reference_solution(i)] + [{"text": "done"}] for i in ids}}
    proxy, launcher, store = await rig(script)
    names = ["react-b", "react", "react-b"]
    factories = {"react": lambda: ReactHarness(max_turns=4), "react-b": lambda: ReactB(max_turns=4)}
    res = await run_groups([env.task(i) for i in ids], 2, 3, harness=GroupHarnesses(factories, names),
                           environment=env, launcher=launcher, proxy=proxy, store=store, progress=False)
    assert [g.task_id for g in res] == ids
    assert [{t.harness for t in g.trajectories} for g in res] == [{n} for n in names]  # one harness per group
    assert harness_breakdown([t for g in res for t in g.trajectories])["per_harness"] == {
        "react": {"rollouts": 2, "reward_mean": 1.0, "pass_rate": 1.0},
        "react-b": {"rollouts": 4, "reward_mean": 1.0, "pass_rate": 1.0}}
    assert harness_breakdown(res[1].trajectories) == {}  # one harness: the metrics line keeps its shape
