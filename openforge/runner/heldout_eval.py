"""Running the held-out points of a training run: untrained, SFT warm-start, final (the numbers and
tables are :mod:`openforge.analysis.heldout`'s).

Owns: :func:`run_point` (``trials`` rollouts of every held-out task through every harness of the run,
with the run's live policy, through a side proxy of the run's session so nothing lands in the run's
trajectory store; written to ``RUN_DIR/heldout/<point>/`` as a ``forge eval`` directory),
:func:`heldout_before`, :func:`heldout_warmstart` and :func:`heldout_after`, and the cache of points
that do not depend on the run.

The ``before`` point measures the model a run starts from, and the ``warmstart`` point the model after
a cached SFT warm-start: neither depends on the rest of the run, so the same inputs give the same
measurement. ``before`` is the dearest part of a CPU run (the untrained model writes ``max_tokens`` at
every call), so a clean point (no rollout lost to infrastructure) is kept under
``<cache root>/heldout/<key>/`` and copied into the next run that would measure the same thing
(``eval.heldout.cache``; the table then says ``cached``). The key holds the settings and the content of
what shapes the point (the code that runs and scores a rollout, the tasks and the environment's checks,
the model's files: :mod:`openforge.runner.content_hash`), so a changed prompt, renderer or outcome rule
measures again. A cached point without per-task outcomes
(written before points were paired) is measured again.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from ..analysis.heldout import compare_points, load_point, point_numbers, shares
from ..core.task import Task
from ..util.paths import cache_key, cache_root

if TYPE_CHECKING:
    from ..config import RunConfig
    from ..core.trajectory import Trajectory
    from ..environment import Environment
    from ..proxy.backends.base import Backend
    from .harness_mix import GroupHarnesses
    from .session import Session

__all__ = ["HeldoutHost", "before_key", "by_run_name", "heldout_after", "heldout_before", "heldout_warmstart", "run_point", "warmstart_key"]


class _Log(Protocol):
    def log(self, *objects: Any) -> None: ...


class HeldoutHost(Protocol):
    """What the held-out points use of the run that holds them (the typed seam:
    :class:`~openforge.runner.forge.Forge` satisfies it; this module does not import it, so the forge →
    held-out dependency stays one way)."""

    @property
    def cfg(self) -> RunConfig: ...
    @property
    def run_dir(self) -> Path: ...
    @property
    def console(self) -> _Log: ...
    @property
    def backend(self) -> Backend: ...
    @property
    def runtime(self) -> Session: ...
    @property
    def env(self) -> Environment: ...

    def group_harnesses(self, names: Sequence[str]) -> GroupHarnesses: ...


async def run_point(forge: HeldoutHost, tasks: Sequence[Task], point: str, *, label: str,
                    harnesses: Sequence[str] | None = None, trials: int | None = None,
                    path: Path | None = None) -> dict[str, Any]:
    """Roll out every task ``trials`` (default ``eval.heldout.trials``) times through every harness
    (default: the run's) with the current policy; write ``path`` (default ``RUN_DIR/heldout/<point>/``)
    and return its numbers (per harness and, with several, ``all``)."""
    cfg = forge.cfg
    trials = trials or cfg.eval.heldout.trials
    names = list(harnesses or cfg.harness.names())
    forge.console.log(f"held-out {point} ({label}): {len(tasks)} tasks × {trials} trials × {len(names)} harness(es)")
    sampling = {"temperature": cfg.rollout.temperature, "max_tokens": cfg.rollout.max_tokens,
                "rollout_max_tokens": cfg.eval.heldout.max_tokens}
    async with forge.runtime.side_proxy(forge.backend, f"heldout-{point}", sampling=sampling, keep=False) as proxy:
        groups = await forge.runtime.groups(
            [t for _ in names for t in tasks], trials, min_group=1, proxy=proxy, keep=False,
            harness=forge.group_harnesses([n for n in names for _ in tasks]))
    trajs = [t.model_copy(update={"metadata": {**t.metadata, "heldout": point}})
             for t in [*(t for g in groups for t in g.trajectories), *groups.discarded]
             if "retried" not in str((t.metadata or {}).get("discard_reason", ""))]
    ran = by_run_name(trajs, names, len(tasks))
    out = {"point": point, "label": label, "per_harness": {n: point_numbers(ran[n], trials) for n in names}}
    if len(names) > 1:
        out["all"] = point_numbers(trajs, trials)
    _write(path or forge.run_dir / "heldout" / point, cfg, tasks, trajs, out, names, trials)
    from ..util.heap import release_memory

    release_memory()  # the point's decoding batches (KV caches) are done with
    return out


def by_run_name(trajs: Sequence[Trajectory], names: Sequence[str], n_tasks: int) -> dict[str, list[Trajectory]]:
    """The trajectories of each harness of the run, under the run's name for it (``harness.name``: a
    registered name or a ``module:Class`` reference). Group ``i`` of a point ran ``names[i // n_tasks]``,
    so a trajectory is placed by its group, not by ``Trajectory.harness`` (the class's ``name``, which a
    ``module:Class`` reference need not spell); one without a group falls back to that."""
    out: dict[str, list[Trajectory]] = {n: [] for n in names}
    for t in trajs:
        group = (t.metadata or {}).get("group")
        if isinstance(group, int) and n_tasks and 0 <= group // n_tasks < len(names):
            out[names[group // n_tasks]].append(t)
        elif t.harness in out:
            out[t.harness].append(t)
    return out


def _write(path: Path, cfg: RunConfig, tasks: Sequence[Task], trajs: list[Trajectory], numbers: dict[str, Any],
           names: Sequence[str], trials: int) -> None:
    """A ``forge eval``-shaped directory (config.yaml, eval.json, trajectories.jsonl) plus heldout.json."""
    from ..analysis.passk import summarize_eval
    from .evaluation import EvalRequest, write_eval_dir

    req = EvalRequest(harness=",".join(names), env=cfg.env.name, backend="policy (this run)", trials=trials,
                      split=tasks[0].split if tasks else None, tasks=[t.id for t in tasks],
                      concurrency=cfg.rollout.concurrency)
    write_eval_dir(path, req, summarize_eval(trajs, k=trials, tasks={t.id: t for t in tasks}), trajs)
    (path / "heldout.json").write_text(json.dumps(numbers, indent=1))


async def heldout_before(forge: HeldoutHost, tasks: Sequence[Task]) -> dict[str, Any]:
    """The ``before`` point: the one a resumed run wrote, else a cached one, else run now (the policy
    the run starts from; cached when no rollout was lost to infrastructure)."""
    cfg = forge.cfg
    key = before_key(cfg, tasks, backend=type(forge.backend).__qualname__, env=forge.env)
    before = await _cached_point(forge, tasks, "before", label="start", key=key)
    return {"tasks": [t.id for t in tasks], "trials": cfg.eval.heldout.trials, "before": before}


async def heldout_warmstart(forge: HeldoutHost, tasks: Sequence[Task], heldout: dict[str, Any], *,
                            sft_key: str | None) -> dict[str, Any]:
    """Add the ``warmstart`` point (the policy after the SFT warm-start, before any GRPO step) to
    ``heldout``. ``sft_key``: the warm-start's cache key when its weights are cached (the point is then
    cached too, under a key of both), ``None`` when they are not (the point is measured, never cached)."""
    key = warmstart_key(forge.cfg, tasks, backend=type(forge.backend).__qualname__, env=forge.env,
                        sft_key=sft_key) if sft_key else None
    heldout["warmstart"] = await _cached_point(forge, tasks, "warmstart", label="SFT", key=key)
    return heldout


async def _cached_point(forge: HeldoutHost, tasks: Sequence[Task], point: str, *, label: str,
                        key: str | None) -> dict[str, Any]:
    """``point`` as a resumed run wrote it, else from the cache under ``key``, else measured now (and
    cached when clean)."""
    cfg = forge.cfg
    got = load_point(forge.run_dir, point)
    if got is not None:
        return got
    cached = cache_root(cfg.cache_dir) / "heldout" / key if key and cfg.eval.heldout.cache else None
    got = _from_cache(cached, forge.run_dir / "heldout" / point) if cached else None
    if got is not None:
        forge.console.log(f"held-out {point}: cached {cached} (same model, tasks, harnesses and sampling)")
        return got
    got = await run_point(forge, tasks, point, label=label)
    if cached and _clean(got):
        _to_cache(forge.run_dir / "heldout" / point, cached)
    return got


def before_key(cfg: RunConfig, tasks: Sequence[Task], *, backend: str, env: Environment) -> str:
    """Everything that shapes a ``before`` measurement: the back-end serving it (``backend``: its class)
    and its model (a local directory by its files' names, sizes and times), the tasks (every field, and
    what ``env`` hides from the agent: its checks), environment, launcher, harnesses as they run, sampling,
    the per-rollout token budget (``eval.heldout.max_tokens``), trials, seed, and the code that runs and
    scores a rollout (openforge's, the harness and environment classes': :mod:`openforge.runner.content_hash`)."""
    from .content_hash import shaping

    return cache_key({
        **shaping(cfg, tasks, env, "rollout"), "backend": backend, "model": cfg.model.name,
        "env": cfg.env.model_dump(), "launcher": cfg.launcher.model_dump(),
        "harness": cfg.harness.as_run(), "trials": cfg.eval.heldout.trials, "seed": cfg.seed,
        "rollout": cfg.rollout.model_dump(include={"temperature", "max_tokens", "timeout_s"}),
        # the per-rollout budget (absent when unset)
        **({"budget": cfg.eval.heldout.max_tokens} if cfg.eval.heldout.max_tokens is not None else {}),
    })


def warmstart_key(cfg: RunConfig, tasks: Sequence[Task], *, backend: str, env: Environment, sft_key: str) -> str:
    """What shapes a ``warmstart`` measurement: all that shapes ``before`` plus the warm-start's own
    cache key (teacher, SFT settings and tasks: :func:`openforge.runner.teacher.warm_start_key`)."""
    return cache_key({"before": before_key(cfg, tasks, backend=backend, env=env), "sft": sft_key})


def _clean(point: dict[str, Any]) -> bool:
    """No rollout of the point was lost to infrastructure (a loaded machine's timeouts are not kept)."""
    return all(n.get("infra_failures", 0) == 0 for n in point.get("per_harness", {}).values())


def _from_cache(cached: Path, dest: Path) -> dict[str, Any] | None:
    try:
        point = json.loads((cached / "heldout.json").read_text())
    except (OSError, ValueError):
        return None
    if not all("outcomes" in n for n in point.get("per_harness", {}).values()):
        return None  # written before points carried their outcomes: it cannot be paired
    shutil.rmtree(dest, ignore_errors=True)
    shutil.copytree(cached, dest)
    point = json.loads((dest / "heldout.json").read_text())
    point["label"] = f"{point.get('label', 'start')}, cached"
    point["cached_from"] = str(cached)
    (dest / "heldout.json").write_text(json.dumps(point, indent=1))
    return point


def _to_cache(src: Path, cached: Path) -> None:
    """Copy ``src`` to ``cached`` whole or not at all (a concurrent or killed run leaves no half copy)."""
    tmp = cached.with_name(f".{cached.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(src, tmp)
    shutil.rmtree(cached, ignore_errors=True)
    tmp.replace(cached)


async def heldout_after(forge: HeldoutHost, tasks: Sequence[Task], heldout: dict[str, Any]) -> dict[str, Any]:
    """Add the ``after`` point (the final policy), the per-harness comparison with ``before`` (``diff``)
    and each stage's share (``shares``: SFT's, GRPO's own, the total) to ``heldout``."""
    heldout["after"] = await run_point(forge, tasks, "after", label="end")
    heldout["diff"] = compare_points(heldout["before"], heldout["after"])
    heldout["shares"] = shares(heldout)
    return heldout
