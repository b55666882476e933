"""Run configuration: pydantic models (``extra="forbid"``), YAML loading, ``key=value`` overrides.

Owns: :class:`RunConfig` and its sections (:class:`ModelConfig`, :class:`EnvConfig`,
:class:`HarnessConfig`, :class:`LauncherConfig`, :class:`RolloutConfig`, :class:`SFTConfig`,
:class:`TrainerConfig`, :class:`CPUTrainerConfig`, :class:`LoraConfig`, :class:`VerlConfig`, :class:`EvalConfig`),
:func:`load_config` (YAML file or dict + preset + overrides → validated config) and
:func:`dump_config`. ``key=value`` overrides are parsed and merged by :mod:`openforge.util.overrides`
(:func:`parse_overrides`, :func:`apply_overrides`, re-exported here).

Every problem is reported at once: unknown keys, bad types, bad values and malformed overrides are
gathered into one :class:`~openforge.core.errors.ConfigError`, each named by its dotted key
(``rollout.group_size: Input should be greater than or equal to 2``), before anything starts.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal, get_args

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_serializer, model_validator
from pydantic_core import PydanticCustomError

from .core.errors import ConfigError
from .util.overrides import apply_overrides, parse_overrides

__all__ = [
    "CPUTrainerConfig",
    "EnvConfig",
    "EvalConfig",
    "HarnessConfig",
    "HeldoutConfig",
    "LauncherConfig",
    "LoraConfig",
    "LossAgg",
    "ModelConfig",
    "RolloutConfig",
    "RunConfig",
    "SFTConfig",
    "SessionWeight",
    "TrainerConfig",
    "VerlConfig",
    "apply_overrides",
    "dump_config",
    "load_config",
    "parse_overrides",
]


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ModelConfig(_Section):
    """The policy: ``smollm2-135m`` (embedded CPU default) or a local HF directory; for veRL a HF
    id or path the GPU nodes can load."""

    name: str = "smollm2-135m"


class EnvConfig(_Section):
    """Which tasks: an environment name, its split, an optional named subset, explicit ids."""

    name: str = "claw"
    split: Literal["train", "eval", "heldout"] = "train"
    subset: str | None = Field(None, description="a named subset of the environment, e.g. 'easy'")
    task_ids: list[str] | None = None
    max_tasks: int | None = Field(None, ge=1)
    options: dict[str, Any] = Field(default_factory=dict)


class HarnessConfig(_Section):
    """Which harness (or harnesses) and their constructor options.

    ``name`` is one harness, a list of harnesses (equal weights) or a weighted mix
    (``{react: 2, pi: 1}``): each GRPO group then runs one harness of the mix (see
    :mod:`openforge.runner.harness_mix`). ``per_harness`` holds option blocks for several harnesses
    (``{react: {max_turns: 4}, pi: {}}``). With one harness its block is merged over ``options`` at
    validation, so ``options`` is what the harness gets (``per_harness`` is not written to the resolved
    config); with a mix ``options`` are common to all and each harness gets them with its block over
    them (:meth:`options_for`; the blocks stay in the resolved config). A key set in both places to
    different values is an error, never a silent override. The options are checked against each
    chosen harness's constructor by :func:`load_config`.
    """

    name: str | list[str] | dict[str, int] = "react"
    options: dict[str, Any] = Field(default_factory=dict)
    per_harness: dict[str, dict[str, Any]] = Field(
        default_factory=dict, description="option blocks per harness name; the chosen ones are merged over options")

    def names(self) -> list[str]:
        """The chosen harnesses, in the order given."""
        return list(self.weights())

    def weights(self) -> dict[str, int]:
        """Harness → integer weight (1 each for a single name or a list)."""
        if isinstance(self.name, str):
            return {self.name: 1}
        if isinstance(self.name, list):
            return dict.fromkeys(self.name, 1)
        return dict(self.name)

    @property
    def is_mix(self) -> bool:
        return not isinstance(self.name, str)

    def block_key(self, name: str | None = None) -> str | None:
        """The ``per_harness`` key of harness ``name`` (default: the single chosen one); names compare
        like the registry's."""
        name = name if name is not None else (self.name if isinstance(self.name, str) else "")
        norm = _harness_key(name)
        return next((k for k in self.per_harness if _harness_key(k) == norm), None)

    def options_for(self, name: str) -> dict[str, Any]:
        """The constructor options harness ``name`` of this config gets."""
        if not self.is_mix:
            return dict(self.options)
        key = self.block_key(name)
        return {**self.options, **(self.per_harness[key] if key is not None else {})}

    def as_run(self) -> dict[str, list[Any]]:
        """Each chosen harness → ``[weight, options]``: what runs, whichever way the config spelled it
        (``react``, ``[react]`` and ``{react: 1}`` are equal here; cache keys use this)."""
        return {n: [w, self.options_for(n)] for n, w in self.weights().items()}

    def _clashes(self, key: str) -> list[str]:
        block = self.per_harness[key]
        return [f"options.{k}={self.options[k]!r} clashes with per_harness.{key}.{k}={v!r} (the harness's "
                f"block wins): set harness.per_harness.{key}.{k} instead"
                for k, v in block.items() if k in self.options and self.options[k] != v]

    @model_validator(mode="after")
    def _merge_block(self) -> HarnessConfig:
        if self.is_mix:
            problems = _mix_problems(self.weights(), list(self.name))
            keys = [k for k in (self.block_key(n) for n in self.names()) if k is not None]
            problems += [c for k in keys for c in self._clashes(k)]
            if problems:
                raise PydanticCustomError("harness_options", "; ".join(problems))
            return self
        key = self.block_key()
        if key is None:
            return self
        clashes = self._clashes(key)
        if clashes:
            raise PydanticCustomError("harness_options", "; ".join(clashes))
        self.options = {**self.options, **self.per_harness[key]}
        return self

    @model_serializer(mode="wrap")
    def _dump(self, handler: Any) -> dict[str, Any]:
        out = handler(self)
        if not self.is_mix:  # one harness: its block is already merged into options
            out.pop("per_harness", None)
        return out


