"""How the policy is trained: :class:`TrainerConfig` (back-end, steps, checkpoints, resume) with the built-in
trainer's :class:`CPUTrainerConfig` (optimiser, GRPO loss, dynamic sampling, memory) and its
:class:`LoraConfig`, veRL's :class:`VerlConfig`, and the supervised warm-start or SFT job (:class:`SFTConfig`)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from .base import Section

__all__ = ["CPUTrainerConfig", "LoraConfig", "LossAgg", "SFTConfig", "SessionWeight", "TrainerConfig", "VerlConfig"]


class SFTConfig(Section):
    """Supervised warm-start (``claw-grpo`` cpu preset) or the whole job (``claw-sft``).

    ``teacher`` is ``reference`` (the tasks' reference solutions replayed as a scripted policy through
    the real harness and proxy) or a back-end spec (``openai:URL``, ``transformers:PATH``, ...).
    """

    enabled: bool = Field(False, description="run the supervised warm-start before GRPO")
    teacher: str = Field(
        "reference", description="reference (the tasks' reference solutions through the real harness) or a "
        "back-end spec")
    k: int = Field(1, ge=1, description="teacher rollouts per task")
    epochs: int = Field(3, ge=1, description="passes over the teacher data")
    batch_size: int = Field(8, ge=1, description="trajectories per optimizer step")
    lr: float = Field(5e-5, gt=0, description="learning rate of the SFT steps")
    max_steps: int | None = Field(None, ge=1, description="stop SFT after this many optimizer steps")
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

    lr: float = Field(2e-5, gt=0, description="AdamW learning rate")
    weight_decay: float = Field(0.0, ge=0, description="AdamW weight decay")
    betas: tuple[float, float] = Field((0.9, 0.999), description="AdamW betas")
    grad_clip: float = Field(1.0, gt=0, description="gradient norm clipped to this before each optimizer step")
    temperature: float = Field(1.0, gt=0, description="must equal the sampling temperature of the rollouts")
    clip_low: float = Field(0.2, ge=0, description="PPO ratio clip below 1 (1 - clip_low)")
    clip_high: float = Field(0.28, ge=0, description="PPO ratio clip above 1 (1 + clip_high; DAPO's clip-higher)")
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
    norm_adv_by_std: bool = Field(
        True, description="divide a group's advantages by its reward std (false: Dr. GRPO's mean-only)")
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
    seed: int = Field(0, description="torch.manual_seed of the trainer (LoRA initialisation, dropout)")

    @model_validator(mode="after")
    def _lora_alone(self) -> CPUTrainerConfig:
        if self.lora is not None and self.trainable_layers is not None:
            raise ValueError("lora and trainable_layers are exclusive: LoRA already freezes the base model "
                             "(set one of them to null)")
        return self


class VerlConfig(Section):
    """What the veRL launcher turns into ``verl.trainer.main_ppo`` overrides."""

    lr: float = Field(1e-6, gt=0, description="actor learning rate")
    n_gpus_per_node: int = Field(1, ge=1, description="GPUs per node")
    nnodes: int = Field(1, ge=1, description="nodes")
    train_batch_size: int = Field(8, ge=1, description="task groups per step")
    ppo_mini_batch_size: int = Field(8, ge=1, description="task groups per actor mini-batch")
    max_prompt_length: int = Field(4096, ge=16, description="longest prompt veRL accepts (tokens)")
    max_response_length: int = Field(4096, ge=16, description="longest response veRL trains (tokens)")
    max_model_len: int = Field(16384, ge=64, description="the rollout engine's context length (tokens)")
    ppo_max_token_len_per_gpu: int = Field(
        32768, ge=64, description="tokens per GPU in a dynamic-batch forward/backward")
    tensor_model_parallel_size: int = Field(1, ge=1, description="tensor parallelism of the vLLM rollout engine")
    gpu_memory_utilization: float = Field(
        0.6, gt=0, le=1, description="share of GPU memory the vLLM rollout engine takes")
    agent_workers: int = Field(8, ge=1, description="agent-loop workers (each runs one openforge proxy)")
    total_epochs: int = Field(1, ge=1, description="passes over the training tasks")
    episode_timeout_s: float = Field(1800.0, gt=0, description="wall-clock limit of one episode in the agent loop")
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


class TrainerConfig(Section):
    backend: Literal["cpu", "verl"] = Field(
        "cpu", description="cpu: the built-in PyTorch trainer; verl: veRL's main_ppo (GPUs, or device=cpu)")
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
