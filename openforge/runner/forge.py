"""``Forge`` and ``run()``: one training run, from a validated config to a run directory.

Owns: :class:`Forge` (async context manager owning one run's policy model, trainer and run
directory, with its :class:`~openforge.runner.session.Session` — back-end, proxy, store, launcher,
environment, harness factory — for the rollouts), :func:`run` / :func:`arun` (the Python entry point
over the same :class:`~openforge.config.RunConfig` as ``forge recipe``) and :func:`load_tasks`
(the run's tasks, by :func:`~openforge.runner.session.select_tasks`). Its metrics lines and end-of-run
table are :mod:`openforge.runner.run_report`'s.

A CPU GRPO run (``trainer.backend=cpu``)::

    run dir ← config.yaml (resolved) · metrics.jsonl · trajectories.db · checkpoints/step-N · summary.json
    (checkpoints: complete model directories, kept and indexed by :mod:`openforge.train.checkpoint`)
    [SFT warm-start: teacher rollouts (reference solutions replayed through the real harness + proxy)
     → supervised steps; cached under the cache dir by a key of everything that shapes it]
    for each step: the next tasks_per_step tasks of the run's task cursor (every task once per
        epoch, reshuffled each epoch; :mod:`openforge.runner.task_cursor`) → group_size rollouts each through
        the real proxy → [dynamic sampling: while fewer than target_mixed_groups groups have differing
        rewards, the cursor's next tasks_per_step tasks, at most max_resample_rounds times;
        :mod:`openforge.runner.step_sampling`] → GRPO samples → proxy paused → one optimizer step on the
        served module → proxy resumed → metrics line (reward mean/std, pass rate, statuses, mixed
        groups reached and the target, whether a gradient step was taken, trained tokens, times) →
        checkpoint (the manifest entry carries the cursor, so a resumed run draws the same tasks)

A step left with fewer than min_mixed_groups (at least one) mixed groups trains nothing: its metrics
say ``gradient_step: false`` and the summary table says "no gradient step" rather than showing a
reward change as if it were learning.

Before anything starts, :func:`~openforge.runner.preflight.preflight` refuses what the run would fail on
later (``dry_run=True`` stops there). After every step the run's error budget
(:mod:`openforge.runner.run_health`) is judged: no trainable rollout at all, or a share of env / harness /
infra errors above ``rollout.max_error_share``, stops the run with
:class:`~openforge.runner.run_health.TooManyRolloutErrors` naming the dominant cause and its first error
(``summary.json`` keeps the steps so far and the reason under ``stopped``).

``trainer.backend=verl`` writes the veRL dataset, agent-loop YAML and command into the run
directory and runs ``python -m verl.trainer.main_ppo`` (see :mod:`openforge.train.verl.launch`).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..analysis.diagnose import step_diagnostics
from ..config import RunConfig, dump_config, load_config
from ..core.task import Task
from ..train.grpo import count_stale
from ..train.policy_sync import PolicySync, open_engine, start_policy
from ..util.heap import release_memory
from .harness_mix import GroupHarnesses, HarnessMix
from .rollout import GroupResults
from .run_health import ErrorBudget, TooManyRolloutErrors, step_outcomes
from .run_report import mixed_summary, no_step_reason, step_metrics
from .session import Session, group_harnesses, load_environment, select_tasks
from .step_sampling import SampledStep, SamplingPlan, sample_step
from .task_cursor import CursorState, TaskCursor

if TYPE_CHECKING:
    from ..environment import Environment
    from ..train.checkpoint import Checkpoints

__all__ = ["Forge", "arun", "load_tasks", "run"]


# ------------------------------------------------------------------------------------ tasks


def load_tasks(cfg: RunConfig, env: Environment | None = None) -> list[Task]:
    """The run's tasks: environment split → subset → explicit ids → ``max_tasks`` (in order)."""
    env = env or load_environment(cfg.env.name, cfg.env.options)
    return select_tasks(env, split=cfg.env.split, subset=cfg.env.subset, task_ids=cfg.env.task_ids,
                        max_tasks=cfg.env.max_tasks)


# ------------------------------------------------------------------------------------ Forge