def _mix_problems(weights: dict[str, int], given: list[str]) -> list[str]:
    """What is wrong with a list or mix of harness names (empty, repeated, weight < 1)."""
    if not given:
        return ["name: an empty list of harnesses; give at least one"]
    problems = [f"name.{n}: weight {w!r} must be an integer >= 1" for n, w in weights.items()
                if not isinstance(w, int) or isinstance(w, bool) or w < 1]
    norm = [_harness_key(n) for n in given]
    dupes = sorted({n for n in norm if norm.count(n) > 1})
    if dupes:
        problems.append(f"name: harness {', '.join(dupes)} given more than once")
    return problems


def _harness_key(name: str) -> str:
    return name.strip().lower().replace("_", "-")


class LauncherConfig(_Section):
    name: str = "local"
    options: dict[str, Any] = Field(default_factory=dict)


class RolloutConfig(_Section):
    """How rollouts are sampled. ``temperature`` is enforced by the proxy and used by the trainer."""

    group_size: int = Field(4, ge=2, description="rollouts per task (GRPO group)")
    tasks_per_step: int = Field(4, ge=1)
    temperature: float = Field(1.0, gt=0)
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


class SFTConfig(_Section):
    """Supervised warm-start (``claw-grpo`` cpu preset) or the whole job (``claw-sft``).

    ``teacher`` is ``reference`` (the tasks' reference solutions replayed as a scripted policy through
    the real harness and proxy) or a back-end spec (``openai:URL``, ``transformers:PATH``, ...).
    """

    enabled: bool = False
    teacher: str = "reference"
    k: int = Field(1, ge=1, description="teacher rollouts per task")
    epochs: int = Field(3, ge=1)
    batch_size: int = Field(8, ge=1, description="trajectories per optimizer step")
    lr: float = Field(5e-5, gt=0)
    max_steps: int | None = Field(None, ge=1)
    data: str | None = Field(None, description="an exported SFT file (token format) instead of a teacher")
    autocast_bf16: bool | Literal["auto"] = Field(
        "auto", description="bf16 autocast for SFT steps: ~2x faster on CPUs with native bf16 (AVX512-BF16, AMX), "
        "many times slower on the others (emulated); auto uses it only where it is native")
    task_scope: Literal["run", "split"] = Field(
        "run", description="teacher tasks: the run's tasks (subset/max_tasks applied) or every task of env.split")
    cache: bool = Field(True, description="reuse a warm-start already trained with the same settings")


