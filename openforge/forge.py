"""``Forge`` and ``run()``: one training run, from a validated config to a run directory.

Owns: :class:`Forge` (async context manager owning the proxy, the launcher, the environment, the
harness factory, the trajectory store and the trainer of one run), :func:`run` / :func:`arun` (the
Python entry point over the same :class:`~openforge.config.RunConfig` as ``forge recipe``),
:func:`load_tasks` and :func:`episode_runner` (the per-process rollout runtime veRL's agent loop
uses).

A CPU GRPO run (``trainer.backend=cpu``)::

    run dir ← config.yaml (resolved) · metrics.jsonl · trajectories.db · checkpoints/step-N · summary.json
    (checkpoints: complete model directories, kept and indexed by :mod:`openforge.train.checkpoint`)
    [SFT warm-start: teacher rollouts (reference solutions replayed through the real harness + proxy)
     → supervised steps; cached under the cache dir by a key of everything that shapes it]
    for each step: pick tasks_per_step tasks → group_size rollouts each through the real proxy →
        [dynamic sampling: while fewer than min_mixed_groups groups have differing rewards, draw the
         next tasks_per_step tasks, at most max_resample_rounds times] →
        GRPO samples → proxy paused → one optimizer step on the served module → proxy resumed →
        metrics line (reward mean/std, pass rate, statuses, mixed groups, whether a gradient step
        was taken, trained tokens, times) → checkpoint

A step left with no mixed group trains nothing: its metrics say ``gradient_step: false`` and the
summary table says "no gradient step" rather than showing a reward change as if it were learning.

``trainer.backend=verl`` writes the veRL dataset, agent-loop YAML and command into the run
directory and runs ``python -m verl.trainer.main_ppo`` (see :mod:`openforge.train.verl.launch`).
"""

from __future__ import annotations

import asyncio
import json
import math
import random
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .config import RunConfig, dump_config, load_config
from .errors import ConfigError
from .harness_mix import HarnessMix, harness_breakdown
from .task import Task
from .train.grpo import count_mixed_groups
from .trajectory import Trajectory

if TYPE_CHECKING:
    from .proxy.recorder import RolloutHandle
    from .proxy.server import ProxyServer
    from .train.checkpoint import Checkpoints

__all__ = ["Forge", "arun", "episode_runner", "load_tasks", "run"]


# ------------------------------------------------------------------------------------ tasks


def _environment(cfg: RunConfig) -> Any:
    from .plugins import make_environment

    return make_environment(cfg.env.name, **cfg.env.options)


def _in_subset(env: Any, task: Task, subset: str) -> bool:
    md = task.metadata
    tags = md.get("subsets") or md.get("tags") or []
    return (subset in tags or md.get(subset) is True or md.get("subset") == subset or md.get("difficulty") == subset
            or task.category == subset)


def load_tasks(cfg: RunConfig, env: Any = None) -> list[Task]:
    """The run's tasks: environment split → subset → explicit ids → ``max_tasks`` (in order)."""
    env = env or _environment(cfg)
    tasks = list(env.tasks(cfg.env.split))
    if cfg.env.subset:
        if hasattr(env, "subset"):
            tasks = list(env.subset(cfg.env.subset, tasks))
        else:
            tasks = [t for t in tasks if _in_subset(env, t, cfg.env.subset)]
        if not tasks:
            raise ConfigError(f"env.subset={cfg.env.subset!r}: no {cfg.env.split} task of {cfg.env.name!r} is in it")
    if cfg.env.task_ids:
        by_id = {t.id: t for t in env.tasks()}
        missing = [i for i in cfg.env.task_ids if i not in by_id]
        if missing:
            raise ConfigError([f"env.task_ids: {cfg.env.name!r} has no task {i!r}" for i in missing])
        tasks = [by_id[i] for i in cfg.env.task_ids]
    if cfg.env.max_tasks:
        tasks = tasks[: cfg.env.max_tasks]
    if not tasks:
        raise ConfigError(f"no tasks: {cfg.env.name!r} split {cfg.env.split!r} is empty")
    return tasks


# ------------------------------------------------------------------------------------ metrics


