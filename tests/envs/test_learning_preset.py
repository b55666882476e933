"""The claw-grpo preset ``learn`` (the generated claw family) loads and keeps its held-out stream out of
training; the learning benchmark's second design (benchmarks/learning.py, benchmarks/learning_v2/) is
in tests/envs/test_learning_v2.py."""

from __future__ import annotations

from pathlib import Path

import yaml
from typer.testing import CliRunner

from openforge.analysis.heldout import check_heldout
from openforge.cli.main import app
from openforge.config import load_config
from openforge.recipes import recipe_config
from openforge.runner.forge import load_tasks
from openforge.runner.session import load_environment

REPO = Path(__file__).resolve().parents[2]


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


def _specs(preset: str):
    cfg = load_config(recipe_config("claw-grpo"), preset=preset)
    env = load_environment(cfg.env.name, cfg.env.options)
    train = load_tasks(cfg, env)
    return [env._spec(t) for t in [*train, *check_heldout(cfg, env, train)]]


def test_the_learn_and_cpu_presets_pay_partial_credit_for_progress_only():
    """What the learning benchmark (preset ``learn``) and the main job (preset ``cpu``) train on: every
    generated instance is scored by :func:`~openforge.envs.claw.credit.partial_credit` (progress checks
    pay, format probes are guards), every hand-written task all-or-nothing: a format probe earns 0 in both."""
    from openforge.envs.claw.credit import partial_credit

    learn, cpu = _specs("learn"), _specs("cpu")
    assert learn and all(s.partial for s in learn), [s.id for s in learn if not s.partial]
    assert cpu and not any(s.partial for s in cpu), [s.id for s in cpu if s.partial]
    for s in learn:  # every guard passing, every progress check failing: nothing
        kinds = {n: c.kind for n, c in s.checks.items()}
        assert partial_credit({n: not k.progress for n, k in kinds.items()}, kinds).reward == 0.0, s.id