LossAgg = Literal["rollout-mean", "token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"]
SessionWeight = Literal["none", "equal"]


class LoraConfig(BaseModel):
    """``trainer.cpu.lora``: train a LoRA adapter (:mod:`openforge.train.lora`, ``peft``) instead of every weight.

    The base model stays frozen; AdamW holds state only for the adapter; a checkpoint holds the adapter
    (megabytes) and names its base. The SFT warm-start trains the same adapter, so every checkpoint is the
    run's starting model plus one adapter. veRL runs get the same rank, alpha and target modules."""

    model_config = ConfigDict(extra="forbid")

    rank: int = Field(16, ge=1, le=1024, description="the adapter's rank r")
    alpha: float = Field(32.0, gt=0, description="scaling: the update is (alpha / rank) * B A")
    dropout: float = Field(0.0, ge=0, lt=1, description="dropout on the adapter's input during training steps "
                           "(sampling never drops; > 0 makes the trainer's logprobs differ from the sampler's)")
    target_modules: str | list[str] = Field(
        "all-linear", description="all-linear (every linear layer but the output head), or module names, "
        "e.g. [q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj]")

    @model_validator(mode="after")
    def _targets(self) -> LoraConfig:
        t = self.target_modules
        if isinstance(t, str) and t != "all-linear":
            raise ValueError(f"target_modules: expected 'all-linear' or a list of module names, got {t!r}")
        if isinstance(t, list) and (not t or any(not m.strip() for m in t)):
            raise ValueError("target_modules: the list of module names is empty or has an empty name")
        return self


class CPUTrainerConfig(BaseModel):
    """Optimiser and loss settings of the built-in trainer."""

    model_config = ConfigDict(extra="forbid")

    lr: float = Field(2e-5, gt=0)
    weight_decay: float = Field(0.0, ge=0)
    betas: tuple[float, float] = (0.9, 0.999)
    grad_clip: float = Field(1.0, gt=0)
    temperature: float = Field(1.0, gt=0, description="must equal the sampling temperature of the rollouts")
    clip_low: float = Field(0.2, ge=0)
    clip_high: float = Field(0.28, ge=0)
    clip_ratio_c: float | None = Field(3.0, gt=1, description="dual-clip bound for negative advantages "
                                       "(veRL's clip_ratio_c; null: off)")
    log_ratio_clamp: float = Field(20.0, gt=0, description="|log(new/old)| is clamped to this before exp")
    kl_coef: float = Field(0.0, ge=0, description="k3 KL to the policy GRPO starts from (0 = no reference model)")
    loss_agg: LossAgg = Field("rollout-mean", description="rollout-mean | token-mean | seq-mean-token-mean | "
                              "seq-mean-token-sum-norm (see openforge.train.grpo)")
    loss_scale_tokens: int = Field(4096, ge=1, description="constant normaliser of seq-mean-token-sum-norm (Dr. GRPO)")
    session_weight: SessionWeight = Field(
        "none", description="none: the loss_agg weights as they are; equal: every session (a rollout, or the rollouts "
        "sharing metadata.session_id) weighs the same in the batch, however many segments (sub-agents, compaction "
        "branches) it split into (see openforge.train.grpo)")
    norm_adv_by_std: bool = True
    skip_zero_advantage: bool = Field(True, description="leave out tied groups (reward std < 1e-6: no signal)")
    reward_shuffle: Literal["off", "group", "step"] = Field(
        "off", description="the shuffled-reward control: permute each step's rewards across its rollouts before the "
        "advantages (group: within each task group, the groups' reward sets unchanged; step: across all the step's "
        "groups); off: rewards as scored (see openforge.train.reward_shuffle)")
    min_mixed_groups: int = Field(1, ge=0, description="groups with differing rewards a step needs before it "
                                  "trains (a step left with fewer takes no gradient step; 0: dynamic sampling off)")
    target_mixed_groups: int | None = Field(
        None, ge=0, description="dynamic sampling: a step draws the next tasks_per_step tasks (at most "
        "max_resample_rounds times) until this many of its groups have differing rewards (default: "
        "rollout.tasks_per_step, i.e. a full step of mixed groups; 0 when min_mixed_groups is 0)")
    max_resample_rounds: int = Field(2, ge=0, description="dynamic sampling: extra rounds of tasks drawn when a "
                                     "step has fewer than target_mixed_groups mixed groups")
    ppo_epochs: int = Field(1, ge=1, description="optimizer steps per batch of rollouts")
    micro_batch_tokens: int = Field(2048, ge=1, description="padded tokens per forward/backward micro-batch")
    logprob_chunk: int = Field(128, ge=1, description="positions per lm_head/log_softmax chunk")
    share_prefix: bool = Field(True, description="run a prompt prefix the segments of a micro-batch share through "
                               "the decoder once (llama/qwen2/qwen3; see openforge.train.logprobs)")
    autocast_bf16: bool = Field(False, description="bf16 autocast (faster; breaks fp32 ratio consistency)")
    gradient_checkpointing: bool = Field(
        False, description="recompute each decoder layer's activations during backward instead of keeping them "
        "(a step's activation memory drops to about one layer's; the decoder runs forward twice)")
    trim_memory: bool = Field(
        False, description="return the C heap's free pages to the system after each micro-batch (glibc "
        "malloc_trim): a step's peak RSS holds less of the earlier micro-batches' freed activations, at the "
        "cost of faulting those pages in again")
    trainable_layers: int | None = Field(
        None, ge=1, description="train only the last N decoder layers + final norm (None: every parameter); "
        "backward then stops below them, ~2x cheaper steps on CPU")
    threads: int | None = Field(None, ge=1, description="torch threads (default: torch's choice)")
    save_optimizer_state: bool = Field(
        True, description="write AdamW's state (twice the weights' size) into the checkpoint a resume loads, so a "
        "resumed run continues the optimizer exactly; false: a resume starts a fresh AdamW from the saved weights "
        "(the log says so) and each checkpoint is a third of the size")
    lora: LoraConfig | None = Field(None, description="train a LoRA adapter instead of every weight (null: full "
                                    "fine-tuning); {rank, alpha, dropout, target_modules}")
    seed: int = 0

    @model_validator(mode="after")
    def _lora_alone(self) -> CPUTrainerConfig:
        if self.lora is not None and self.trainable_layers is not None:
            raise ValueError("lora and trainable_layers are exclusive: LoRA already freezes the base model "
                             "(set one of them to null)")
        return self