def merge_groups(first: Any, more: Any) -> Any:
    """``run_groups`` results of a resample round appended to the step's (groups and bookkeeping)."""
    first.extend(more)
    for attr in ("discarded", "dropped"):
        if hasattr(first, attr):
            getattr(first, attr).extend(getattr(more, attr, []))
    if hasattr(first, "attempts"):
        first.attempts += getattr(more, "attempts", 0)
    return first


def step_metrics(groups: Any, *, step: int, elapsed: dict[str, float]) -> dict[str, Any]:
    """One ``metrics.jsonl`` line from ``run_groups``' result."""
    trajs: list[Trajectory] = [t for g in groups for t in g.trajectories]
    rewards = [t.reward for t in trajs]
    n = len(rewards)
    mean = sum(rewards) / n if n else 0.0
    std = math.sqrt(sum((r - mean) ** 2 for r in rewards) / n) if n else 0.0
    statuses = groups.counts() if hasattr(groups, "counts") else {}
    calls = [c for t in trajs for c in t.calls]
    return {
        "step": step,
        "reward_mean": round(mean, 4),
        "reward_std": round(std, 4),
        "pass_rate": round(sum(1 for t in trajs if t.status.value == "success") / n, 4) if n else 0.0,
        "rollouts": n,
        "groups": len(groups),
        "groups_dropped": len(getattr(groups, "dropped", [])),
        "mixed_groups": count_mixed_groups(groups),
        "statuses": statuses,
        "calls": len(calls),
        "prompt_tokens": sum(len(c.prompt_ids) for c in calls),
        "generated_tokens": sum(len(c.output_ids) for c in calls),
        "tool_calls": sum(len((c.response or {}).get("tool_calls") or []) for c in calls),
        **{k: round(v, 3) for k, v in elapsed.items()},
        **harness_breakdown(trajs),
    }


# ------------------------------------------------------------------------------------ Forge


