"""Measurements outside a training run: a held-out point of a policy (the warm-start, or a run's
checkpoint) and the train pass rates of a warm-start per family.

Owns: :func:`held_point` (``trials`` rollouts of every held-out instance, written as a ``forge eval``
directory with ``heldout.json``; reused when that file exists), :func:`family_rates` (train instances
× ``group_size`` rollouts at the training temperature, per family) and :func:`family_numbers`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def family_of(task_id: str) -> str:
    """``gen-<family>-<digest>`` → ``<family>``."""
    return task_id.removeprefix("gen-").rsplit("-", 1)[0]


async def _warm(forge: Any) -> dict[str, Any]:
    """The (cached) SFT warm-start of ``forge``'s config into its served model."""
    from openforge.runner.teacher import warm_start

    cfg = forge.cfg
    tasks = list(forge.env.tasks(cfg.env.split))
    return await warm_start(forge.runtime, cfg, tasks, model=forge.model, tokenizer=forge.tokenizer,
                            run_dir=forge.run_dir, log=forge.console.log)


async def held_point(cfg: Any, dest: Path, *, label: str, warm: bool, skip: int = 0,
                     trials: int | None = None) -> dict[str, Any]:
    """The held-out point of ``cfg``'s policy (after its warm-start when ``warm``) on its held-out
    instances from the ``skip``-th on, written to ``dest``; the one already there when it was measured."""
    from openforge.analysis.heldout import check_heldout
    from openforge.runner.forge import Forge, load_tasks
    from openforge.runner.heldout_eval import run_point

    done = dest / "heldout.json"
    if done.is_file():
        return json.loads(done.read_text())
    async with Forge(cfg, progress=False) as forge:
        sft = await _warm(forge) if warm else None
        held = check_heldout(cfg, forge.env, load_tasks(cfg, forge.env))[skip:]
        if not held:
            raise SystemExit(f"{label}: no held-out instance to measure (env.options.generated.heldout)")
        point = await run_point(forge, held, label, label=label, trials=trials, path=dest)
    if sft is not None:
        point["sft"] = {k: sft.get(k) for k in ("key", "cached", "samples", "steps", "time_s")}
        done.write_text(json.dumps(point, indent=1, default=str))
    return point


async def family_rates(cfg: Any, per_family: int, dest: Path) -> dict[str, Any]:
    """``per_family`` train instances of every family, ``rollout.group_size`` rollouts each at the
    training temperature, after the warm-start: per family the pass rate and mixed groups. Written to
    ``dest`` (reused when there)."""
    from openforge.runner.forge import Forge, load_tasks

    if dest.is_file():
        return json.loads(dest.read_text())
    async with Forge(cfg, progress=False) as forge:
        sft = await _warm(forge)
        train = load_tasks(cfg, forge.env)
        pick = [t for fam in dict.fromkeys(family_of(t.id) for t in train)
                for t in [x for x in train if family_of(x.id) == fam][:per_family]]
        forge.console.log(f"calibration: {len(pick)} train instances × {cfg.rollout.group_size} rollouts at "
                          f"temperature {cfg.rollout.temperature}")
        groups = await forge.rollouts(pick, cfg.rollout.group_size)
    out = {"families": family_numbers(list(groups), {t.id: family_of(t.id) for t in pick}),
           "discarded": len(groups.discarded), "group_size": cfg.rollout.group_size,
           "temperature": cfg.rollout.temperature, "sft": {k: sft.get(k) for k in ("key", "cached", "samples")}}
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(json.dumps(out, indent=1, default=str))
    return out


def family_numbers(groups: list[Any], family: dict[str, str]) -> dict[str, dict[str, Any]]:
    """Per family: rollouts, successes, success rate, mean reward, groups and mixed groups (rewards
    differ: GRPO has a gradient)."""
    from openforge.train.grpo import count_mixed_groups

    out: dict[str, dict[str, Any]] = {}
    for fam in sorted({family[g.task_id] for g in groups}):
        gs = [g for g in groups if family[g.task_id] == fam]
        trajs = [t for g in gs for t in g.trainable]
        wins = sum(t.status.value == "success" for t in trajs)
        mixed = count_mixed_groups(gs)
        out[fam] = {"rollouts": len(trajs), "successes": wins,
                    "success_rate": round(wins / len(trajs), 3) if trajs else None,
                    "reward_mean": round(sum(t.reward for t in trajs) / len(trajs), 3) if trajs else None,
                    "groups": len(gs), "mixed_groups": mixed, "mixed_rate": round(mixed / len(gs), 3)}
    return out