class VerlConfig(_Section):
    """What the veRL launcher turns into ``verl.trainer.main_ppo`` overrides."""

    lr: float = Field(1e-6, gt=0, description="actor learning rate")
    n_gpus_per_node: int = Field(1, ge=1)
    nnodes: int = Field(1, ge=1)
    train_batch_size: int = Field(8, ge=1, description="task groups per step")
    ppo_mini_batch_size: int = Field(8, ge=1)
    max_prompt_length: int = Field(4096, ge=16)
    max_response_length: int = Field(4096, ge=16)
    max_model_len: int = Field(16384, ge=64)
    ppo_max_token_len_per_gpu: int = Field(32768, ge=64)
    tensor_model_parallel_size: int = Field(1, ge=1)
    gpu_memory_utilization: float = Field(0.6, gt=0, le=1)
    agent_workers: int = Field(8, ge=1)
    total_epochs: int = Field(1, ge=1)
    episode_timeout_s: float = Field(1800.0, gt=0)
    filter_groups: bool = Field(False, description="DAPO dynamic sampling: drop zero-variance groups")
    refill_failed_groups: bool = Field(
        True, description="a group failed by an infra error is replaced by a fresh one "
        "(trainer.v1.sampler.sync_refill_failed_groups; veRL then dispatches prompts one at a time)")
    val_group_size: int = Field(1, ge=1, description="rollouts per validation task (veRL's val_kwargs.n)")
    loss_agg: Literal["rollout-mean", "token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"] | None = Field(
        None, description="actor.loss_agg_mode (default: trainer.cpu.loss_agg, so both back-ends optimise one "
        "objective; rollout-mean has no veRL equivalent and is refused)")
    loss_scale_factor: int | None = Field(
        None, ge=1, description="seq-mean-token-sum-norm's constant divisor (default: max_response_length)")
    device: Literal["cuda", "cpu"] = Field(
        "cuda", description="cpu: veRL's own trainer on CPU (openforge's CPU platform plugin, FSDP2 over gloo, the "
        "transformers rollout replica); for checks and small models, see docs/verl.md")
    ray_num_cpus: int = Field(
        8, ge=1, description="logical CPUs declared to Ray on a device=cpu run (scheduling slots, not cores: "
        "veRL's TaskRunner, TransferQueue controller and storage, agent-loop and reward workers each hold one)")
    ray_object_store_mb: int = Field(256, ge=64, description="Ray object store on a device=cpu run (MB)")
    network: Literal["auto", "loopback", "host"] = Field(
        "auto", description="loopback: main_ppo runs in a network namespace whose only interface is loopback "
        "(Ray binds every interface otherwise); host: the machine's network (a hub model id, a remote logger); "
        "auto: loopback on a device=cpu run where this machine can make one, else host")
    extra_overrides: list[str] = Field(default_factory=list, description="raw Hydra overrides appended last")