class Forge:
    """Owns everything one run needs; ``async with Forge(cfg) as forge: await forge.train()``."""

    def __init__(self, config: RunConfig, *, console: Any = None, progress: bool = True):
        self.cfg = config
        self.progress = progress
        if console is None:
            from rich.console import Console

            console = Console(stderr=True, quiet=not progress)
        self.console = console
        stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
        self.run_dir = Path(config.run_dir or f"runs/{config.recipe}-{stamp}").resolve()
        self.model: Any = None
        self.tokenizer: Any = None
        self.backend: Any = None
        self.proxy: Any = None
        self.store: Any = None
        self.env: Any = None
        self.launcher: Any = None
        self.trainer: Any = None
        self.mix = HarnessMix.from_config(config.harness, seed=config.seed)
        self._t0 = time.monotonic()

    # -- lifecycle -------------------------------------------------------------------------------
    async def __aenter__(self) -> Forge:
        from .plugins import make_launcher
        from .proxy.backends.transformers import TransformersBackend, load_model
        from .proxy.server import ProxyServer
        from .store import TrajectoryStore
        from .train.cpu import CPUTrainer

        cfg = self.cfg
        self.run_dir.mkdir(parents=True, exist_ok=True)
        dump_config(cfg, self.run_dir / "config.yaml")
        self.env = _environment(cfg)
        self.env.use_run_dir(self.run_dir)
        self.launcher = make_launcher(cfg.launcher.name, **cfg.launcher.options)
        self.console.log(f"run directory [bold]{self.run_dir}[/]")
        t = time.monotonic()
        self.model, self.tokenizer = await asyncio.to_thread(load_model, cfg.model.name)
        self.console.log(f"model {cfg.model.name} loaded in {time.monotonic() - t:.1f}s")
        # no fixed sampling seed: a seeded back-end would sample every member of a group alike
        self.backend = TransformersBackend(self.model, self.tokenizer)
        self.store = TrajectoryStore(self.run_dir / "trajectories.db")
        self.proxy = ProxyServer(self.backend, store=self.store, agent_uds=self.socket_path("policy"), sampling={
            "temperature": cfg.rollout.temperature, "max_tokens": cfg.rollout.max_tokens})
        await self.proxy.start()
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        self.trainer = CPUTrainer(self.model, cfg.trainer.cpu, pad_id=pad)
        return self

    async def __aexit__(self, *exc: Any) -> None:
        if self.proxy is not None:
            await self.proxy.stop()
        if self.launcher is not None and hasattr(self.launcher, "aclose"):
            try:
                await self.launcher.aclose()
            except Exception:
                pass
        if self.store is not None:
            self.store.close()
        if hasattr(self, "_sockdir"):
            import shutil

            shutil.rmtree(self._sockdir, ignore_errors=True)

    # -- pieces ----------------------------------------------------------------------------------
    def socket_path(self, name: str) -> str:
        """A Unix socket for a proxy (sandboxes without a network reach it through the launcher)."""
        import tempfile

        if not hasattr(self, "_sockdir"):
            self._sockdir = tempfile.mkdtemp(prefix="openforge-")
        return f"{self._sockdir}/{name}.sock"

    def harness_factory(self, name: str | None = None) -> Callable[[], Any]:
        """A factory of harness ``name`` of the run (default: its only or first harness)."""
        from .plugins import harness_class

        name = name or self.mix.names[0]
        cls = harness_class(name)
        opts = self.cfg.harness.options_for(name)
        return lambda: cls(**opts)

    async def rollouts(self, tasks: list[Task], group_size: int, *, proxy: Any = None,
                       min_group: int = 2, harnesses: list[str] | None = None, environment: Any = None) -> Any:
        """``group_size`` rollouts of each task; group ``i`` runs harness ``harnesses[i]`` (default: the
        mix's pick for slots ``0..len(tasks)-1``; one harness: that one)."""
        from .harness_mix import GroupHarnesses
        from .rollout import run_groups

        names = harnesses or self.mix.assign(range(len(tasks)))
        harness = GroupHarnesses({n: self.harness_factory(n) for n in set(names)}, names)
        return await run_groups(
            tasks, group_size, self.cfg.rollout.concurrency, harness=harness,
            environment=environment or self.env, launcher=self.launcher, proxy=proxy or self.proxy, store=self.store,
            budget_s=self.cfg.rollout.timeout_s, progress=self.progress, min_group=min_group)

    def _log_metrics(self, line: dict[str, Any]) -> None:
        with (self.run_dir / "metrics.jsonl").open("a") as f:
            f.write(json.dumps(line) + "\n")

    def checkpoints(self) -> Checkpoints:
        """The run's :class:`~openforge.train.checkpoint.Checkpoints` (complete model dirs, retention)."""
        from .train.checkpoint import Checkpoints

        return Checkpoints(self.run_dir, self.cfg, trainer=self.trainer, tokenizer=self.tokenizer,
                           template=self.proxy.renderer.template, parser=self.proxy.renderer.parser.name)

    # -- training --------------------------------------------------------------------------------
    async def train(self) -> dict[str, Any]:
        """SFT warm-start (if enabled) then ``trainer.steps`` GRPO steps; returns the summary. With
        ``eval.heldout.enabled`` the policy is evaluated on held-out tasks before and after."""
        from .analysis.heldout import check_heldout, heldout_before

        cfg = self.cfg
        tasks = load_tasks(cfg, self.env)
        summary: dict[str, Any] = {"run_dir": str(self.run_dir), "recipe": cfg.recipe, "tasks": len(tasks),
                                   "steps": []}
        ckpts = self.checkpoints()
        ck, start = ckpts.resume_point() if cfg.trainer.resume else (None, 0)
        held = check_heldout(cfg, self.env, tasks)  # before/after on tasks the run never trains on
        if held and (ck is not None or start):
            self.console.log("resumed run: no held-out before/after (the starting model is not the base)")
            held = []
        if held:
            summary["heldout"] = await heldout_before(self, held)
        if ck is not None:
            self.trainer.load(ck)
            ckpts.resumed()
            self.console.log(f"resumed from {ck} (GRPO step {start})")
        elif start:
            self.console.log(f"resumed at GRPO step {start} (no step has changed the starting model)")
        elif cfg.sft.enabled:
            from .train.sft import warm_start

            sft_tasks = tasks
            if cfg.sft.task_scope == "split":
                sft_tasks = list(self.env.tasks(cfg.env.split))
            summary["sft"] = await warm_start(self, sft_tasks)
            ckpts.weights_changed_before_training()
        if cfg.algorithm == "sft":
            if ck is None:
                ckpts.save(0)
            await self._end(summary, held)
            return summary
        rng = random.Random(cfg.seed)
        order = list(tasks)
        rng.shuffle(order)
        for step in range(start, cfg.trainer.steps):
            line = await self._grpo_step(step, order)
            summary["steps"].append(line)
            every = cfg.trainer.checkpoint_every
            due = bool(every and (step + 1) % every == 0) or step + 1 == cfg.trainer.steps
            saved = ckpts.after_step(step + 1, line, due=due)
            if due:
                self.console.log(f"checkpoint {saved}" if saved else f"step {step + 1}: weights unchanged, "
                                 f"no checkpoint written (they are {ckpts.current})")
        await self._end(summary, held)
        return summary

    async def _end(self, summary: dict[str, Any], held: list[Task]) -> None:
        if held:
            from .analysis.heldout import heldout_after

            await heldout_after(self, held, summary["heldout"])
        self._finish(summary)

    async def _sample_step(self, step: int, order: list[Task]) -> tuple[Any, int]:
        """The step's groups, with dynamic sampling: more tasks while too few groups are mixed.

        Round ``r`` rolls out the ``tasks_per_step`` tasks after the previous round's, cycling
        through the run's shuffled tasks (so every round is a fresh draw of the current policy)."""
        cfg = self.cfg
        k = min(cfg.rollout.tasks_per_step, len(order))
        tcfg = cfg.trainer.cpu
        stride = k * (1 + tcfg.max_resample_rounds)  # no two steps draw the same slots

        def slots(r: int) -> list[int]:
            return [step * stride + r * k + i for i in range(k)]

        def draw(r: int) -> list[Task]:
            return [order[s % len(order)] for s in slots(r)]

        groups = await self.rollouts(draw(0), cfg.rollout.group_size, harnesses=self.mix.assign(slots(0)))
        rounds = 0
        while count_mixed_groups(groups) < tcfg.min_mixed_groups and rounds < tcfg.max_resample_rounds:
            rounds += 1
            self.console.log(f"step {step + 1}: {count_mixed_groups(groups)} of {len(groups)} groups mixed "
                             f"(< {tcfg.min_mixed_groups}): resample round {rounds}/{tcfg.max_resample_rounds}")
            merge_groups(groups, await self.rollouts(draw(rounds), cfg.rollout.group_size,
                                                     harnesses=self.mix.assign(slots(rounds))))
        return groups, rounds

    async def _grpo_step(self, step: int, order: list[Task]) -> dict[str, Any]:
        """Roll out (with dynamic sampling), train when there is a gradient, log the metrics line."""
        from .train.grpo import build_samples

        cfg = self.cfg
        tcfg = cfg.trainer.cpu
        t0 = time.monotonic()
        groups, rounds = await self._sample_step(step, order)
        t_roll = time.monotonic() - t0
        samples = build_samples(list(groups), norm_std=tcfg.norm_adv_by_std, loss_agg=tcfg.loss_agg,
                                skip_zero_advantage=tcfg.skip_zero_advantage,
                                loss_scale_tokens=tcfg.loss_scale_tokens)
        mixed = count_mixed_groups(groups)
        take = bool(samples) and (mixed > 0 or not tcfg.skip_zero_advantage)
        tm: dict[str, float] = {"trained_tokens": 0.0}
        if take:
            await self.proxy.pause()  # no generation while the served module changes
            try:
                tm = await asyncio.to_thread(self.trainer.step, samples)
            finally:
                await self.proxy.resume()
            await self.trainer.publish(self.backend)
        line = step_metrics(groups, step=step + 1, elapsed={"rollout_time_s": t_roll,
                                                            "step_time_s": time.monotonic() - t0})
        line.update({"resample_rounds": rounds, "gradient_step": take and mixed > 0})
        line.update({f"train/{k}": round(v, 6) for k, v in tm.items()})
        line["elapsed_s"] = round(time.monotonic() - self._t0, 1)
        self._log_metrics(line)
        what = (f"trained {int(tm.get('trained_tokens', 0))} tok on {mixed} mixed group(s), "
                f"loss {tm.get('loss', 0):.4f}" if line["gradient_step"] else
                f"no gradient step: {mixed} of {len(groups)} groups mixed after {rounds} resample round(s)")
        self.console.log(
            f"step {step + 1}/{cfg.trainer.steps}: reward {line['reward_mean']:.3f}±{line['reward_std']:.3f} "
            f"pass {line['pass_rate']:.2f} rollouts {line['rollouts']}; {what} ({line['step_time_s']:.0f}s)")
        return line

    def _finish(self, summary: dict[str, Any]) -> None:
        summary["elapsed_s"] = round(time.monotonic() - self._t0, 1)
        (self.run_dir / "summary.json").write_text(json.dumps(summary, indent=2, default=str))


