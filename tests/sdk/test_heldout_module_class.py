"""The held-out table of a run whose harness is given as ``module:Class`` while the class's ``name`` is
another word (``harness.name=custom_harness.harness:MyAgent``, ``MyAgent.name == "my-agent"``): the
numbers sit under the run's name for the harness, so the table and the report show them instead of
"–" and "+0 pts [−100, +100]". Real rollouts of the SDK examples (docs/sdk.md) through the real proxy,
a local sandbox and the reference policy, through :func:`openforge.runner.heldout_eval.run_point`."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
from rich.console import Console
from testdeps import smollm2_tokenizer

from openforge.analysis.heldout import compare_points, heldout_table, shares
from openforge.launchers.local import LocalLauncher
from openforge.plugins import make_environment, make_harness
from openforge.recipes import load_recipe_config
from openforge.runner.heldout_eval import run_point
from openforge.runner.parts import backend_for, group_harnesses
from openforge.runner.session import RolloutSettings, Session

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
HARNESS = "custom_harness.harness:MyAgent"
ENV = "custom_environment:ArithmeticEnvironment"


@pytest.fixture
def examples_on_path(monkeypatch):
    # the modules stay imported afterwards: the plugin registry keeps the classes it loaded
    monkeypatch.syspath_prepend(str(EXAMPLES))


async def test_heldout_numbers_of_a_module_class_harness_whose_name_differs(tmp_path, examples_on_path):
    assert make_harness(HARNESS).name == "my-agent"  # the case: the run's name is not the class's
    cfg = load_recipe_config("claw-grpo", preset="test", overrides=[
        f"env.name={ENV}", f"harness.name={HARNESS}", "env.subset=null", "eval.heldout.trials=1",
        f"run_dir={tmp_path / 'run'}"])
    env = make_environment(ENV)
    tasks = env.tasks("eval")
    backend = backend_for("reference", environment=env, tasks=tasks, tokenizer=smollm2_tokenizer())
    launcher = LocalLauncher(base_dir=tmp_path / "sbx", grace_s=1.0)
    async with Session(backend, environment=env, launcher=launcher, harness=lambda: make_harness(HARNESS),
                       store=tmp_path / "store.db", rollouts=RolloutSettings(progress=False)) as session:
        forge = SimpleNamespace(cfg=cfg, runtime=session, backend=backend, run_dir=tmp_path / "run",
                                console=Console(quiet=True),
                                group_harnesses=lambda names: group_harnesses(cfg.harness, names))
        before = await run_point(forge, tasks, "before", label="start")
        after = await run_point(forge, tasks, "after", label="end")

    got = before["per_harness"][HARNESS]
    assert set(before["per_harness"]) == {HARNESS}
    errors = (tmp_path / "run" / "heldout" / "before" / "trajectories.jsonl").read_text()[-3000:]
    assert got["trials"] == len(tasks) and got["successes"] == len(tasks), (got, errors)  # the reference solves each
    assert set(got["outcomes"]) == {t.id for t in tasks}
    heldout = {"tasks": [t.id for t in tasks], "trials": 1, "before": before, "after": after,
               "diff": compare_points(before, after)}
    heldout["shares"] = shares(heldout)
    console = Console(record=True, width=250)
    console.print(heldout_table(heldout))
    row = next(line for line in console.export_text().splitlines() if HARNESS in line)
    assert f"{len(tasks)}/{len(tasks)} = 100 %" in row, row
    cells = [c.strip() for c in row.split("│") if c.strip()]
    assert "–" not in cells and "[-100, +100]" not in row, row  # "–": a point with no rollout
    assert (tmp_path / "run" / "heldout" / "before" / "heldout.json").is_file()