class Forge:
    """Owns everything one run needs; ``async with Forge(cfg) as forge: await forge.train()``."""

    def __init__(self, config: RunConfig, *, console: Any = None, progress: bool = True):
        self.cfg = config
        self.progress = progress
        if console is None:
            from ..util.console import new_console

            console = new_console(stderr=True, quiet=not progress)
        self.console = console
        stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
        self.run_dir = Path(config.run_dir or f"runs/{config.recipe}-{stamp}").resolve()
        self.model: Any = None
        self.tokenizer: Any = None
        self.backend: Any = None
        self.session: Session | None = None
        self.trainer: Any = None
        self.policy: PolicySync | None = None
        self.mix = HarnessMix.from_config(config.harness, seed=config.seed)
        self.errors = ErrorBudget(config.rollout.max_error_share)
        self._t0 = time.monotonic()

    # -- lifecycle -------------------------------------------------------------------------------
    async def __aenter__(self) -> Forge:
        try:
            await self._start()
        except BaseException:
            await self.__aexit__()
            raise
        return self

    async def _start(self) -> None:
        from ..proxy.backends.transformers import TransformersBackend, load_model
        from ..train.cpu import CPUTrainer

        cfg = self.cfg
        self.run_dir.mkdir(parents=True, exist_ok=True)
        dump_config(cfg, self.run_dir / "config.yaml")
        env = load_environment(cfg.env.name, cfg.env.options)
        env.use_run_dir(self.run_dir)
        self.console.log(f"run directory [bold]{self.run_dir}[/]")
        t = time.monotonic()
        self.model, self.tokenizer = await asyncio.to_thread(load_model, cfg.model.name)
        self.console.log(f"model {cfg.model.name} loaded in {time.monotonic() - t:.1f}s")
        choice = await asyncio.to_thread(open_engine, cfg.rollout.engine, cfg.rollout.vllm_url,
                                         start=cfg.rollout.vllm_start)
        self.console.log(choice.note)
        # no fixed sampling seed: a seeded back-end would sample every member of a group alike
        if choice.engine == "vllm":
            from ..proxy.backends.vllm import VLLMBackend

            self.backend = VLLMBackend(cfg.rollout.vllm_url, tokenizer=self.tokenizer)
        else:
            self.backend = TransformersBackend(self.model, self.tokenizer)
        self.session = Session.from_config(cfg, self.backend, environment=env, close_backend=choice.engine == "vllm",
                                           store=self.run_dir / "trajectories.db", progress=self.progress)
        await self.session.start()
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        self.trainer = CPUTrainer(self.model, cfg.trainer.cpu, pad_id=pad)
        self.policy = await start_policy(choice, self.backend, self.trainer, cfg, self.run_dir)
        self.console.log(f"policy version 0 served by {self.policy.description}")

    async def __aexit__(self, *exc: object) -> None:
        try:
            if self.policy is not None:
                await self.policy.aclose()
        finally:
            if self.session is not None:
                await self.session.close()

    async def publish(self, why: str) -> None:
        """Serve the trainer's current weights as the next policy version (``why``: what changed them)."""
        if self.policy is None:  # a forge driven piece by piece (tests) serves no versions
            return
        async with self.runtime.paused():  # no call samples while the served policy changes
            dt = await self.policy.publish()
        self.console.log(f"policy version {self.policy.version} ({why}) published in {dt:.2f}s")

    # -- pieces ----------------------------------------------------------------------------------
    @property
    def runtime(self) -> Session:
        if self.session is None:
            raise RuntimeError("the Forge is not started (use `async with Forge(cfg) as forge`)")
        return self.session

    @property
    def env(self) -> Environment:
        env = self.runtime.environment
        assert env is not None
        return env

    def group_harnesses(self, names: Sequence[str]) -> GroupHarnesses:
        """Group ``i`` runs harness ``names[i]`` of the run (with that harness's options)."""
        return group_harnesses(self.cfg.harness, names)

    async def rollouts(self, tasks: list[Task], group_size: int, *, min_group: int = 2,
                       harnesses: Sequence[str] | None = None) -> GroupResults:
        """``group_size`` rollouts of each task; group ``i`` runs harness ``harnesses[i]`` (default: the
        mix's pick for slots ``0..len(tasks)-1``; one harness: that one)."""
        names = list(harnesses or self.mix.assign(range(len(tasks))))
        return await self.runtime.groups(tasks, group_size, min_group=min_group, harness=self.group_harnesses(names))

    def _log_metrics(self, line: dict[str, Any]) -> None:
        with (self.run_dir / "metrics.jsonl").open("a") as f:
            f.write(json.dumps(line) + "\n")

    def checkpoints(self) -> Checkpoints:
        """The run's :class:`~openforge.train.checkpoint.Checkpoints` (complete model dirs, retention)."""
        from ..train.checkpoint import Checkpoints

        return Checkpoints(self.run_dir, self.cfg, trainer=self.trainer, tokenizer=self.tokenizer,
                           template=self.runtime.proxy.renderer.template,
                           parser=self.runtime.proxy.renderer.parser.name)

    # -- training --------------------------------------------------------------------------------
    async def train(self) -> dict[str, Any]:
        """SFT warm-start (if enabled) then ``trainer.steps`` GRPO steps; returns the summary. With
        ``eval.heldout.enabled`` the policy is evaluated on held-out tasks at three points: untrained,
        after the warm-start, and at the end (:mod:`openforge.analysis.heldout`)."""
        from ..analysis.heldout import check_heldout
        from .heldout_eval import heldout_before

        cfg = self.cfg
        tasks = load_tasks(cfg, self.env)
        summary: dict[str, Any] = {"run_dir": str(self.run_dir), "recipe": cfg.recipe, "tasks": len(tasks),
                                   "rollout_engine": self.policy.description if self.policy else None, "steps": []}
        ckpts = self.checkpoints()
        ck, start = ckpts.resume_point() if cfg.trainer.resume else (None, 0)
        for note in ckpts.notes:
            self.console.log(note)
        held = check_heldout(cfg, self.env, tasks)  # before/after on tasks the run never trains on
        if held and (ck is not None or start):
            self.console.log("resumed run: no held-out before/after (the starting model is not the base)")
            held = []
        if held:
            summary["heldout"] = await heldout_before(self, held)
        if ck is not None:
            self.trainer.load(ck)
            ckpts.resumed()
            await self.publish(f"resumed from {ck.name}")
            self.console.log(f"resumed from {ck} (GRPO step {start})")
        elif start:
            self.console.log(f"resumed at GRPO step {start} (no step has changed the starting model)")
        elif cfg.sft.enabled:
            from .teacher import warm_start

            sft_tasks = tasks
            if cfg.sft.task_scope == "split":
                sft_tasks = list(self.env.tasks(cfg.env.split))
            summary["sft"] = await warm_start(self.runtime, cfg, sft_tasks, model=self.model, tokenizer=self.tokenizer,
                                              run_dir=self.run_dir, log=self.console.log)
            ckpts.weights_changed_before_training()
            await self.publish("SFT warm-start")
            if held:  # the policy GRPO starts from: RL's own share is measured from here, not from "before"
                from .heldout_eval import heldout_warmstart

                await heldout_warmstart(self, held, summary["heldout"],
                                        sft_key=summary["sft"].get("key") if cfg.sft.cache else None)
        if cfg.algorithm == "sft":
            if ck is None:
                ckpts.save(0)
            await self._end(summary, held)
            return summary
        cursor = self._task_cursor(tasks, resumed=bool(start), saved=ckpts.cursor_state())
        for step in range(start, cfg.trainer.steps):
            line = await self._grpo_step(step, cursor)
            summary["steps"].append(line)
            self._stop_on_errors(summary, step)
            every = cfg.trainer.checkpoint_every
            due = bool(every and (step + 1) % every == 0) or step + 1 == cfg.trainer.steps
            saved = ckpts.after_step(step + 1, line, due=due, cursor=cursor.state.to_json())
            if due:
                self.console.log(f"checkpoint {saved}" if saved else f"step {step + 1}: weights unchanged, "
                                 f"no checkpoint written (they are {ckpts.current})")
        summary["task_epochs"] = round(cursor.epochs, 3)
        summary["mixed_groups"] = mixed_summary(summary["steps"])
        summary["harness_drift"] = sum(s.get("harness_drift", 0) for s in summary["steps"])
        await self._end(summary, held)
        return summary

    def _task_cursor(self, tasks: list[Task], *, resumed: bool, saved: dict[str, Any] | None) -> TaskCursor[Task]:
        """The run's task cursor: a fresh one, or the one of the step a resumed run continues after."""
        if not resumed:
            return TaskCursor(tasks, seed=self.cfg.seed)
        if saved is None:
            self.console.log("the resumed step has no saved task cursor (an older run directory): the tasks are "
                             "drawn from a fresh epoch")
            return TaskCursor(tasks, seed=self.cfg.seed)
        try:
            return TaskCursor(tasks, seed=self.cfg.seed, state=CursorState.from_json(saved))
        except ValueError as e:
            self.console.log(f"task cursor not resumed ({e}): the tasks are drawn from a fresh epoch")
            return TaskCursor(tasks, seed=self.cfg.seed)

    def _stop_on_errors(self, summary: dict[str, Any], step: int) -> None:
        """Raise :class:`~openforge.runner.run_health.TooManyRolloutErrors` (after writing the summary with the
        reason) when the run's rollouts so far cross the error budget (:mod:`openforge.runner.run_health`)."""
        try:
            self.errors.check(where=f"after step {step + 1} of {self.cfg.trainer.steps}")
        except TooManyRolloutErrors as e:
            summary["stopped"] = str(e)
            e.summary = summary
            from rich.markup import escape

            self.console.log(f"[red]{escape(str(e).splitlines()[0])}[/] (the error raised holds the first traceback)")
            self._finish(summary)
            raise

    async def _end(self, summary: dict[str, Any], held: list[Task]) -> None:
        # the steps are over and the last one is checkpointed with its optimizer state: the final held-out
        # point runs without AdamW's moments in memory
        self.trainer.release_optimizer_state()
        if held:
            from .heldout_eval import heldout_after

            await heldout_after(self, held, summary["heldout"])
        self._finish(summary)

    async def _sample_step(self, step: int, cursor: TaskCursor[Task]) -> SampledStep:
        """The step's groups: the cursor's next tasks, resampled while too few groups are mixed."""
        cfg = self.cfg

        async def one_round(tasks: list[Task], slots: Sequence[int]) -> GroupResults:
            return await self.rollouts(tasks, cfg.rollout.group_size, harnesses=self.mix.assign(slots))

        plan = SamplingPlan.from_config(cfg, len(cursor.ids))
        return await sample_step(one_round, cursor, plan, log=self.console.log, label=f"step {step + 1}")

    async def _grpo_step(self, step: int, cursor: TaskCursor[Task]) -> dict[str, Any]:
        """Roll out (with dynamic sampling), train when there is a gradient, log the metrics line."""
        from ..train.grpo import build_samples
        from ..train.reward_shuffle import shuffle_rewards
        from ..train.stop import run_stoppable

        cfg = self.cfg
        tcfg = cfg.trainer.cpu
        t0 = time.monotonic()
        self.console.log(f"step {step + 1}/{cfg.trainer.steps}: rolling out")
        sampled = await self._sample_step(step, cursor)
        groups, rounds, mixed = sampled.groups, sampled.rounds, sampled.mixed
        t_roll = time.monotonic() - t0
        self.errors.record(step_outcomes(groups))
        version = self.policy.version if self.policy is not None else None
        # calls another policy version sampled are refused (policy_sync.STALE_RULE): never trained as on-policy
        trained_groups, shuffled = shuffle_rewards(groups, tcfg.reward_shuffle, seed=cfg.seed, step=step)
        samples = build_samples(trained_groups, norm_std=tcfg.norm_adv_by_std, loss_agg=tcfg.loss_agg,
                                skip_zero_advantage=tcfg.skip_zero_advantage,
                                loss_scale_tokens=tcfg.loss_scale_tokens, session_weight=tcfg.session_weight,
                                policy_version=version)
        stale = count_stale(groups, version) if version is not None else 0
        # below the floor nothing is trained; with every group tied and skip_zero_advantage off the
        # optimizer step still runs (no policy-gradient term)
        take = bool(samples) and (sampled.trains or (mixed == 0 and not tcfg.skip_zero_advantage))
        tm: dict[str, float] = {"trained_tokens": 0.0}
        push_s = 0.0
        if take:
            async with self.runtime.paused():  # no generation while the served module changes
                tm = await run_stoppable(self.trainer.step, samples)
                if self.policy is not None:  # (a forge driven step by step, as in tests, has none)
                    push_s = await self.policy.publish()  # the next step samples the new version
            release_memory()  # the step's activations: back to the system before the next rollouts
        line = step_metrics(groups, step=step + 1, elapsed={"rollout_time_s": t_roll,
                                                            "step_time_s": time.monotonic() - t0})
        line.update({"resample_rounds": rounds, "mixed_target": sampled.target,
                     "gradient_step": take and mixed > 0, "task_epochs": round(cursor.epochs, 3),
                     "policy_version": version, "stale_rollouts": stale, "policy_push_s": round(push_s, 4)})
        line.update({f"train/{k}": round(v, 6) for k, v in tm.items()})
        line.update(step_diagnostics(groups, tm))
        if tcfg.reward_shuffle != "off":  # the control arm: the trainer saw permuted rewards
            line.update({"reward_shuffle": tcfg.reward_shuffle, **shuffled})
        line["elapsed_s"] = round(time.monotonic() - self._t0, 1)
        self._log_metrics(line)
        what = (f"trained {int(tm.get('trained_tokens', 0))} tok on {mixed} mixed group(s) (target "
                f"{sampled.target}), loss {tm.get('loss', 0):.4f}" if line["gradient_step"] else
                no_step_reason(line, mixed=mixed, rounds=rounds, needs=sampled.min_mixed))
        self.console.log(
            f"step {step + 1}/{cfg.trainer.steps}: reward {line['reward_mean']:.3f}±{line['reward_std']:.3f} "
            f"pass {line['pass_rate']:.2f} rollouts {line['rollouts']}; {what} ({line['step_time_s']:.0f}s)")
        return line

    def _finish(self, summary: dict[str, Any]) -> None:
        summary["elapsed_s"] = round(time.monotonic() - self._t0, 1)
        (self.run_dir / "summary.json").write_text(json.dumps(summary, indent=2, default=str))