# ------------------------------------------------------------------------------------ entry points


def _statuses(counts: dict[str, int]) -> str:
    short = {"success": "ok", "policy_failure": "fail", "timeout": "timeout"}
    return " ".join(f"{short.get(k, k)}={v}" for k, v in sorted(counts.items(), key=lambda kv: kv[0] not in short))


def _grad_step(s: dict[str, Any]) -> str:
    """``yes`` / ``yes (+N)`` (N resample rounds) / ``no`` (every group tied: no policy gradient)."""
    rounds = s.get("resample_rounds", 0)
    if s.get("gradient_step", True):
        return f"yes (+{rounds})" if rounds else "yes"
    return "no"


def print_summary(summary: dict[str, Any], console: Any = None) -> None:
    """The end-of-run table (the SFT warm-start, then one row per GRPO step)."""
    from rich.console import Console
    from rich.table import Table

    console = console or Console()
    table = Table(title=f"{summary.get('recipe')} → {summary.get('run_dir')}")
    for col in ("step", "reward", "±", "pass", "rollouts", "statuses", "mixed", "grad", "gen tok", "train tok", "s"):
        table.add_column(col, justify="left" if col == "statuses" else "right", no_wrap=col == "statuses")
    sft = summary.get("sft")
    if sft:
        table.add_row("sft", "", "", f"{sft.get('teacher_pass_rate') or 0:.2f}", str(sft.get("trajectories", "")),
                      "cached" if sft.get("cached") else f"{sft.get('steps', 0)} SFT steps", "", "sft", "",
                      str(int(sft.get("trained_tokens", 0))), "0" if sft.get("cached") else f"{sft.get('time_s', 0):.0f}")
    for s in summary.get("steps", []):
        table.add_row(str(s["step"]), f"{s['reward_mean']:.3f}", f"{s['reward_std']:.3f}", f"{s['pass_rate']:.2f}",
                      str(s["rollouts"]), _statuses(s["statuses"]), f"{s.get('mixed_groups', '?')}/{s['groups']}",
                      _grad_step(s), str(s["generated_tokens"]), str(int(s.get("train/trained_tokens", 0))),
                      f"{s['step_time_s']:.0f}")
    console.print(table)
    from .analysis.heldout import heldout_table
    from .harness_mix import per_harness_table

    for extra in (per_harness_table(summary.get("steps", [])), heldout_table(summary.get("heldout"))):
        if extra is not None:
            console.print(extra)
    idle = [s["step"] for s in summary.get("steps", []) if not s.get("gradient_step", True)]
    if idle:
        console.print(f"no gradient step at step(s) {', '.join(map(str, idle))}: every group was tied (same reward "
                      "for all its rollouts) even after resampling, so no policy gradient; those steps' rewards are "
                      "samples of an unchanged policy")
    console.print(f"total {summary.get('elapsed_s', 0):.0f}s · run directory {summary.get('run_dir')}")


