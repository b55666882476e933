"""How rollouts are sampled and measured: :class:`RolloutConfig` (the GRPO groups, sampling, the sampling
engine, the error budget) and :class:`EvalConfig` with its :class:`HeldoutConfig` (a CPU run's held-out
before/after)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from .base import Section

__all__ = ["EvalConfig", "HeldoutConfig", "RolloutConfig"]


class RolloutConfig(Section):
    """How rollouts are sampled. ``temperature`` is enforced by the proxy and used by the trainer."""

    group_size: int = Field(4, ge=2, description="rollouts per task (GRPO group)")
    tasks_per_step: int = Field(
        4, ge=1, description="tasks rolled out per GRPO step (each as a group of group_size)")
    temperature: float = Field(
        1.0, gt=0, description="sampling temperature, enforced by the proxy whatever the harness asks")
    max_tokens: int = Field(256, ge=1, description="cap on generated tokens per model call")
    concurrency: int = Field(4, ge=1, description="rollouts in flight at once")
    timeout_s: float | None = Field(None, gt=0, description="wall-clock budget per rollout (default: the task's)")
    max_error_share: float = Field(
        0.5, ge=0, le=1, description="a training run stops (an error naming the cause) once more than this share of "
        "its rollouts so far were not trainable (env_error, harness_error, infra_error); 1: only when none was")
    engine: Literal["transformers", "vllm"] = Field(
        "transformers", description="what samples a CPU run's rollouts: transformers (in-process, the trainer's own "
        "module) or vllm (a vLLM CPU server that gets each new policy: the LoRA adapter, or the full weights; "
        "falls back to transformers, saying why, where vLLM cannot run)")
    vllm_url: str = Field("http://127.0.0.1:18765?logprobs_mode=processed_logprobs", description="the vLLM server of "
                          "engine=vllm (scripts/vllm-server.sh's: it returns processed, tempered logprobs)")
    vllm_start: bool = Field(True, description="engine=vllm with no server answering: start one with "
                             "scripts/vllm-server.sh (a source checkout's), stopped again at the end of the run")
    train_calls: Literal["harness", "all"] = Field(
        "harness", description="which model calls of a rollout are trained: harness (those on the harness's own "
        "lineages; a call another process in the sandbox made, e.g. a tool script calling the proxy URL, is "
        "labelled foreign and skipped) or all")


class HeldoutConfig(Section):
    """The before/after of a CPU run on tasks it does not train on (see :mod:`openforge.analysis.heldout`):
    the tasks of ``split`` (or ``tasks``), ``trials`` rollouts each through every harness of the run,
    once before the warm-start and once at the end. A task the run trains on is refused."""

    enabled: bool = Field(
        False, description="measure held-out success before (untrained), at the warm-start and after training")
    split: str = Field("heldout", description="environment split of the held-out tasks")
    tasks: list[str] | None = Field(None, description="explicit task ids instead of the split")
    max_tasks: int | None = Field(None, ge=1, description="at most this many held-out tasks")
    trials: int = Field(3, ge=1, description="rollouts per task and harness at each point")
    max_tokens: int | None = Field(None, ge=1, description="budget of generated tokens per held-out rollout, over "
                                   "all its calls (each call gets at most what is left; a call that finds it "
                                   "spent is refused and the rollout counts as the policy's failure); null: none")
    cache: bool = Field(True, description="reuse a clean 'before' measured earlier with the same model, tasks, "
                        "harnesses and sampling (see openforge.runner.heldout_eval)")


class EvalConfig(Section):
    heldout: HeldoutConfig = Field(default_factory=HeldoutConfig)