class HeldoutConfig(_Section):
    """The before/after of a CPU run on tasks it does not train on (see :mod:`openforge.analysis.heldout`):
    the tasks of ``split`` (or ``tasks``), ``trials`` rollouts each through every harness of the run,
    once before the warm-start and once at the end. A task the run trains on is refused."""

    enabled: bool = False
    split: str = Field("heldout", description="environment split of the held-out tasks")
    tasks: list[str] | None = Field(None, description="explicit task ids instead of the split")
    max_tasks: int | None = Field(None, ge=1)
    trials: int = Field(3, ge=1, description="rollouts per task and harness at each point")
    max_tokens: int | None = Field(None, ge=1, description="budget of generated tokens per held-out rollout, over "
                                   "all its calls (each call gets at most what is left; a call that finds it "
                                   "spent is refused and the rollout counts as the policy's failure); null: none")
    cache: bool = Field(True, description="reuse a clean 'before' measured earlier with the same model, tasks, "
                        "harnesses and sampling (see openforge.runner.heldout_eval)")


class EvalConfig(_Section):
    heldout: HeldoutConfig = Field(default_factory=HeldoutConfig)


class TrainerConfig(_Section):
    backend: Literal["cpu", "verl"] = "cpu"
    steps: int = Field(2, ge=0, description="GRPO steps (0: rollouts and metrics only)")
    checkpoint_every: int = Field(1, ge=0, description="save every N steps (0: only at the end)")
    keep_checkpoints: int | None = Field(2, ge=1, description="full checkpoints kept: the last N (null: all); "
                                         "a step that changed no weight writes none")
    keep_best: bool = Field(True, description="also keep the checkpoint whose rollouts scored the best mean reward")
    resume: bool = Field(True, description="continue from the run directory's latest checkpoint")
    resume_missing_state: Literal["refuse", "fresh"] = Field(
        "refuse", description="a checkpoint to resume from that lacks its optimizer state or KL reference: "
        "refuse (the error names the file), or fresh (a new AdamW; the loaded weights as the KL reference)")
    cpu: CPUTrainerConfig = Field(default_factory=CPUTrainerConfig)
    verl: VerlConfig = Field(default_factory=VerlConfig)


class RunConfig(_Section):
    """One training run (``forge recipe NAME`` or ``openforge.run(config)``)."""

    recipe: str = "custom"
    algorithm: Literal["grpo", "sft"] = "grpo"
    run_dir: str | None = Field(None, description="default: runs/<recipe>-<UTC time>")
    cache_dir: str | None = Field(None, description="default: $OPENFORGE_CACHE or ~/.cache/openforge")
    seed: int = 0
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


#: Keys that configs once accepted and that did nothing: a config still setting one gets this, not
#: "unknown key".
REMOVED_KEYS = {
    "trainer.verl.tool_parser": "removed (it was never used: the proxy parses each harness's tool calls "
                                "itself); delete the key",
}


def _format_errors(err: ValidationError) -> list[str]:
    problems = []
    for e in err.errors():
        loc = ".".join(str(p) for p in e["loc"]) or "(config)"
        msg = e["msg"]
        if e["type"] == "extra_forbidden":
            msg = REMOVED_KEYS.get(loc) or _unknown_key(e["loc"])
        problems.append(f"{loc}: {msg}")
    return problems


