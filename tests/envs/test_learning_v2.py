"""The learning benchmark's second design (benchmarks/learning.py, benchmarks/learning_v2/), without a
model: the scale and its defaults, the calibration's choices, the resumable arms (a measured point is
never measured again, a trained segment never trained again), the control arm's trainer option, and
the report's JSON summary, tables and PNG from constructed run directories."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from benchmarks import learning as cli  # noqa: E402
from benchmarks.learning_v2 import arms, report  # noqa: E402
from benchmarks.learning_v2.calibrate import band, pick_checkpoint  # noqa: E402
from benchmarks.learning_v2.design import ARMS, Calibration, Design, config, point_dir, run_dir  # noqa: E402
from benchmarks.learning_v2.measure import family_numbers  # noqa: E402


def test_the_default_scale_is_the_issues_design():
    d = Design()
    assert len(d.seeds) >= 3 and d.group_size == 8 and d.heldout * d.trials >= 480 and d.heldout >= 160
    assert d.steps * d.group_size * d.tasks_per_step >= 2000 and d.points == [d.steps // 2, d.steps]
    s = Design.smoke()
    assert (len(s.seeds), s.steps, s.trials, s.heldout) == (1, 2, 1, 4) and s.points == [1, 2]


def test_flags_override_the_scale_and_bad_ones_are_refused(tmp_path, capsys):
    a = cli._args(["run", "--smoke", "--seeds", "3,4", "--episodes", "40", "--out", str(tmp_path)])
    assert a.design.seeds == (3, 4) and a.design.steps == 10 and a.design.group_size == 2
    with pytest.raises(SystemExit):
        cli._args(["run", "--group-size", "1"])
    assert "group of one rollout" in capsys.readouterr().err


def test_a_later_sitting_with_another_scale_is_refused(tmp_path):
    cli.pin_design(tmp_path, Design.smoke())
    cli.pin_design(tmp_path, Design.smoke())  # the same scale: fine
    with pytest.raises(SystemExit, match=r"another scale.*episodes"):
        cli.pin_design(tmp_path, dataclasses.replace(Design.smoke(), episodes=16))


def test_the_control_arm_trains_with_shuffled_rewards_and_the_held_out_set_is_fixed():
    d = Design.smoke()
    cfgs = {arm: config(d, seed=s, families=d.families, overrides=[], extra=ARMS[arm])
            for arm, s in (("grpo", 0), ("control", 5))}
    assert cfgs["grpo"].trainer.cpu.reward_shuffle == "off" and cfgs["control"].trainer.cpu.reward_shuffle == "group"
    # every seed and arm: the same generated streams (the seed moves the training run, not the tasks)
    assert cfgs["grpo"].env.options == cfgs["control"].env.options
    assert cfgs["grpo"].rollout.group_size == d.group_size and cfgs["control"].seed == 5


def test_calibration_picks_an_early_checkpoint_and_the_families_in_the_band(tmp_path):
    assert pick_checkpoint({2: 0.05, 4: 0.2, 8: 0.3, 16: 0.32}) == 4
    assert pick_checkpoint({1: 0.0, 2: 0.0}) == 2
    kept, dropped = band({"a": {"success_rate": 0.2}, "b": {"success_rate": 0.81}, "c": {"success_rate": None}},
                         (0.2, 0.8))
    assert kept == ["a"] and set(dropped) == {"b", "c"} and dropped["b"].startswith("too easy")
    Calibration(4, ("a",), {"sft_curve": {2: 0.1}}).save(tmp_path)
    assert Calibration.load(tmp_path).families == ("a",)
    Calibration(4, (), {}).save(tmp_path)
    with pytest.raises(SystemExit, match="no family is in the band"):
        Calibration.load(tmp_path)


def test_family_numbers_count_successes_and_mixed_groups():
    from openforge.core.trajectory import Trajectory, TrajectoryGroup

    def traj(i, tid, reward, status):
        return Trajectory(rollout_id=f"r{i}", task_id=tid, reward=reward, status=status)

    groups = [TrajectoryGroup(task_id="a", trajectories=[traj(1, "a", 1.0, "success"), traj(2, "a", 0.0, "policy_failure")]),
              TrajectoryGroup(task_id="c", trajectories=[traj(3, "c", 0.0, "policy_failure"), traj(4, "c", 0.0, "policy_failure")])]
    got = family_numbers(groups, {"a": "git-tag", "c": "json-extract"})
    assert got["git-tag"] == {"rollouts": 2, "successes": 1, "success_rate": 0.5, "reward_mean": 0.5, "groups": 1,
                              "mixed_groups": 1, "mixed_rate": 1.0}
    assert got["json-extract"]["mixed_groups"] == 0


def _write_point(path: Path, outcomes: dict[str, list[int]]) -> None:
    path.mkdir(parents=True, exist_ok=True)
    flat = [o for v in outcomes.values() for o in v]
    path.joinpath("heldout.json").write_text(json.dumps({"per_harness": {"react": {
        "successes": sum(flat), "trials": len(flat), "pass_rate": sum(flat) / len(flat), "outcomes": outcomes}}}))


def _write_metrics(rdir: Path, steps: int, rollouts: int) -> None:
    rdir.mkdir(parents=True, exist_ok=True)
    rdir.joinpath("metrics.jsonl").write_text("".join(json.dumps(
        {"step": s, "reward_mean": 0.1 * s, "pass_rate": 0.1, "rollouts": rollouts}) + "\n" for s in range(1, steps + 1)))


def test_a_rerun_trains_and_measures_only_what_is_missing(tmp_path, monkeypatch):
    """Seed 0's grpo arm: trained to the mid point and measured there in an earlier sitting; the rerun
    trains the rest (one segment, to the end) and measures the end only."""
    import openforge

    d, cal = Design.smoke(), Calibration(2, ("git-tag",))
    rdir = run_dir(tmp_path, "grpo", 0)
    _write_metrics(rdir, 1, 4)
    _write_point(point_dir(tmp_path, "grpo", 0, 1), {"gen-git-tag-a": [1]})
    trained, measured = [], []

    def fake_run(cfg, progress=False):
        trained.append(cfg.trainer.steps)
        _write_metrics(rdir, cfg.trainer.steps, 4)
        return {"sft": {"key": "k1"}}

    async def fake_point(cfg, dest, *, label, warm, skip=0, trials=None):
        measured.append((label, cfg.model.name, warm))
        _write_point(dest, {"gen-git-tag-a": [0]})
        return {}

    monkeypatch.setattr(openforge, "run", fake_run)
    monkeypatch.setattr(arms, "held_point", fake_point)
    asyncio.run(arms.run_arm(d, cal, tmp_path, "grpo", 0, [], log=lambda *_: None))
    assert trained == [2] and measured == [("grpo-step-2", f"{rdir}@2", False)]
    asyncio.run(arms.run_arm(d, cal, tmp_path, "grpo", 0, [], log=lambda *_: None))
    assert trained == [2] and len(measured) == 1  # everything was there: nothing runs again
    ledger = json.loads((rdir / "bench.json").read_text())
    assert arms.episodes_of(rdir) == 8 and ledger["wall_s"] >= 0 and ledger["warm_start_key"] == "k1"


def _constructed(out: Path, d: Design) -> None:
    """2 seeds × 12 instances (two families) × 3 trials; the end point of grpo solves 4 more instances
    than the warm-start (every trial), the control's end equals the warm-start."""
    fams = ["git-tag", "json-extract"]
    inst = [f"gen-{fams[i % 2]}-{i:04x}" for i in range(12)]
    for seed in d.seeds:
        sft = {t: [int(i < 4)] * 3 for i, t in enumerate(inst)}
        _write_point(point_dir(out, "sft", seed, 0), sft)
        for arm in ARMS:
            end = {t: [int(i < (8 if arm == "grpo" else 4))] * 3 for i, t in enumerate(inst)}
            for step in d.points:
                _write_point(point_dir(out, arm, seed, step), end)
            _write_metrics(run_dir(out, arm, seed), d.steps, 4)


