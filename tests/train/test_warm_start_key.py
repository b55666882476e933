"""The SFT warm-start cache key: equal runs share a warm-start, different ones never do."""

from __future__ import annotations

from openforge.config import load_config
from openforge.plugins import make_environment
from openforge.recipes import recipe_config
from openforge.runner.teacher import warm_start_key


def _key(*overrides: str) -> str:
    cfg = load_config(recipe_config("claw-grpo"), preset="cpu", overrides=list(overrides))
    env = make_environment(cfg.env.name)
    return warm_start_key(cfg, env, list(env.tasks("train"))[:3])


def test_one_harness_as_a_name_or_a_list_shares_a_warm_start():
    # the transfer benchmark's `harness.name=[react]` re-ran a 4-12 min SFT that `react` had cached
    assert _key("harness.name=[react]") == _key() == _key("harness.name={react: 1}")


def test_anything_that_changes_the_warm_start_changes_the_key():
    base = _key()
    changed = [_key("harness.name=pi"), _key("harness.name=[react, pi]"), _key("harness.per_harness.react.max_turns=6"),
               _key("sft.epochs=3"), _key("seed=1"), _key("rollout.max_tokens=100"),
               _key("trainer.cpu.lora.rank=8"), _key("trainer.cpu.lora.rank=16")]
    assert base not in changed and len(set(changed)) == len(changed)
