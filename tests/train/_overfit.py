"""The overfit check's driver (tests/train/test_overfit.py): GRPO on a fixed handful of claw tasks, their
pass rate measured by evaluation rollouts before and after.

Everything real: SmolLM2-135M served by the transformers back-end behind the proxy, the react harness
as a process in a local bubblewrap sandbox, the claw verifier, the SFT warm-start and the CPU trainer's
GRPO loss (:meth:`openforge.runner.forge.Forge.train`), LoRA adapter on. Only the schedule is the check's own:

1. a tiny SFT warm-start on the chosen tasks' reference solutions (so the 135M model makes the tool
   call at all, and solves the tasks only sometimes: the room GRPO needs);
2. ``trials`` evaluation rollouts of each task at the training temperature: the warm-start's pass rate;
3. ``steps`` GRPO steps on the same tasks (``Forge.train``: its warm-start is the cached one of 1.);
4. ``trials`` evaluation rollouts again: the trained pass rate.

Run it alone for calibration (prints the JSON result)::

    flock /tmp/openforge-heavy.lock python tests/train/_overfit.py /tmp/overfit [--flip] [KEY=VALUE ...]
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import time
from collections.abc import Callable, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

#: the fixed tasks: one generated train instance of each family (stream seed 0)
FAMILIES = ("files-rename", "files-create")
#: GRPO steps, rollouts per task group in a step, evaluation rollouts per task at each end
STEPS, GROUP, TRIALS = 6, 8, 12
#: the settings the check runs with (claw-grpo preset `learn`, narrowed to the fixed tasks)
OVERRIDES: tuple[str, ...] = (
    "env.options.generated.heldout=1", "env.options.generated.seed=0", "seed=0", "eval.heldout.enabled=false",
    # a tiny warm-start on the fixed tasks themselves: four optimizer steps over their two reference solutions
    # (the adapter's; loss 1.29 → 0.11): the model makes the call and solves each task only sometimes
    "sft.task_scope=run", "sft.epochs=4", "sft.batch_size=8", "sft.lr=1.0e-3",
    # one model call per episode: the shell command that solves the task (the verifier checks the end state)
    "harness.per_harness.react.max_turns=1", "harness.per_harness.react.max_tokens=64", "rollout.max_tokens=64",
    # a loaded 2-core machine queues calls for minutes: no rollout lost to the wall clock
    f"rollout.group_size={GROUP}", "rollout.concurrency=16", "rollout.timeout_s=900", "trainer.checkpoint_every=0",
    # an overfit, not a careful run: a high learning rate (1e-3 with two PPO epochs overshot: 50 % → 88 % train
    # pass at step 3, then 25 % at the end)
    "trainer.cpu.lora={rank: 16, alpha: 32}", "trainer.cpu.lr=5.0e-4", "trainer.cpu.ppo_epochs=1",
    "trainer.cpu.min_mixed_groups=1", "trainer.cpu.target_mixed_groups=1", "trainer.cpu.max_resample_rounds=0",
    "trainer.cpu.micro_batch_tokens=2048",
)


def config(out: Path, extra: Sequence[str] = (), *, families: Sequence[str] = FAMILIES, steps: int = STEPS) -> Any:
    from openforge.config import load_config
    from openforge.recipes import recipe_config

    return load_config(recipe_config("claw-grpo"), preset="learn", overrides=[
        f"run_dir={out / 'run'}", f"cache_dir={out / 'cache'}", *OVERRIDES,
        f"env.options.generated.train={len(families)}", f"env.options.generated.families=[{','.join(families)}]",
        f"rollout.tasks_per_step={len(families)}", f"trainer.steps={steps}", *extra])


def pass_rate(groups: Any) -> dict[str, Any]:
    """Successes over every rollout that ran (an infrastructure loss is not the policy's)."""
    per: dict[str, list[int]] = {}
    for g in groups:
        for t in g.trajectories:
            per.setdefault(t.task_id, []).append(int(t.status.value == "success"))
    n = sum(len(v) for v in per.values())
    wins = sum(sum(v) for v in per.values())
    return {"successes": wins, "rollouts": n, "rate": wins / n if n else 0.0,
            "per_task": {k: f"{sum(v)}/{len(v)}" for k, v in per.items()}, "discarded": len(groups.discarded)}


@contextmanager
def flipped_advantages() -> Any:
    """GRPO's advantages with their sign flipped (``openforge.train.grpo.group_advantages``, which
    :func:`~openforge.train.grpo.build_samples` calls): the policy is pushed *away* from what succeeded."""
    from openforge.train import grpo

    real: Callable[..., list[float]] = grpo.group_advantages
    grpo.group_advantages = lambda rewards, **kw: [-a for a in real(rewards, **kw)]
    try:
        yield
    finally:
        grpo.group_advantages = real


async def overfit(out: Path, extra: Sequence[str] = (), *, families: Sequence[str] = FAMILIES, steps: int = STEPS,
                  trials: int = TRIALS, log: Callable[[str], None] = print) -> dict[str, Any]:
    """Warm-start → pass rate → GRPO steps → pass rate, on the fixed tasks; returns the numbers."""
    from openforge.runner.forge import Forge, load_tasks
    from openforge.runner.teacher import warm_start

    cfg = config(out, extra, families=families, steps=steps)
    t0 = time.monotonic()
    async with Forge(cfg, progress=False) as forge:
        tasks = load_tasks(cfg, forge.env)
        assert [t.category for t in tasks] == list(families), [t.id for t in tasks]
        sft = await warm_start(forge.runtime, cfg, tasks, model=forge.model, tokenizer=forge.tokenizer,
                               run_dir=forge.run_dir, log=log)
        t_sft = time.monotonic()
        before = pass_rate(await forge.rollouts(tasks, trials))
        log(f"warm-start: {before}")
        t_before = time.monotonic()
        if not steps:
            return {"tasks": [t.id for t in tasks], "before": before, "time_s": round(t_before - t0)}
        summary = await forge.train()  # the warm-start again (its cache: the same weights), then GRPO
        t_train = time.monotonic()
        after = pass_rate(await forge.rollouts(tasks, trials))
        log(f"after {cfg.trainer.steps} GRPO steps: {after}")
    steps = [{k: s.get(k) for k in ("step", "pass_rate", "reward_mean", "gradient_step", "train/trained_tokens",
                                    "step_time_s")} for s in summary["steps"]]
    return {"tasks": [t.id for t in tasks], "sft": {k: sft.get(k) for k in ("samples", "steps", "cached", "time_s")},
            "before": before, "after": after, "gain": after["rate"] - before["rate"], "steps": steps,
            "time_s": {"sft": round(t_sft - t0), "before": round(t_before - t_sft), "grpo": round(t_train - t_before),
                       "after": round(time.monotonic() - t_train), "total": round(time.monotonic() - t0)}}


def main(argv: list[str]) -> None:
    out, *rest = argv
    flip = "--flip" in rest
    opts = dict(a[2:].split("=", 1) for a in rest if a.startswith("--") and "=" in a)
    extra = [a for a in rest if not a.startswith("--")]
    kw: dict[str, Any] = {}
    if "families" in opts:
        kw["families"] = opts["families"].split(",")
    for k in ("steps", "trials"):
        if k in opts:
            kw[k] = int(opts[k])
    with flipped_advantages() if flip else contextlib.nullcontext():
        r = asyncio.run(overfit(Path(out), extra, **kw))
    print(json.dumps({"flip": flip, "extra": extra, **r}, indent=1))


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    main(sys.argv[1:])
