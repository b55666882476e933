"""Launch GRPO on veRL: dataset, agent-loop registration and ``verl.trainer.main_ppo`` overrides.

Owns: :func:`build_dataset` (parquet with the ``prompt`` column veRL's ``RLHFDataset`` needs and the
openforge task in ``extra_info``), :func:`agent_loop_entries` / :func:`write_agent_loop_yaml` (the
YAML veRL reads through ``actor_rollout_ref.rollout.agent.agent_loop_config_path``),
:func:`loss_agg_mode` (openforge's loss aggregation → veRL's ``actor.loss_agg_mode``),
:func:`verl_overrides` (the Hydra overrides: GRPO, V1 sync trainer, vLLM async rollout, group
size, batch sizes, token budgets, loss aggregation, refill of failed groups, the openforge agent
loop), :func:`network_prefix` (a device=cpu run in a loopback-only network namespace, see
:mod:`.netns`) and :func:`launch` (writes all of it into the run directory and runs
``python -m verl.trainer.main_ppo``; ``dry_run`` only prints).

Group sizes travel in the dataset: each row's ``extra_info["group_size"]`` is the number of
sessions veRL starts for it (``rollout.n`` for training rows, ``val_kwargs.n`` for validation
rows, which also carry veRL's per-row ``__rollout_n__``), so the agent loop's group barrier never
waits for sessions that will not come.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from ...core.errors import ConfigError

if TYPE_CHECKING:
    from ...config import RunConfig
    from ...core.task import Task

__all__ = ["agent_loop_entries", "build_dataset", "cpu_overrides", "launch", "loss_agg_mode", "model_path",
           "run_env", "verl_overrides", "write_agent_loop_yaml"]

AGENT_NAME = "openforge"
AGENT_TARGET = "openforge.train.verl.agent_loop.OpenForgeAgentLoop"
#: openforge loss aggregation → veRL ``actor.loss_agg_mode`` (same names, same formulas per row)
VERL_LOSS_AGG = {"token-mean": "token-mean", "seq-mean-token-mean": "seq-mean-token-mean",
                 "seq-mean-token-sum-norm": "seq-mean-token-sum-norm"}


def dataset_rows(tasks: Sequence[Task], *, environment: str, group_size: int | None = None,
                 validation: bool = False) -> list[dict[str, Any]]:
    """One row per task. ``prompt`` is informational (the harness builds its own prompts).

    ``group_size`` is how many sessions veRL runs per row; validation rows also carry it as veRL's
    ``__rollout_n__`` (which veRL pops before the agent loop sees the row)."""
    rows = []
    for i, t in enumerate(tasks):
        extra: dict[str, Any] = {"index": i, "task_id": t.id, "environment": environment,
                                 "task": t.model_dump_json(), "split": "val" if validation else "train"}
        if group_size:
            extra["group_size"] = group_size
        row: dict[str, Any] = {
            "prompt": [{"role": "user", "content": t.instruction}],
            "data_source": f"openforge/{environment}",
            "reward_model": {"style": "rule", "ground_truth": ""},
            "extra_info": extra,
            "agent_name": AGENT_NAME,
        }
        if validation and group_size:
            row["__rollout_n__"] = group_size
        rows.append(row)
    return rows


def build_dataset(tasks: Sequence[Task], path: str | Path, *, environment: str,
                  group_size: int | None = None, validation: bool = False) -> Path:
    """Write the veRL dataset parquet for ``tasks`` (``validation``: the val_files dataset)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = dataset_rows(tasks, environment=environment, group_size=group_size, validation=validation)
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def agent_loop_entries(cfg: RunConfig) -> list[dict[str, Any]]:
    """The agent-loop registry entry; extra keys arrive as ``OpenForgeAgentLoop`` kwargs."""
    return [{
        "name": AGENT_NAME,
        "_target_": AGENT_TARGET,
        "harness": cfg.harness.name,
        "harness_options": dict(cfg.harness.options),
        "launcher": cfg.launcher.name,
        "launcher_options": dict(cfg.launcher.options),
        "environment": cfg.env.name,
        "environment_options": dict(cfg.env.options),
        "episode_timeout_s": cfg.trainer.verl.episode_timeout_s,
        "rollout_timeout_s": cfg.rollout.timeout_s,
        "train_calls": cfg.rollout.train_calls,
        "max_tokens": cfg.rollout.max_tokens,
        "max_model_len": cfg.trainer.verl.max_model_len,
    }]


