"""A harness defined only by a spec file trains: `forge recipe claw-grpo --preset test
harness.name=tests/harnesses/data/minichat/minichat.yaml` end to end. minichat is a real CLI (a
Python script speaking streamed Chat Completions through the `openai` SDK, one bash tool) that
openforge knows nothing about but what its YAML says: SFT teacher replayed through it, one GRPO step
of SmolLM2-135M rollouts through it, a checkpoint. A few minutes on 2 cores: heavy."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from testdeps import smollm2_tokenizer
from typer.testing import CliRunner

pytestmark = [pytest.mark.slow, pytest.mark.heavy(minutes=6), pytest.mark.timeout(3600)]

SPEC = Path(__file__).resolve().parents[1] / "harnesses" / "data" / "minichat" / "minichat.yaml"


def test_recipe_through_a_spec_file_harness(tmp_path, monkeypatch):
    from openforge.cli.main import app
    from openforge.store import TrajectoryStore

    smollm2_tokenizer()
    monkeypatch.setenv("OPENFORGE_HARNESS_DIR", str(tmp_path / "harnesses"))  # nothing installed: the spec suffices
    run_dir = tmp_path / "run"
    res = CliRunner().invoke(app, ["recipe", "claw-grpo", "--preset", "test", "--quiet", "rollout.timeout_s=900",
                                   f"harness.name={SPEC}", f"run_dir={run_dir}", "trainer.cpu.max_resample_rounds=0"])
    assert res.exit_code == 0, f"{res.output}\n{res.exception!r}"
    sft, grpo = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()][:2]
    assert sft["phase"] == "sft" and sft["teacher_pass_rate"] > 0 and sft["trained_tokens"] > 0  # teacher via minichat
    assert grpo["step"] == 1 and grpo["generated_tokens"] > 0 and grpo["train/trained_tokens"] > 0
    assert grpo["harness_drift"] == 0
    with TrajectoryStore(run_dir / "trajectories.db") as store:
        trajs = list(store.trajectories())
    assert trajs and {t.harness for t in trajs} == {"minichat"}
    policy = [t for t in trajs if t.calls and any(lp != 0.0 for c in t.calls for lp in c.output_logprobs)]
    assert policy, "no rollout of the sampled policy went through minichat"
    assert all(c.api == "chat" and c.request.get("stream") for t in policy for c in t.calls)
    for t in policy:
        t.validate_segments()
    assert (run_dir / "checkpoints" / "step-1" / "model.safetensors").is_file()
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["harness_drift"] == 0
