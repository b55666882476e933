"""One run's whole configuration: :class:`RunConfig`, its sections, and the checks that span sections
(the trainer's temperature follows the sampler's; what the veRL back-end cannot run)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from .base import Section
from .parts import EnvConfig, HarnessConfig, LauncherConfig, ModelConfig
from .rollout import EvalConfig, RolloutConfig
from .trainer import SFTConfig, TrainerConfig

__all__ = ["RunConfig"]


class RunConfig(Section):
    """One training run (``forge recipe NAME`` or ``openforge.run(config)``)."""

    recipe: str = Field(
        "custom", description="the recipe's name (written to the run directory and checkpoints' metadata)")
    algorithm: Literal["grpo", "sft"] = Field(
        "grpo", description="grpo: the SFT warm-start (if enabled) then GRPO steps; sft: the SFT job only")
    run_dir: str | None = Field(None, description="default: runs/<recipe>-<UTC time>")
    cache_dir: str | None = Field(None, description="default: $OPENFORGE_CACHE or ~/.cache/openforge")
    seed: int = Field(0, description="seeds task order, harness mix, fault draws and sampling")
    model: ModelConfig = Field(default_factory=ModelConfig)
    env: EnvConfig = Field(default_factory=EnvConfig)
    harness: HarnessConfig = Field(default_factory=HarnessConfig)
    launcher: LauncherConfig = Field(default_factory=LauncherConfig)
    rollout: RolloutConfig = Field(default_factory=RolloutConfig)
    sft: SFTConfig = Field(default_factory=SFTConfig)
    trainer: TrainerConfig = Field(default_factory=TrainerConfig)
    eval: EvalConfig = Field(default_factory=EvalConfig)

    @model_validator(mode="after")
    def _consistent(self) -> RunConfig:
        problems = []
        if "temperature" not in self.trainer.cpu.model_fields_set:
            self.trainer.cpu.temperature = self.rollout.temperature  # the trainer follows the sampler
        elif self.trainer.backend == "cpu" and self.trainer.cpu.temperature != self.rollout.temperature:
            problems.append(
                f"trainer.cpu.temperature ({self.trainer.cpu.temperature}) must equal rollout.temperature "
                f"({self.rollout.temperature}): the trainer rescales logits by the sampling temperature"
            )
        if self.harness.is_mix and self.trainer.backend == "verl":
            problems.append(f"harness.name: the veRL back-end runs one harness per run, named as a string (got "
                            f"{self.harness.name}); multi-harness runs use trainer.backend=cpu")
        cpu = self.trainer.cpu
        if cpu.target_mixed_groups is not None and cpu.target_mixed_groups < cpu.min_mixed_groups:
            problems.append(f"trainer.cpu.target_mixed_groups ({cpu.target_mixed_groups}) is below "
                            f"trainer.cpu.min_mixed_groups ({cpu.min_mixed_groups}): resampling would stop before "
                            "the step has the mixed groups it needs to train")
        if cpu.reward_shuffle != "off" and self.trainer.backend == "verl":
            problems.append(f"trainer.cpu.reward_shuffle ({cpu.reward_shuffle}): the shuffled-reward control is a CPU "
                            "trainer option (veRL computes its own advantages); use trainer.backend=cpu")
        lora = cpu.lora
        if lora is not None and self.trainer.backend == "verl" and lora.dropout:
            problems.append(f"trainer.cpu.lora.dropout ({lora.dropout}): veRL's LoRA (actor_rollout_ref.model."
                            "lora_rank) has no dropout; set it to 0 for trainer.backend=verl")
        if lora is not None and self.trainer.backend == "verl" and not float(lora.alpha).is_integer():
            problems.append(f"trainer.cpu.lora.alpha ({lora.alpha}): veRL's lora_alpha is an integer; use a whole "
                            "number for trainer.backend=verl")
        if self.algorithm == "sft" and self.trainer.backend == "verl":
            problems.append("algorithm=sft runs on the cpu trainer; use trainer.backend=cpu")
        if problems:
            raise ValueError("; ".join(problems))
        return self