def write_agent_loop_yaml(cfg: RunConfig, path: str | Path) -> Path:
    path = Path(path).resolve()  # absolute: Ray workers on other nodes have another cwd
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(agent_loop_entries(cfg), sort_keys=False))
    return path


def loss_agg_mode(cfg: RunConfig) -> str:
    """veRL's ``actor.loss_agg_mode`` for the run: ``trainer.verl.loss_agg``, else ``trainer.cpu.loss_agg``.

    ``rollout-mean`` (every rollout weighs the same, its segments sharing that weight) is refused:
    veRL normalises per mini-batch of rows and no per-row weight reaches its policy loss. For the same
    reason ``trainer.cpu.session_weight: equal`` is refused."""
    if cfg.trainer.cpu.session_weight != "none":
        raise ConfigError(
            f"trainer.cpu.session_weight={cfg.trainer.cpu.session_weight!r} has no veRL equivalent (veRL weighs rows, "
            "i.e. segments, and no per-row weight reaches its policy loss); set it to 'none' for trainer.backend=verl")
    mode = cfg.trainer.verl.loss_agg or cfg.trainer.cpu.loss_agg
    key = "trainer.verl.loss_agg" if cfg.trainer.verl.loss_agg else "trainer.cpu.loss_agg"
    if mode not in VERL_LOSS_AGG:
        raise ConfigError(
            f"{key}={mode!r} has no veRL equivalent (veRL weighs rows, i.e. segments, not rollouts); set "
            f"trainer.verl.loss_agg to one of {', '.join(VERL_LOSS_AGG)} (token-mean is closest: every trained "
            "token weighs the same, so long rollouts weigh more). See docs/verl.md, 'Loss aggregation'.")
    return VERL_LOSS_AGG[mode]


def verl_overrides(cfg: RunConfig, *, train_file: str | Path, val_file: str | Path,
                   agent_loop_path: str | Path, run_dir: str | Path) -> list[str]:
    """Hydra overrides for ``python -m verl.trainer.main_ppo`` (verl 0.9.1, V1 trainer)."""
    v = cfg.trainer.verl
    n = cfg.rollout.group_size
    agg = loss_agg_mode(cfg)
    ov = [
        "algorithm.adv_estimator=grpo",
        "algorithm.use_kl_in_reward=false",
        f"data.train_files={Path(train_file).resolve()}",
        f"data.val_files={Path(val_file).resolve()}",
        f"data.train_batch_size={v.train_batch_size}",
        f"data.max_prompt_length={v.max_prompt_length}",
        f"data.max_response_length={v.max_response_length}",
        "data.filter_overlong_prompts=false",
        "data.return_raw_chat=true",
        f"actor_rollout_ref.model.path={model_path(cfg.model.name)}",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={v.ppo_mini_batch_size}",
        "actor_rollout_ref.actor.use_dynamic_bsz=true",
        f"actor_rollout_ref.actor.ppo_max_token_len_per_gpu={v.ppo_max_token_len_per_gpu}",
        "actor_rollout_ref.actor.use_kl_loss=false",
        f"actor_rollout_ref.actor.loss_agg_mode={agg}",
        f"actor_rollout_ref.actor.optim.lr={v.lr}",
        "actor_rollout_ref.rollout.name=vllm",
        "actor_rollout_ref.rollout.mode=async",
        f"actor_rollout_ref.rollout.n={n}",
        f"actor_rollout_ref.rollout.val_kwargs.n={v.val_group_size}",
        f"actor_rollout_ref.rollout.temperature={cfg.rollout.temperature}",
        "actor_rollout_ref.rollout.top_p=1.0",
        "actor_rollout_ref.rollout.top_k=-1",
        f"actor_rollout_ref.rollout.tensor_model_parallel_size={v.tensor_model_parallel_size}",
        f"actor_rollout_ref.rollout.gpu_memory_utilization={v.gpu_memory_utilization}",
        f"actor_rollout_ref.rollout.max_model_len={v.max_model_len}",
        "actor_rollout_ref.rollout.calculate_log_probs=true",
        f"actor_rollout_ref.rollout.agent.num_workers={v.agent_workers}",
        f"actor_rollout_ref.rollout.agent.agent_loop_config_path={Path(agent_loop_path).resolve()}",
        f"actor_rollout_ref.rollout.agent.default_agent_loop={AGENT_NAME}",
        "algorithm.rollout_correction.rollout_is=token",
        "trainer.use_v1=true",
        "trainer.v1.trainer_mode=sync",
        f"trainer.v1.sampler.sync_refill_failed_groups={str(v.refill_failed_groups).lower()}",
        f"trainer.n_gpus_per_node={v.n_gpus_per_node}",
        f"trainer.nnodes={v.nnodes}",
        "trainer.logger=[console]",
        "trainer.val_before_train=false",
        f"trainer.total_epochs={v.total_epochs}",
        f"trainer.default_local_dir={Path(run_dir).resolve() / 'checkpoints'}",
        "trainer.project_name=openforge",
        f"trainer.experiment_name={cfg.recipe}",
    ]
    if agg == "seq-mean-token-sum-norm":  # a constant divisor (veRL's default is each micro-batch's width)
        ov.append(f"actor_rollout_ref.actor.loss_scale_factor={v.loss_scale_factor or v.max_response_length}")
    ov += lora_overrides(cfg)
    if cfg.trainer.steps:
        ov.append(f"trainer.total_training_steps={cfg.trainer.steps}")
    if v.filter_groups:
        ov += ["algorithm.filter_groups.enable=true", "algorithm.filter_groups.metric=acc"]
    if v.device == "cpu":
        ov = [o for o in ov if not o.startswith("actor_rollout_ref.rollout.name=")] + cpu_overrides(cfg)
    return ov + list(v.extra_overrides)