async def arun(config: RunConfig | dict[str, Any] | str | Path | None = None, *, preset: str | None = None,
               overrides: list[str] | dict[str, Any] = (), progress: bool = True) -> dict[str, Any]:
    """Async :func:`run`."""
    from .harnesses.prompt_fit import check_prompt_fits

    cfg = load_config(config, preset=preset, overrides=overrides)
    await asyncio.to_thread(check_prompt_fits, cfg)  # a prompt that cannot fit is refused before anything starts
    if cfg.trainer.backend == "cpu":  # so is a harness that is not installed here (veRL runs it on its nodes)
        if cfg.eval.heldout.enabled:  # and a held-out task the run trains on
            from .analysis.heldout import check_heldout

            env = _environment(cfg)
            check_heldout(cfg, env, load_tasks(cfg, env))
        from .plugins import make_harness

        for name in cfg.harness.names():
            make_harness(name, **cfg.harness.options_for(name)).check_installed()
    if cfg.trainer.backend == "verl":
        from .train.verl.launch import launch

        stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
        run_dir = Path(cfg.run_dir or f"runs/{cfg.recipe}-{stamp}")
        dump_config(cfg, run_dir / "config.yaml")
        return await asyncio.to_thread(launch, cfg, run_dir, load_tasks(cfg))
    async with Forge(cfg, progress=progress) as forge:
        return await forge.train()