# ------------------------------------------------------------------------------------ entry points


async def arun(config: RunConfig | dict[str, Any] | str | Path | None = None, *, preset: str | None = None,
               overrides: list[str] | dict[str, Any] = (), progress: bool = True,
               dry_run: bool = False) -> dict[str, Any]:
    """Async :func:`run`."""
    from .preflight import preflight

    cfg = load_config(config, preset=preset, overrides=overrides)
    # what the run would refuse (environment options, tasks, model and tokenizer, harness, prompt size,
    # sandbox) is refused now, before a run directory or a weight exists
    checks = await asyncio.to_thread(preflight, cfg)
    if dry_run:
        return {"dry_run": True, "recipe": cfg.recipe, "checks": [str(c) for c in checks],
                "config": cfg.model_dump(mode="json")}
    if cfg.trainer.backend == "verl":
        from ..train.verl.launch import launch

        stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
        run_dir = Path(cfg.run_dir or f"runs/{cfg.recipe}-{stamp}")
        dump_config(cfg, run_dir / "config.yaml")
        return await asyncio.to_thread(launch, cfg, run_dir, load_tasks(cfg))
    async with Forge(cfg, progress=progress) as forge:
        try:
            return await forge.train()
        except asyncio.CancelledError:  # Ctrl-C: say what is kept before the clean-up
            forge.console.log(
                f"interrupted: stopping. {forge.run_dir} keeps every finished rollout and checkpoint; "
                f"run again with run_dir={forge.run_dir} to resume")
            raise


