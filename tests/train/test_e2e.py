"""End to end on CPU: `claw-grpo --preset test` — SmolLM2-135M, the react harness as a real process in a
local sandbox, real rollouts through the real proxy, an SFT step on replayed reference solutions and one
GRPO step — then resume from the run directory. ~1-3 minutes on 2 cores: marked slow."""

from __future__ import annotations

import json

import pytest
from testdeps import smollm2_tokenizer

pytestmark = [pytest.mark.slow, pytest.mark.heavy(minutes=5)]  # 2.2 min here, ~1.5x in CI


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    smollm2_tokenizer()
    from openforge.runner.forge import run

    d = tmp_path_factory.mktemp("run") / "claw-grpo"
    summary = run(recipe="claw-grpo", preset="test", overrides=[f"run_dir={d}"], progress=False)
    assert summary["run_dir"] == str(d)
    return d


def test_run_directory(run_dir):
    from openforge.config import load_config
    from openforge.store import TrajectoryStore

    cfg = load_config(run_dir / "config.yaml")  # the resolved config reproduces the run
    assert cfg.recipe == "claw-grpo" and cfg.rollout.group_size == 2
    lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    sft, grpo = lines[0], lines[1]
    assert sft["phase"] == "sft" and sft["trajectories"] >= 1 and sft["teacher_pass_rate"] > 0
    assert sft["steps"] == 1 and sft["loss_first"] > 0
    assert grpo["step"] == 1 and grpo["rollouts"] + sum(v for k, v in grpo["statuses"].items()
                                                        if k not in ("success", "policy_failure", "timeout")) >= 1
    for key in ("reward_mean", "reward_std", "pass_rate", "statuses", "generated_tokens", "step_time_s"):
        assert key in grpo
    assert grpo["generated_tokens"] > 0  # the policy really generated through the proxy
    assert grpo["train/trained_tokens"] > 0 and grpo["train/behaviour_logprob_gap"] < 1e-3  # fp32 consistency
    assert (run_dir / "checkpoints" / "step-1" / "model.safetensors").is_file()
    assert (run_dir / "sft" / "teacher.jsonl").is_file()
    with TrajectoryStore(run_dir / "trajectories.db") as store:
        trajs = list(store.trajectories())
    policy = [t for t in trajs if t.calls and any(lp != 0.0 for c in t.calls for lp in c.output_logprobs)]
    assert policy, "no rollout of the sampled policy was recorded"
    for t in policy:
        t.validate_segments()


def test_resume_from_checkpoint(run_dir):
    from openforge.runner.forge import run

    summary = run(recipe="claw-grpo", preset="test", overrides=[f"run_dir={run_dir}"], progress=False)
    assert summary["steps"] == []  # step 1 was already done: resumed, nothing left
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    assert len(lines) == 2
