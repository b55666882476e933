"""SFT teachers on the orchestration side: teacher rollouts through a session, and the cached
SFT warm-start a CPU GRPO run begins with.

Owns: :func:`teacher_tasks`, :func:`collect_teacher` (k teacher rollouts per task through the run's
harness and a proxy of the teacher's own, in the run's :class:`~openforge.runner.session.Session`),
:func:`export_teacher_rollouts` (``forge export sft`` without a run: a session whose back-end *is*
the teacher, no policy model), :func:`warm_start_key` and :func:`warm_start` (teacher rollouts →
SFT on the served model, cached under ``<cache root>/sft/<key>``; the key holds the content of what
shapes it, :mod:`openforge.runner.content_hash`, not openforge's fixed version number).

The data → samples → steps part is pure and lives in :mod:`openforge.train.sft`; this module only
decides which rollouts to run and where their results go.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..config import RunConfig, dump_config
from ..core.errors import ConfigError
from ..core.task import Task
from ..core.trajectory import Trajectory
from ..core.types import RolloutStatus
from ..train.cpu import use_bf16_autocast
from ..train.sft import _no_samples, export_sft, load_token_samples, policy_renderer, sft_samples, sft_train
from ..train.stop import run_stoppable
from ..util.atomicdir import atomic_files
from ..util.paths import cache_key, cache_root
from .rollout import GroupResults
from .session import Session, backend_for, each_harness, load_environment, select_tasks

if TYPE_CHECKING:
    from ..config import HarnessConfig
    from ..environment import Environment
    from .harness_mix import PerGroupHarness

__all__ = ["collect_teacher", "export_teacher_rollouts", "teacher_tasks", "warm_start", "warm_start_key"]


def teacher_tasks(env: Environment, tasks: Sequence[Task], teacher: str) -> list[Task]:
    """The tasks a teacher can attempt (``reference`` needs a task's reference solution)."""
    return [t for t in tasks if teacher != "reference" or env.reference_solution(t)]


def _successes(groups: GroupResults) -> list[Trajectory]:
    return [t for g in groups for t in g.trajectories if t.status == RolloutStatus.SUCCESS]


async def collect_teacher(session: Session, tasks: Sequence[Task], *, teacher: str, k: int, tokenizer: Any,
                          max_tokens: int, harnesses: HarnessConfig | None = None) -> tuple[list[Trajectory], GroupResults]:
    """Run the teacher ``k`` times per task through a proxy of its own (same store, launcher,
    environment) and the session's harness — or through each harness of ``harnesses`` (a multi-harness
    run replays the teacher through every one). Returns (successful trajectories, the group results)."""
    env = session.environment
    if env is None:
        raise ConfigError("teacher rollouts need a session with an environment")
    backend = backend_for(teacher, environment=env, tasks=tasks, tokenizer=tokenizer)
    from ..faults.env import without_faults  # demonstrations are recorded on clean episodes

    async with session.side_proxy(backend, "teacher", sampling={"max_tokens": max_tokens}) as proxy:
        todo, per_group = _through_each(harnesses, teacher_tasks(env, tasks, teacher))
        groups = await session.groups(todo, k, proxy=proxy, min_group=1, harness=per_group,
                                      environment=without_faults(env))
    return _successes(groups), groups


def _through_each(harnesses: HarnessConfig | None, tasks: list[Task]) -> tuple[list[Task], PerGroupHarness | None]:
    if harnesses is None or len(harnesses.names()) < 2:
        return tasks, None
    return each_harness(harnesses, tasks)


async def export_teacher_rollouts(cfg: RunConfig, *, teacher: str, k: int, progress: bool = True) -> list[Trajectory]:
    """Teacher rollouts for ``forge export sft``: the trainable ones (every group member), recorded in
    ``cfg.run_dir`` (default ``runs/export-sft-<time>``) — no policy model is loaded."""
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    run_dir = Path(cfg.run_dir or f"runs/{cfg.recipe}-{stamp}").resolve()
    dump_config(cfg, run_dir / "config.yaml")
    env = load_environment(cfg.env.name, cfg.env.options)
    env.use_run_dir(run_dir)
    tasks = select_tasks(env, split=cfg.env.split, subset=cfg.env.subset, task_ids=cfg.env.task_ids,
                         max_tasks=cfg.env.max_tasks)
    backend = backend_for(teacher, environment=env, tasks=tasks)
    session = Session.from_config(cfg, backend, environment=env, store=run_dir / "trajectories.db",
                                  progress=progress, close_backend=True)
    from ..faults.env import without_faults  # demonstrations are recorded on clean episodes

    async with session:
        todo, per_group = _through_each(cfg.harness, teacher_tasks(env, tasks, teacher))
        groups = await session.groups(todo, k, min_group=1, harness=per_group, environment=without_faults(env))
    return [t for g in groups for t in g.trajectories]


# ------------------------------------------------------------------------------------ warm start


def warm_start_key(cfg: RunConfig, env: Environment, tasks: Sequence[Task]) -> str:
    """Everything that shapes the warm-start: model (a local folder by its files), tasks + solutions
    (every field, and what ``env`` hides from the agent), harness, SFT settings, the teacher's or the
    SFT data's local files, and the code that runs, scores and trains on the teacher's rollouts
    (openforge's, the harness and environment classes': :mod:`openforge.runner.content_hash`)."""
    from .content_hash import local_spec_digest, path_digest, shaping

    scfg = cfg.sft
    return cache_key({
        **shaping(cfg, tasks, env, "warmstart"),
        # the harnesses as they run (name → weight, options), so `react` and `[react]` share a warm-start
        "model": cfg.model.name, "env": cfg.env.name, "harness": cfg.harness.as_run(),
        "solutions": [env.reference_solution(t) for t in tasks],
        "sft": scfg.model_dump(exclude={"cache", "task_scope"}), "max_tokens": cfg.rollout.max_tokens,
        "teacher_files": local_spec_digest(scfg.teacher), "data": path_digest([scfg.data]) if scfg.data else None,
        "seed": cfg.seed,
        **({"trainable_layers": cfg.trainer.cpu.trainable_layers} if cfg.trainer.cpu.trainable_layers else {}),
        **({"lora": cfg.trainer.cpu.lora.model_dump()} if cfg.trainer.cpu.lora is not None else {}),
    })


async def warm_start(session: Session, cfg: RunConfig, tasks: Sequence[Task], *, model: Any, tokenizer: Any,
                     run_dir: Path, log: Callable[[str], Any]) -> dict[str, Any]:
    """Teacher rollouts → SFT on the served ``model`` (the session's proxy paused meanwhile), cached
    under ``<cache root>/sft/<key>``; returns the warm-start's summary."""
    scfg = cfg.sft
    assert session.environment is not None
    key = warm_start_key(cfg, session.environment, tasks)
    cache = cache_root(cfg.cache_dir) / "sft" / key
    if scfg.cache and (cache / "model.safetensors").is_file():
        from safetensors.torch import load_file

        _, unexpected = model.load_state_dict(load_file(str(cache / "model.safetensors")), strict=False)
        if unexpected:  # e.g. a LoRA warm-start (trainer.cpu.lora) into a model without the run's adapter
            raise ConfigError(f"SFT warm-start cache {cache} does not fit the model (unexpected {unexpected[:3]}); "
                              "with trainer.cpu.lora the run's trainer attaches the adapter before the warm-start")
        model.tie_weights()
        info = json.loads((cache / "info.json").read_text())
        log(f"SFT warm-start: cached {cache}")
        return {**info, "cached": True, "path": str(cache)}
    t0 = time.monotonic()
    if scfg.data:
        samples = load_token_samples(scfg.data)
        good: list[Trajectory] = []
        pass_rate = None
    else:
        log(f"SFT warm-start: teacher {scfg.teacher!r}, {scfg.k} rollout(s) per task")
        good, groups = await collect_teacher(session, tasks, teacher=scfg.teacher, k=scfg.k, tokenizer=tokenizer,
                                             max_tokens=cfg.rollout.max_tokens, harnesses=cfg.harness)
        total = sum(len(g.trajectories) for g in groups) + len(groups.discarded)
        pass_rate = len(good) / total if total else 0.0
        renderer = policy_renderer(tokenizer)
        export_sft(good, run_dir / "sft" / "teacher.jsonl", fmt="chat")
        export_sft(good, run_dir / "sft" / "teacher_tokens.jsonl", fmt="tokens", renderer=renderer)
        samples = sft_samples(good, renderer)
        if not samples:
            raise ConfigError(_no_samples(good, len(tasks), groups.counts(), run_dir))
    t_collect = time.monotonic() - t0
    async with session.paused():
        stats = await run_stoppable(
            sft_train, model, samples, lr=scfg.lr, epochs=scfg.epochs, batch_size=scfg.batch_size,
            max_steps=scfg.max_steps, seed=cfg.seed, trainer_config=cfg.trainer.cpu,
            autocast_bf16=use_bf16_autocast(scfg.autocast_bf16), log=log)
    info = {"key": key, "trajectories": len(good), "samples": len(samples), "teacher_pass_rate": pass_rate,
            "collect_time_s": round(t_collect, 1), **stats, "time_s": round(time.monotonic() - t0, 1)}
    with (run_dir / "metrics.jsonl").open("a") as f:
        f.write(json.dumps({"step": 0, "phase": "sft", **info}) + "\n")
    if scfg.cache:
        _save_cache(cache, model, info)
    return {**info, "cached": False, "path": str(cache)}


def _save_cache(cache: Path, model: Any, info: dict[str, Any]) -> None:
    from safetensors.torch import save_file

    from ..train.lora import adapter_state, has_adapter

    if has_adapter(model):  # trainer.cpu.lora: the base is untouched, the adapter is the warm-start
        state = adapter_state(model)
    else:
        state = {k: v.detach().contiguous() for k, v in model.state_dict().items() if k != "lm_head.weight"}
    with atomic_files(cache) as tmp:  # the weights land last: a cache with them is complete
        save_file(state, str(tmp / "model.safetensors"))
        (tmp / "info.json").write_text(json.dumps(info, indent=2))
