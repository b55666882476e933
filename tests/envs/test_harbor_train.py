"""One ``test``-preset GRPO step from the CLI on a folder of Harbor tasks (``harbor_fixtures``): the SFT
warm-start replays the oracles (``solution/solve.sh``) as the reference teacher, then the policy
(SmolLM2-135M, react harness) rolls out in real sandboxes and the trainer takes its step. ~5 minutes on
2 shared cores: heavy."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from testdeps import smollm2_tokenizer

from .harbor_fixtures import make_harbor_folder

pytestmark = [pytest.mark.slow, pytest.mark.heavy(minutes=8)]
ROOT = Path(__file__).resolve().parents[2]


def test_grpo_test_preset_on_a_harbor_folder_from_the_cli(tmp_path):
    smollm2_tokenizer()
    folder = make_harbor_folder(tmp_path / "ds", silent=False)  # the unsupported one stays: left out with a warning
    run_dir = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    p = subprocess.run([sys.executable, "-m", "openforge.cli.main", "recipe", "claw-grpo", "--preset", "test",
                        f"env.name={folder}", "env.subset=null", f"run_dir={run_dir}"],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=1500)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert "cuda-base left out" in p.stdout + p.stderr
    sft, grpo = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert sft["phase"] == "sft" and sft["teacher_pass_rate"] == 1.0 and sft["loss_first"] > 0  # both oracles succeed
    assert grpo["step"] == 1 and set(grpo["statuses"]) <= {"success", "policy_failure", "timeout"}  # no env_error
    assert grpo["rollouts"] >= 1 and grpo["train/trained_tokens"] > 0
    assert (run_dir / "checkpoints" / "step-1" / "model.safetensors").is_file()