def run(config: RunConfig | dict[str, Any] | str | Path | None = None, *, recipe: str | None = None,
        preset: str | None = None, overrides: list[str] | dict[str, Any] = (), progress: bool = True,
        dry_run: bool = False) -> dict[str, Any]:
    """Run one training job and return its summary (also in ``<run_dir>/summary.json``).

    ``config`` is a :class:`RunConfig`, a dict, or a YAML path; ``recipe`` starts from a shipped
    recipe instead (``claw-grpo``, ``claw-sft``, ``gui-grpo``) with its ``preset``. ``dry_run``: only
    check what the run would refuse (:mod:`openforge.runner.preflight`: environment options, tasks, model
    and tokenizer, harness, prompt size, sandbox) and return ``{"dry_run": True, "checks": [...],
    "config": {...}}``; nothing is created, no weight is loaded. A real run makes the same checks first.
    Raises :class:`~openforge.runner.run_health.TooManyRolloutErrors` (:class:`~openforge.runner.run_health.NothingTrainable`
    when no rollout was trainable) when the run stops for its rollouts' errors (``rollout.max_error_share``).
    """
    if recipe is not None:
        from ..recipes import for_overrides, recipe_config

        base, _ = for_overrides(recipe_config(recipe), overrides, preset=preset)  # env.name=ANOTHER: drop what it lacks
        config = base if config is None else {**base, **(config if isinstance(config, dict) else {})}
    return asyncio.run(arun(config, preset=preset, overrides=overrides, progress=progress, dry_run=dry_run))