def run(config: RunConfig | dict[str, Any] | str | Path | None = None, *, recipe: str | None = None,
        preset: str | None = None, overrides: list[str] | dict[str, Any] = (), progress: bool = True) -> dict[str, Any]:
    """Run one training job and return its summary (also in ``<run_dir>/summary.json``).

    ``config`` is a :class:`RunConfig`, a dict, or a YAML path; ``recipe`` starts from a shipped
    recipe instead (``claw-grpo``, ``claw-sft``, ``gui-grpo``) with its ``preset``.
    """
    if recipe is not None:
        from .recipes import recipe_config

        base = recipe_config(recipe)
        config = base if config is None else {**base, **(config if isinstance(config, dict) else {})}
    return asyncio.run(arun(config, preset=preset, overrides=overrides, progress=progress))


# ------------------------------------------------------------------------------------ veRL runtime


async def episode_runner(*, backend: Any, max_tokens: int, harness: str, harness_options: dict[str, Any],
                         launcher: str, launcher_options: dict[str, Any], environment: str,
                         environment_options: dict[str, Any]) -> Callable[[Task, str], Any]:
    """Start a proxy over ``backend`` in this process and return ``run(task, rollout_id) -> Trajectory``
    (one real rollout: sandbox, harness, verifier; the proxy's rollout is named ``rollout_id``). Used
    by the veRL agent loop, once per worker."""
    import os

    from .plugins import harness_class, make_environment, make_launcher
    from .proxy.server import ProxyServer
    from .rollout import run_rollout

    host = os.environ.get("OPENFORGE_PROXY_HOST", "127.0.0.1")
    proxy = ProxyServer(backend, host=host, sampling={"max_tokens": max_tokens},
                        admin_token=os.environ.get("OPENFORGE_ADMIN_TOKEN"),
                        public_url=os.environ.get("OPENFORGE_PROXY_PUBLIC_URL"))
    await proxy.start()
    env = make_environment(environment, **environment_options)
    launch = make_launcher(launcher, **launcher_options)
    hcls = harness_class(harness)
    return _WorkerEpisodes(proxy, lambda: hcls(**harness_options), env, launch, run_rollout)


class _WorkerEpisodes:
    """``await episodes(task, rollout_id) -> Trajectory``: one rollout through the worker's ``proxy``
    under veRL's session id; the proxy forgets it once the trajectory is returned (handed to veRL)."""

    def __init__(self, proxy: ProxyServer, harness: Callable[[], Any], env: Any, launcher: Any, run_rollout: Any):
        self.proxy, self.harness, self.env, self.launcher, self._run = proxy, harness, env, launcher, run_rollout

    async def __call__(self, task: Task, rollout_id: str) -> Trajectory:
        try:
            return await self._run(harness=self.harness(), environment=self.env, task=task, launcher=self.launcher,
                                   proxy=_NamedRollout(self.proxy, rollout_id), metadata={"verl_session": rollout_id})
        finally:
            self.proxy.release_rollout(rollout_id)  # the worker keeps nothing of a finished session


class _NamedRollout:
    """The worker proxy as :func:`~openforge.rollout.run_rollout` sees it for one veRL session: the rollout
    it opens is named by the session's id, under which the agent loop registered veRL's sampling params."""

    store = None

    def __init__(self, proxy: ProxyServer, rollout_id: str):
        self.proxy, self.rollout_id = proxy, rollout_id
        self.url, self.uds = proxy.url, proxy.uds

    def create_rollout(self, task_id: str, harness: str | None = None, metadata: dict[str, Any] | None = None,
                       *, environment: str | None = None) -> RolloutHandle:
        return self.proxy.create_rollout(task_id, harness, metadata, environment=environment,
                                         rollout_id=self.rollout_id)

    def finish_rollout(self, rollout_id: str, **kw: Any) -> Trajectory:
        return self.proxy.finish_rollout(rollout_id, **kw)
