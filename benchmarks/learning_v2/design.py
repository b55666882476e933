"""The design of the learning benchmark: its scale, its arms, where each piece lives, and the
configuration of every run and held-out point.

Owns: :class:`Design` (the scale: seeds, episodes per seed, group size, tasks per step, the fixed
held-out set, the calibration's sizes; :meth:`Design.smoke` is the tiny end-to-end one), :data:`ARMS`,
:class:`Calibration` (what ``calibrate`` saved and ``run`` applies), the run directories
(``OUT/<arm>/seed<N>/``, the SFT points ``OUT/sft/seed<N>/``) and :func:`config` (one run's
:class:`~openforge.config.RunConfig`: the ``learn`` preset with the design and the calibration over it,
then the user's ``--set``).

The held-out set is the generated ``heldout`` stream of one fixed generator seed (``heldout_seed``),
the same instances for every seed and arm; a seed changes the training run (SFT order, task order,
sampling), not the tasks.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

RECIPE, PRESET = "claw-grpo", "learn"

#: arm → the trainer overrides of its GRPO run (``sft`` has no run: it is the warm-start's point)
ARMS: dict[str, list[str]] = {
    "grpo": [],
    # the control: each step's rewards permuted within its groups before the advantages (the same groups
    # mixed, the same advantage magnitudes; only which rollout earned what is lost): see
    # openforge.train.reward_shuffle for why within groups
    "control": ["trainer.cpu.reward_shuffle=group"],
}
#: candidate families (the generators' own; calibration keeps those in the band)
FAMILIES = ("files-create", "files-append", "files-rename", "shell-chmod", "git-tag", "sqlite-count",
            "json-extract", "notes-create", "issues-close")


@dataclass(frozen=True)
class Design:
    """The scale of one benchmark; the defaults are the issue's design (≥ 3 seeds, group 8, ≥ 2,000
    episodes a seed, 160 held-out instances × 3 trials)."""

    seeds: tuple[int, ...] = (0, 1, 2)
    episodes: int = 2000
    group_size: int = 8
    tasks_per_step: int = 4
    heldout: int = 160
    trials: int = 3
    heldout_seed: int = 0
    train_instances: int = 240
    # calibration: the SFT curve (optimizer steps of the warm-start) measured on `val_instances` held-out
    # instances beyond the fixed set, then `tasks_per_family` train instances × group_size per family
    sft_steps: tuple[int, ...] = (2, 4, 8, 16)
    val_instances: int = 40
    val_trials: int = 2
    tasks_per_family: int = 4
    band: tuple[float, float] = (0.2, 0.8)
    families: tuple[str, ...] = FAMILIES

    @property
    def steps(self) -> int:
        """GRPO steps so that every seed's run has at least ``episodes`` rollouts (resample rounds add more)."""
        return max(1, math.ceil(self.episodes / (self.group_size * self.tasks_per_step)))

    @property
    def points(self) -> list[int]:
        """The GRPO steps measured on the held-out set besides the warm-start: mid-run and the end."""
        return sorted({max(1, self.steps // 2), self.steps})

    @classmethod
    def smoke(cls) -> Design:
        """The whole pipeline at a tiny scale (1 seed, 2 steps of 2 tasks × 2 rollouts, 4 held-out
        instances × 1 trial, a 2-point SFT curve; every family kept, since two SFT steps solve next to
        nothing): to trust the pipeline before a long run."""
        return cls(seeds=(0,), episodes=8, group_size=2, tasks_per_step=2, heldout=4, trials=1, train_instances=8,
                   sft_steps=(1, 2), val_instances=2, val_trials=1, tasks_per_family=1,
                   families=("git-tag", "json-extract"), band=(0.0, 1.0))

    def as_json(self) -> dict[str, Any]:
        return {**asdict(self), "steps": self.steps, "points": self.points}


@dataclass(frozen=True)
class Calibration:
    """What ``calibrate`` decided: the warm-start's optimizer steps and the families in the band."""

    sft_steps: int
    families: tuple[str, ...]
    details: dict[str, Any] = field(default_factory=dict)

    def save(self, out: Path) -> None:
        out.mkdir(parents=True, exist_ok=True)
        (out / "calibration.json").write_text(json.dumps({"sft_steps": self.sft_steps, "families": list(self.families),
                                                          **self.details}, indent=1, default=str))

    @classmethod
    def load(cls, out: Path) -> Calibration:
        f = out / "calibration.json"
        try:
            data = json.loads(f.read_text())
        except OSError:
            raise SystemExit(f"{f}: no calibration saved; run `benchmarks/learning.py calibrate --out {out}` first "
                             "(or `all`)") from None
        if not data.get("families"):
            raise SystemExit(f"{f}: no family is in the band; harden or add families, then calibrate again")
        rest = {k: v for k, v in data.items() if k not in ("sft_steps", "families")}
        return cls(int(data["sft_steps"]), tuple(data["families"]), rest)


def sft_overrides(steps: int) -> list[str]:
    """The warm-start stopped after ``steps`` optimizer steps (epochs enough to reach them)."""
    return ["sft.enabled=true", f"sft.max_steps={steps}", "sft.epochs=64"]


def run_dir(out: Path, arm: str, seed: int) -> Path:
    return out / arm / f"seed{seed}"


def point_dir(out: Path, arm: str, seed: int, step: int) -> Path:
    """Where a held-out point is written: the warm-start (``step`` 0) under ``OUT/sft/``, shared by both arms."""
    if step == 0:
        return out / "sft" / f"seed{seed}"
    return run_dir(out, arm, seed) / "points" / f"step-{step}"


def config(design: Design, *, seed: int, families: tuple[str, ...], overrides: list[str], extra: list[str],
           heldout: int | None = None) -> Any:
    """One run's config: the ``learn`` preset, the design (group, tasks per step, the fixed generated
    streams and families), ``extra`` (the arm's, the point's), then the user's ``overrides``."""
    from openforge.config import load_config
    from openforge.recipes import recipe_config

    fams = "[" + ",".join(families) + "]"
    base = [f"seed={seed}", f"rollout.group_size={design.group_size}", f"rollout.tasks_per_step={design.tasks_per_step}",
            f"env.options.generated.seed={design.heldout_seed}", f"env.options.generated.train={design.train_instances}",
            f"env.options.generated.heldout={heldout or design.heldout}", f"env.options.generated.families={fams}",
            f"eval.heldout.trials={design.trials}", "eval.heldout.cache=false"]
    return load_config(recipe_config(RECIPE), preset=PRESET, overrides=[*base, *extra, *overrides])


def with_scale(design: Design, **kw: Any) -> Design:
    """``design`` with the given fields replaced (``None`` values ignored: a flag not given)."""
    return replace(design, **{k: v for k, v in kw.items() if v is not None})


def engine_of(cfg: Any) -> str:
    """The rollout engine the config names (``rollout.engine`` where the config has one; the in-process
    transformers back-end otherwise)."""
    return str(getattr(cfg.rollout, "engine", None) or "transformers")


def lora_of(cfg: Any) -> dict[str, Any] | None:
    lora = cfg.trainer.cpu.lora
    return None if lora is None else lora.model_dump()