def _section_model(loc: Sequence[Any]) -> type[BaseModel] | None:
    """The config section (a pydantic model) at ``loc`` below :class:`RunConfig`, if it is one."""
    model: type[BaseModel] = RunConfig
    for part in loc:
        field = model.model_fields.get(str(part))
        if field is None:
            return None
        found = [t for t in (field.annotation, *get_args(field.annotation))
                 if isinstance(t, type) and issubclass(t, BaseModel)]
        if not found:
            return None
        model = found[0]
    return model


def _unknown_key(loc: Sequence[Any]) -> str:
    """"unknown key", with the keys of its section that it is close to (a typo: ``rollout.grop_size``)."""
    import difflib

    model = _section_model(loc[:-1])
    if model is None:
        return "unknown key"
    close = difflib.get_close_matches(str(loc[-1]), list(model.model_fields), n=2, cutoff=0.6)
    where = ".".join(map(str, loc[:-1]))
    if close:
        return "unknown key (did you mean " + " or ".join(f"{where}.{c}" if where else c for c in close) + "?)"
    return f"unknown key (the keys of {where or 'the config'}: {', '.join(model.model_fields)})"


def _harness_problems(raw: Any) -> list[str]:
    """The chosen harness's options (after the merge of its block) and every ``per_harness`` block,
    each checked against its harness's constructor (see :mod:`openforge.harnesses.options`)."""
    from .harnesses.options import option_problems

    try:
        h = HarnessConfig.model_validate(raw or {})
    except ValidationError:
        return []  # already reported by the RunConfig validation
    if h.is_mix:  # each harness of the mix with the options it gets; the common ones named as such
        problems: list[str] = []
        for name in h.names():
            key = h.block_key(name)
            common = {k: v for k, v in h.options.items() if key is None or k not in h.per_harness[key]}
            problems += option_problems(name, common, "harness.options", name_key=f"harness.name.{name}")
            if key is not None:
                problems += option_problems(name, h.per_harness[key], f"harness.per_harness.{key}",
                                            name_key=f"harness.name.{name}")
        chosen = {h.block_key(n) for n in h.names()}
    else:
        chosen = {h.block_key()}
        problems = option_problems(h.name, h.options, "harness.options", name_key="harness.name")
    for key, block in h.per_harness.items():
        if key not in chosen:
            problems += option_problems(key, block, f"harness.per_harness.{key}")
    return list(dict.fromkeys(problems))  # a common option wrong for two harnesses: once per harness


def load_config(
    source: str | Path | dict[str, Any] | RunConfig | None = None,
    *,
    preset: str | None = None,
    overrides: list[str] | tuple[str, ...] | dict[str, Any] = (),
) -> RunConfig:
    """Build a validated :class:`RunConfig` from a YAML file / dict, a preset and overrides.

    A source may carry ``presets: {name: {...}}``; ``preset`` merges one of them over the base.
    Raises one :class:`ConfigError` listing every problem.
    """
    problems: list[str] = []
    if isinstance(source, RunConfig):
        data: dict[str, Any] = source.model_dump(mode="json")
    elif isinstance(source, (str, Path)):
        path = Path(source)
        try:
            data = yaml.safe_load(path.read_text()) or {}
        except OSError as e:
            raise ConfigError(f"{path}: {e.strerror or e}") from None
        except yaml.YAMLError as e:
            raise ConfigError(f"{path}: not valid YAML ({e})") from None
        if not isinstance(data, dict):
            raise ConfigError(f"{path}: the top level must be a mapping")
    else:
        data = copy.deepcopy(source or {})
    presets = data.pop("presets", {}) or {}
    data.pop("description", None)
    default_preset = data.pop("default_preset", None)
    if preset is None:
        preset = default_preset
    if preset is not None:
        if preset not in presets:
            problems.append(f"preset {preset!r} is not defined (available: {', '.join(presets) or 'none'})")
        else:
            data = apply_overrides(data, presets[preset] or {})
    if isinstance(overrides, dict):
        ov, bad = overrides, []
    else:
        ov, bad = parse_overrides(list(overrides))
    problems += bad
    data = apply_overrides(data, ov)
    try:
        cfg = RunConfig.model_validate(data)
    except ValidationError as e:
        problems += _format_errors(e)
        cfg = None
    problems += _harness_problems(data.get("harness"))
    if problems or cfg is None:
        raise ConfigError(problems)
    return cfg


def dump_config(cfg: RunConfig, path: str | Path) -> Path:
    """Write the resolved config as YAML (what the run actually used)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False))
    return path