def lora_overrides(cfg: RunConfig) -> list[str]:
    """``trainer.cpu.lora`` as veRL's own LoRA (``actor_rollout_ref.model.lora_rank`` / ``lora_alpha`` /
    ``target_modules``; veRL 0.9's FSDP path has no dropout: the config refuses one); on ``device=cpu`` also
    ``model.lora.merge=true`` (the transformers rollout replica loads full weights, not an adapter); none
    without it."""
    lora = cfg.trainer.cpu.lora
    if lora is None:
        return []
    t = lora.target_modules
    targets = t if isinstance(t, str) else "[" + ",".join(t) + "]"
    alpha = int(lora.alpha) if float(lora.alpha).is_integer() else lora.alpha
    ov = [f"actor_rollout_ref.model.lora_rank={lora.rank}", f"actor_rollout_ref.model.lora_alpha={alpha}",
          f"actor_rollout_ref.model.target_modules={targets}"]
    if cfg.trainer.verl.device == "cpu":  # the transformers replica takes full weights: veRL merges before syncing
        ov.append("actor_rollout_ref.model.lora.merge=true")
    return ov


def cpu_overrides(cfg: RunConfig) -> list[str]:
    """What ``trainer.verl.device=cpu`` adds: veRL's CPU platform (see :mod:`openforge.train.verl.cpu`),
    FSDP2 (FSDP1 hands an integer device id to torch), no flash-attention paths, the transformers
    rollout replica, logical GPUs for veRL's resource pools and a small Ray."""
    v = cfg.trainer.verl
    return [
        "trainer.device=cpu",
        "actor_rollout_ref.actor.strategy=fsdp2",
        "actor_rollout_ref.ref.strategy=fsdp2",
        "actor_rollout_ref.model.use_remove_padding=false",
        "actor_rollout_ref.actor.use_torch_compile=false",
        "+actor_rollout_ref.model.override_config.attn_implementation=sdpa",
        # fp32 compute: veRL's FSDP engines default to bf16 parameters under bf16 autocast, which a CPU
        # without native bf16 (AVX2 only) emulates slowly, and which the fp32 rollout replica does not match
        "+actor_rollout_ref.actor.fsdp_config.mixed_precision={param_dtype:fp32,reduce_dtype:fp32,buffer_dtype:fp32}",
        "+actor_rollout_ref.ref.fsdp_config.mixed_precision={param_dtype:fp32,reduce_dtype:fp32,buffer_dtype:fp32}",
        "actor_rollout_ref.rollout.name=transformers",
        "actor_rollout_ref.rollout.free_cache_engine=false",
        "transfer_queue.backend.SimpleStorage.num_data_storage_units=1",
        "reward.num_workers=1",  # openforge's verifier scores in the agent loop; 8 idle reward actors cost RAM
        "data.dataloader_num_workers=0",
        f"+ray_kwargs.ray_init.num_gpus={v.n_gpus_per_node * v.nnodes}",
        f"+ray_kwargs.ray_init.num_cpus={v.ray_num_cpus}",
        f"+ray_kwargs.ray_init.object_store_memory={v.ray_object_store_mb << 20}",
        "+ray_kwargs.ray_init.include_dashboard=false",
    ]