def test_the_summary_has_the_issues_keys_and_the_right_effects(tmp_path):
    d = Design(seeds=(0, 1), episodes=16, group_size=2, tasks_per_step=2, heldout=12, trials=3)
    _constructed(tmp_path, d)
    s = report.summarize(tmp_path, d, calibration={"sft_steps": 2, "families": ["git-tag"]}, engine="transformers",
                         lora=None, command="python benchmarks/learning.py report", date="2026-12-05", draws=500)
    assert [(r["seed"], r["episodes"]) for r in s["seeds"]] == [(0, 16), (1, 16)]
    assert all("wall_s" in r for r in s["seeds"]) and s["heldout_pairs"] == 36 and s["heldout_instances"] == 12
    assert (s["engine"], s["lora"]) == ("transformers", None)
    assert all(r["warm_start_same"] for r in s["seeds"])
    g, c = s["pooled"]["grpo"], s["pooled"]["control"]
    assert g["effect"] == pytest.approx(100 * 4 / 12, abs=0.1) and g["lo"] > 0
    assert c == {**c, "effect": 0.0, "lo": 0.0, "hi": 0.0, "degenerate": True} and not g["degenerate"]
    assert s["pooled"]["naive_grpo"]["hi"] - s["pooled"]["naive_grpo"]["lo"] < g["hi"] - g["lo"]
    assert s["families"]["git-tag"]["sft"] == [12, 36] and s["families"]["git-tag"]["grpo"] == [24, 36]  # 2 seeds pooled
    md = report.report_md(s)
    assert "| SFT → GRPO | +33.3 pts" in md and "| json-extract | 6 |" in md
    report.plot(s, tmp_path / "curve.png")
    assert (tmp_path / "curve.png").read_bytes()[:4] == b"\x89PNG"


def test_the_report_command_writes_the_json_summary(tmp_path):
    out = tmp_path / "out"
    d = Design.smoke()
    _constructed(out, d)
    Calibration(2, ("git-tag", "json-extract"), {"sft_curve": {1: 0.0, 2: 0.5}}).save(out)
    dest = tmp_path / "learning-v2.json"
    s = asyncio.run(cli.main(["report", "--smoke", "--out", str(out), "--json", str(dest), "--draws", "200",
                              "--png", str(tmp_path / "c.png"), "--set", "trainer.cpu.lora={rank: 4, alpha: 8}"]))
    saved = json.loads(dest.read_text())
    assert saved["pooled"]["grpo"]["effect"] == s["pooled"]["grpo"]["effect"] > 0
    assert saved["lora"]["rank"] == 4 and saved["calibration"]["sft_steps"] == 2
    assert (out / "learning-v2.md").is_file()
