"""The claw-grpo preset ``learn`` (the generated claw family) loads and keeps its held-out stream out of
training, and benchmarks/learning.py turns a run directory into its table, curve and PNG (no model)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import yaml
from typer.testing import CliRunner

from openforge.analysis.heldout import check_heldout
from openforge.cli.main import app
from openforge.config import load_config
from openforge.forge import load_tasks
from openforge.recipes import recipe_config
from openforge.session import load_environment

REPO = Path(__file__).resolve().parents[2]


def _bench():
    spec = importlib.util.spec_from_file_location("learning_bench", REPO / "benchmarks" / "learning.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_learn_preset_loads_and_trains_on_the_train_stream_only():
    r = CliRunner().invoke(app, ["recipe", "claw-grpo", "--preset", "learn", "--dry-run"])
    assert r.exit_code == 0, r.output
    dumped = yaml.safe_load(r.output.split("\n# ")[0])
    assert dumped["env"]["options"]["generated"] == {
        "train": 60, "heldout": 20, "seed": 0,
        "families": ["git-tag", "json-extract", "shell-chmod", "issues-close", "notes-create"]}
    cfg = load_config(recipe_config("claw-grpo"), preset="learn", overrides=["env.options.generated.seed=1"])
    env = load_environment(cfg.env.name, cfg.env.options)
    train = load_tasks(cfg, env)
    held = check_heldout(cfg, env, train)  # refuses a held-out task the run trains on
    assert len(train) == 60 and len(held) == 20 and all(t.id.startswith("gen-") for t in [*train, *held])
    assert not {t.id for t in train} & {t.id for t in held}
    assert cfg.trainer.steps >= 20 and cfg.eval.heldout.trials * len(held) >= 60


def _point(label: str, outcomes: dict[str, list[int]]) -> dict:
    flat = [o for v in outcomes.values() for o in v]
    return {"point": label, "label": label, "per_harness": {"react": {
        "successes": sum(flat), "trials": len(flat), "infra_failures": 0, "pass_rate": sum(flat) / len(flat),
        "ci95": [0.0, 1.0], "k": 3, "outcomes": outcomes}}}


def test_report_writes_the_table_curve_and_png(tmp_path):
    bench = _bench()
    run = tmp_path / "seed0"
    tasks = [f"gen-t{i}" for i in range(4)]
    for name, wins in [("before", 0), ("warmstart", 1)]:
        (run / "heldout" / name).mkdir(parents=True)
        (run / "heldout" / name / "heldout.json").write_text(json.dumps(_point(name, {t: [int(i < wins)] * 3 for i, t in enumerate(tasks)})))
    for step, wins in [(1, 2), (2, 3)]:
        d = run / "curve" / f"step-{step}"
        d.mkdir(parents=True)
        (d / "heldout.json").write_text(json.dumps(_point(f"step-{step}", {t: [int(i < wins)] * 3 for i, t in enumerate(tasks)})))
    (run / "metrics.jsonl").write_text("\n".join(json.dumps(
        {"step": s, "reward_mean": 0.2 * s, "pass_rate": 0.1 * s, "mixed_groups": s, "groups": 4,
         "train/trained_tokens": 500.0 * s}) for s in (1, 2)) + "\n")
    args = bench._args(["report", "--out", str(tmp_path), "--seeds", "0", "--checkpoints", "1,2",
                        "--png", str(tmp_path / "learning.png")])
    seeds = bench.report(args)
    s0 = seeds[0]
    assert s0["points"]["after"]["successes"] == 9 and s0["points"]["warmstart"]["successes"] == 3
    assert s0["grpo"]["react"]["paired"] and s0["grpo"]["react"]["delta"] == 0.5
    assert [x["mixed_rate"] for x in s0["steps"]] == [0.25, 0.5]
    assert list(s0["heldout_curve"]) == [0, 1, 2]
    assert (tmp_path / "learning.png").read_bytes()[:4] == b"\x89PNG"
    assert "GRPO's own effect: +50 pts" in (tmp_path / "learning.md").read_text()


def test_family_numbers_count_mixed_groups():
    from openforge.trajectory import Trajectory, TrajectoryGroup

    def traj(tid, reward, status):
        traj.n = getattr(traj, "n", 0) + 1
        return Trajectory(rollout_id=f"r{traj.n}", task_id=tid, reward=reward, status=status)

    groups = [TrajectoryGroup(task_id="a", trajectories=[traj("a", 1.0, "success"), traj("a", 0.0, "policy_failure")]),
              TrajectoryGroup(task_id="b", trajectories=[traj("b", 0.25, "policy_failure"), traj("b", 0.0, "policy_failure")]),
              TrajectoryGroup(task_id="c", trajectories=[traj("c", 0.0, "policy_failure"), traj("c", 0.0, "policy_failure")])]
    got = _bench().family_numbers(groups, {"a": "files-create", "b": "files-create", "c": "git-tag"})
    assert got["files-create"] == {"rollouts": 4, "successes": 1, "success_rate": 0.25, "reward_mean": 0.312,
                                   "groups": 2, "mixed_groups": 2, "mixed_rate": 1.0, "mixed_by_success": 1}
    assert got["git-tag"]["mixed_groups"] == 0 and got["git-tag"]["success_rate"] == 0.0