def model_path(name: str) -> str:
    """veRL loads an HF directory: ``RUN@last`` (etc.) becomes that checkpoint, the default model's alias its
    cached conversion; any other name (a hub id, a directory) goes to veRL unchanged."""
    from ...proxy.backends.hf_loading import SMOLLM2_ALIASES
    from ...util.modeldir import resolve_model_name

    name = resolve_model_name(name)
    from ..lora import is_adapter_dir

    if is_adapter_dir(name):
        raise ConfigError(f"model.name {name} is a LoRA adapter checkpoint; veRL loads a full model: merge it first "
                          f"(forge export model {name} --out DIR) and set model.name=DIR")
    if name.lower() in SMOLLM2_ALIASES:
        from ...proxy.backends.hf_loading import cache_dir, load_smollm2

        d = cache_dir() / "smollm2-135m-instruct"
        if not (d / "model.safetensors").is_file():
            load_smollm2()  # converts the shipped GGUF once
        return str(d)
    return name


def run_env(cfg: RunConfig) -> dict[str, str]:
    """The environment of ``main_ppo`` (Ray workers inherit it): the CPU platform plugin on device=cpu."""
    import os

    env = dict(os.environ)
    if cfg.trainer.verl.device == "cpu":
        env.update({"VERL_PLATFORM": "cpu", "VERL_USE_EXTERNAL_MODULES": "openforge.train.verl.cpu",
                    "TOKENIZERS_PARALLELISM": "false"})
        # Ray gives every worker OMP_NUM_THREADS=1 unless it is set: the FSDP actor's logprob and update
        # passes (the sync trainer runs them alone) then used one core of the machine's
        env.setdefault("OMP_NUM_THREADS", str(os.cpu_count() or 1))
        # Ray refuses to declare logical GPUs when CUDA_VISIBLE_DEVICES is set to none
        env.pop("CUDA_VISIBLE_DEVICES", None)
    return env


def network_prefix(cfg: RunConfig, *, dry_run: bool = False) -> list[str]:
    """What runs ``main_ppo`` in a loopback-only network namespace (:mod:`.netns`), per
    ``trainer.verl.network``: ``loopback`` refuses a machine that cannot make one, ``auto`` (loopback on a
    device=cpu run) falls back to the host's network with a warning saying why."""
    from .netns import loopback_prefix

    mode = cfg.trainer.verl.network
    if mode == "host" or (mode == "auto" and cfg.trainer.verl.device != "cpu"):
        return []
    prefix, why = loopback_prefix()
    if prefix:
        return prefix
    if mode == "loopback" and not dry_run:
        raise ConfigError(f"trainer.verl.network=loopback: this machine cannot make a network namespace ({why}); "
                          "set trainer.verl.network=host to run on the host's network")
    print(f"warning: veRL runs on the host's network, where Ray listens on every interface: {why}", file=sys.stderr)
    return []


def launch(cfg: RunConfig, run_dir: str | Path, tasks: Sequence[Task], *, val_tasks: Sequence[Task] = (),
           dry_run: bool = False, python: str | None = None) -> dict[str, Any]:
    """Write dataset + agent-loop YAML + command into ``run_dir``; run veRL unless ``dry_run``."""
    loss_agg_mode(cfg)  # refuse an objective veRL cannot optimise before writing anything
    run_dir = Path(run_dir)
    data = run_dir / "verl"
    train = build_dataset(tasks, data / "train.parquet", environment=cfg.env.name, group_size=cfg.rollout.group_size)
    val = build_dataset(list(val_tasks) or list(tasks)[:1], data / "val.parquet", environment=cfg.env.name,
                        group_size=cfg.trainer.verl.val_group_size, validation=True)
    loops = write_agent_loop_yaml(cfg, data / "agent_loops.yaml")
    ov = verl_overrides(cfg, train_file=train, val_file=val, agent_loop_path=loops, run_dir=run_dir)
    cmd = [*network_prefix(cfg, dry_run=dry_run), python or sys.executable, "-m", "verl.trainer.main_ppo", *ov]
    exports = "".join(f"export {k}={shlex.quote(val)}\n" for k, val in sorted(run_env(cfg).items())
                      if k.startswith("VERL_") and cfg.trainer.verl.device == "cpu")
    (data / "command.sh").write_text("#!/usr/bin/env bash\nset -e\n" + exports
                                     + " \\\n  ".join(shlex.quote(c) for c in cmd) + "\n")
    (data / "overrides.json").write_text(json.dumps(ov, indent=1))
    result: dict[str, Any] = {"command": cmd, "overrides": ov, "train_file": str(train),
                              "agent_loop_config": str(loops), "rc": None}
    if not dry_run:
        result["rc"] = subprocess.call(cmd, cwd=run_dir, env=run_env(cfg))
    return result
