"""Results per harness: `forge eval` over several harnesses (real react processes, the reference
teacher), the per-harness rows of `forge compare` and `forge report`, compare's warning when two runs
were measured on different tasks or harnesses, and the confidence intervals of the held-out
before/after."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

from openforge.analysis.ci import diff_interval, verdict, wilson_interval
from openforge.analysis.compare import compare_runs
from openforge.analysis.per_harness import comparability_warnings, harness_names, options_by_harness
from openforge.analysis.rundir import load_run
from openforge.cli.main import app
from openforge.core.errors import ConfigError

from .factory import traj

runner = CliRunner()


def _eval_dir(root: Path, rows: list[tuple[str, str, str]]) -> Path:
    """An eval directory of (task, harness, status) trials."""
    root.mkdir(parents=True)
    with (root / "trajectories.jsonl").open("w") as f:
        for i, (task, harness, status) in enumerate(rows):
            f.write(traj([("shell", {"command": "ls"}, "ok")], task_id=task, harness=harness, status=status,
                         rollout_id=f"{root.name}-{i}").to_json() + "\n")
    return root


def test_harness_flags_and_per_harness_options():
    assert harness_names(["react,pi", "pi", " codex "]) == ["react", "pi", "codex"]
    assert options_by_harness({"max_turns": 4, "pi.wire_api": "chat"}, ["react", "pi"]) == {
        "react": {"max_turns": 4}, "pi": {"max_turns": 4, "wire_api": "chat"}}
    with pytest.raises(ConfigError, match="'codex' is not one of the harnesses given"):
        options_by_harness({"codex.x": 1}, ["react", "pi"])


def test_forge_eval_through_two_harnesses(tmp_path, monkeypatch):
    pytest.importorskip("openai")
    from openforge.harnesses.react import ReactHarness
    from openforge.plugins import HARNESSES

    class ReactB(ReactHarness):
        name = "react-b"

    monkeypatch.setitem(HARNESSES._refs, "react-b", ReactB)
    out = tmp_path / "e"
    res = runner.invoke(app, ["eval", "-H", "react", "-H", "react-b", "-e", "claw", "-b", "reference", "--split", "all",
                              "--task", "files-create-hello", "-k", "2", "--budget-s", "120",
                              "--harness-opt", "react-b.max_turns=3", "-o", str(out)])
    assert res.exit_code == 0, f"{res.output}\n{res.exception!r}"
    assert "per harness" in res.output and "react-b" in res.output
    data = json.loads((out / "eval.json").read_text())
    assert data["trials"] == 4 and set(data["per_harness"]) == {"react", "react-b"}
    assert all(s["trials"] == 2 and s["pass_at_k"] == 1.0 for s in data["per_harness"].values())
    harnesses = [json.loads(x)["harness"] for x in (out / "trajectories.jsonl").read_text().splitlines()]
    assert sorted(harnesses) == ["react", "react", "react-b", "react-b"]
    res = runner.invoke(app, ["eval", "--harness", "react,react-b", "-e", "claw", "-b", "reference", "--task",
                              "files-create-hello", "--harness-opt", "pi.x=1", "-o", str(tmp_path / "bad")])
    assert isinstance(res.exception, ConfigError) and "'pi' is not one of the harnesses given" in str(res.exception)
    # the report of a multi-harness eval has its per-harness section
    res = runner.invoke(app, ["report", str(out)])
    assert res.exit_code == 0, res.output
    html = (out / "report.html").read_text()
    assert 'id="per-harness"' in html and "react-b" in html


def test_compare_breaks_a_mixed_run_down_per_harness_and_warns_on_different_tasks(tmp_path):
    mixed = _eval_dir(tmp_path / "mixed", [("a", "react", "success"), ("a", "pi", "policy_failure"),
                                           ("b", "react", "success"), ("b", "pi", "success")])
    other = _eval_dir(tmp_path / "other", [("a", "react", "success"), ("c", "react", "policy_failure")])
    rows = compare_runs([load_run(mixed), load_run(other)])
    assert rows[0]["harness.react.pass_at_1"] == 1.0 and rows[0]["harness.pi.pass_at_1"] == 0.5
    assert not any(k.startswith("harness.") for k in rows[1])  # one harness: no breakdown
    warnings = comparability_warnings(rows)
    assert any("different tasks (1 in common" in w for w in warnings), warnings
    assert any("different harnesses (mixed: pi, react; other: react)" in w for w in warnings), warnings
    res = runner.invoke(app, ["compare", str(mixed), str(other)])
    assert res.exit_code == 0, res.output
    assert "pass@1 · pi" in res.output and "pass@1 · react" in res.output
    assert "warning: the runs were measured on different tasks" in res.output.replace("\n", " ")
    # the same tasks under the same harness: no warning
    same = _eval_dir(tmp_path / "same", [("a", "react", "policy_failure"), ("c", "react", "success")])
    assert comparability_warnings(compare_runs([load_run(other), load_run(same)])) == []
    res = runner.invoke(app, ["report", str(mixed)])
    assert res.exit_code == 0 and 'id="per-harness"' in (mixed / "report.html").read_text()


def test_wilson_and_newcombe_intervals():
    lo, hi = wilson_interval(0, 10)
    assert lo == 0.0 and 0.27 < hi < 0.29  # the textbook 0/10 Wilson upper bound is 0.278
    lo, hi = wilson_interval(5, 10)
    assert 0.23 < lo < 0.24 and 0.76 < hi < 0.77
    assert wilson_interval(0, 0) == (0.0, 1.0)
    d, lo, hi = diff_interval(0, 10, 1, 10)  # 0/10 → 1/10: within noise
    assert d == pytest.approx(0.1) and lo < 0 < hi and verdict(lo, hi) == "within noise"
    d, lo, hi = diff_interval(1, 40, 30, 40)  # 1/40 → 30/40: real
    assert lo > 0 and verdict(lo, hi) == "better"
    assert verdict(*diff_interval(30, 40, 1, 40)[1:]) == "worse"


def test_heldout_tasks_are_refused_when_the_run_trains_on_them():
    from openforge.analysis.heldout import check_heldout
    from openforge.envs.claw import ClawEnvironment
    from openforge.runner.forge import load_tasks

    env = ClawEnvironment()
    cfg = __import__("openforge.recipes", fromlist=["x"]).load_recipe_config("claw-grpo")
    held = check_heldout(cfg, env, load_tasks(cfg, env))
    assert len(held) == 9 and {t.split for t in held} == {"heldout"}
    train_ids = {t.id for t in env.tasks("train")} | {t.id for t in env.tasks("eval")}
    assert not train_ids & {t.id for t in held}  # disjoint from train and eval by construction
    bad = cfg.model_copy(update={"eval": cfg.eval.model_copy(update={"heldout": cfg.eval.heldout.model_copy(
        update={"tasks": ["files-create-bye", "files-create-hello", "git-branch"]})})})
    with pytest.raises(ConfigError) as e:  # an easy GRPO task, and a train task only the SFT teacher sees
        check_heldout(bad, env, load_tasks(bad, env))
    assert e.value.problems == ["eval.heldout: files-create-hello is a task this run trains on; a held-out task "
                                "must not be", "eval.heldout: git-branch is a task this run trains on; a held-out "
                                "task must not be"]


async def test_heldout_points_run_real_rollouts_and_stay_out_of_the_store(tmp_path):
    """The three points through the real react harness and proxy, the tasks' reference solutions as the
    policy: every trial succeeds, the points are forge eval directories, each change is paired and
    within noise."""
    pytest.importorskip("openai")

    from rich.console import Console
    from testdeps import smollm2_tokenizer

    from openforge.analysis.heldout import check_heldout, heldout_table
    from openforge.envs.claw import ClawEnvironment
    from openforge.launchers.local import LocalLauncher
    from openforge.recipes import load_recipe_config
    from openforge.runner.forge import Forge, load_tasks
    from openforge.runner.heldout_eval import heldout_after, heldout_before, heldout_warmstart
    from openforge.runner.session import Session, backend_for, harness_factory

    cfg = load_recipe_config("claw-grpo", overrides=["harness.name=[react]", "eval.heldout.max_tasks=2",
                                                     "eval.heldout.trials=2", f"run_dir={tmp_path}",
                                                     f"cache_dir={tmp_path / 'cache'}"])
    env = ClawEnvironment()
    held = check_heldout(cfg, env, load_tasks(cfg, env))
    forge = Forge(cfg, console=Console(quiet=True), progress=False)
    forge.backend = backend_for("reference", environment=env, tasks=held, tokenizer=smollm2_tokenizer())
    forge.session = Session(forge.backend, environment=env, harness=harness_factory("react"),
                            launcher=LocalLauncher(base_dir=tmp_path / "sbx", grace_s=1.0))
    await forge.session.start()  # no store: held-out points must not need one
    try:
        heldout = await heldout_before(forge, held)
        await heldout_warmstart(forge, held, heldout, sft_key="sft-key")
        await heldout_after(forge, held, heldout)
    finally:
        await forge.__aexit__(None, None, None)
    for point in ("before", "warmstart", "after"):
        assert heldout[point]["per_harness"]["react"] | {"ci95": None} == {
            "successes": 4, "trials": 4, "infra_failures": 0, "pass_rate": 1.0, "ci95": None, "mean_reward": 1.0,
            "pass_at_k": 1.0, "pass_hat_k": 1.0, "k": 2, "outcomes": {t.id: [1, 1] for t in held}}
        assert json.loads((tmp_path / "heldout" / point / "eval.json").read_text())["tasks"] == 2
    assert heldout["diff"]["react"] == {"delta": 0.0, "ci95": heldout["diff"]["react"]["ci95"], "verdict": "within noise",
                                        "paired": True, "pairs": 4}
    assert set(heldout["shares"]) == {"sft", "grpo", "total"}
    assert heldout["shares"]["grpo"]["react"]["pairs"] == 4
    assert heldout_table(heldout) is not None
    assert not (tmp_path / "trajectories.db").exists()  # nothing of it in the run's store
    # a resumed run reuses the before it wrote
    assert (await heldout_before(forge, held))["before"] == heldout["before"]
    # another run that would measure the same before gets a copy of the clean one (no rollout)
    forge.run_dir = tmp_path / "second"
    forge.session = SimpleNamespace(environment=env)  # its environment (the key reads its checks), nothing to run with
    again = (await heldout_before(forge, held))["before"]
    assert again["label"] == "start, cached" and again["per_harness"] == heldout["before"]["per_harness"]
    assert json.loads((tmp_path / "second" / "heldout" / "before" / "eval.json").read_text())["tasks"] == 2
