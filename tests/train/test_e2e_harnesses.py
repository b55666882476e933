"""The main job through a real CLI harness: `forge recipe claw-grpo --preset test harness.name=pi` end to
end (SmolLM2-135M, the SFT teacher replayed through the real pi CLI, one GRPO step of pi rollouts), and a
multi-harness run (react + pi, one harness per group) with the held-out before/after. Skips where pi is
not installed (scripts/test.sh installs it), fails in CI. A few minutes each on 2 cores: slow."""

from __future__ import annotations

import json

import pytest
from testdeps import missing, smollm2_tokenizer
from typer.testing import CliRunner

# ~2.5 min on an idle 2-core machine; under a load average of ~12 one SFT step alone took 18 min
pytestmark = [pytest.mark.slow, pytest.mark.heavy(minutes=11), pytest.mark.timeout(3600)]  # 4 and 6.6 min here


def _need_pi() -> None:
    from openforge.core.errors import HarnessError
    from openforge.harnesses.pi import PiHarness

    try:
        PiHarness().check_installed()
    except HarnessError as e:
        missing(f"pi is not installed here (scripts/test.sh installs it): {e}")


def _recipe(*args: str) -> str:
    from openforge.cli.main import app

    # a generous rollout budget: this checks the pipeline, not speed (on a loaded 2-core machine the
    # prefill of pi's 1.5k-token prompt alone can exceed the preset's 90 s)
    res = CliRunner().invoke(app, ["recipe", "claw-grpo", "--preset", "test", "--quiet", "rollout.timeout_s=900", *args])
    assert res.exit_code == 0, f"{res.output}\n{res.exception!r}"
    return res.output


def _lines(run_dir) -> list[dict]:
    return [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]


def _trajectories(run_dir) -> list:
    from openforge.store import TrajectoryStore

    with TrajectoryStore(run_dir / "trajectories.db") as store:
        return list(store.trajectories())


def test_recipe_through_the_real_pi_cli(tmp_path):
    _need_pi()
    smollm2_tokenizer()
    run_dir = tmp_path / "pi"
    out = _recipe("harness.name=pi", f"run_dir={run_dir}", "trainer.cpu.max_resample_rounds=0")
    assert "claw-grpo" in out and "total" in out  # the summary table
    sft, grpo = _lines(run_dir)[:2]
    assert sft["phase"] == "sft" and sft["teacher_pass_rate"] > 0 and sft["trained_tokens"] > 0  # teacher via pi
    assert grpo["step"] == 1 and grpo["generated_tokens"] > 0 and grpo["train/trained_tokens"] > 0
    trajs = _trajectories(run_dir)
    assert trajs and {t.harness for t in trajs} == {"pi"}
    policy = [t for t in trajs if t.calls and any(lp != 0.0 for c in t.calls for lp in c.output_logprobs)]
    assert policy, "no rollout of the sampled policy went through pi"
    for t in policy:
        t.validate_segments()
    assert (run_dir / "checkpoints" / "step-1" / "model.safetensors").is_file()


def test_multi_harness_run_with_heldout_before_and_after(tmp_path):
    _need_pi()
    smollm2_tokenizer()
    run_dir = tmp_path / "mix"
    out = _recipe("harness.name=[react, pi]", f"run_dir={run_dir}", "eval.heldout.enabled=true",
                  "eval.heldout.max_tasks=2", "eval.heldout.trials=1")
    sft, grpo = _lines(run_dir)[:2]
    assert sft["trajectories"] >= 2
    from openforge.analysis.rundir import load_run

    teacher = [t for t in load_run(run_dir).trajectories if t.metadata.get("phase") == "sft"]
    assert {t.harness for t in teacher} == {"react", "pi"}  # the teacher replayed through each harness
    # the step's 2 groups: one per harness (a block of the mix), with the per-harness breakdown
    assert set(grpo["per_harness"]) == {"react", "pi"}
    assert all(m["rollouts"] % 2 == 0 for m in grpo["per_harness"].values())  # whole groups of 2
    assert "per harness" in out
    # held-out: untrained, SFT warm-start and final, each task × trial through each harness, as forge eval dirs
    summary = json.loads((run_dir / "summary.json").read_text())
    held = summary["heldout"]
    assert held["tasks"] == ["files-create-bye", "files-append-item"] and held["trials"] == 1
    for point in ("before", "warmstart", "after"):
        assert set(held[point]["per_harness"]) == {"react", "pi"}
        assert all(m["trials"] + m["infra_failures"] == 2 for m in held[point]["per_harness"].values())
        assert (run_dir / "heldout" / point / "eval.json").is_file()
    assert set(held["diff"]) == {"react", "pi", "all"}
    assert all(d["verdict"] in ("within noise", "better", "worse") for d in held["diff"].values())
    assert "held-out" in out and held["diff"]["all"]["verdict"] == "within noise"  # 2 trials a harness: nothing is significant
    assert set(held["shares"]) == {"sft", "grpo", "total"} and "GRPO" in out
    # nothing of the held-out rollouts is in the run's store: the per-step analysis stays exact
    assert not any(t.task_id in held["tasks"] for t in _trajectories(run_dir))
