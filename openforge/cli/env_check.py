"""``forge env check ENV [-H HARNESS]``: is an environment sound before anyone trains on it?

Owns: :func:`check_environment` (every task with a reference solution replayed through the harness —
it must succeed — and every task rolled out under a do-nothing policy — it must not; real sandboxes,
the real proxy, scripted policies, no model) and the ``check`` command. A reference that fails names
a broken task, setup or verifier; a do-nothing rollout that succeeds names a verifier that passes an
untouched sandbox; a verifier or harness that raises is shown with its traceback.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import typer

if TYPE_CHECKING:
    from ..core.task import Task
    from ..core.trajectory import Trajectory
    from ..environment import Environment

__all__ = ["TaskCheck", "check_environment", "register"]

#: What the do-nothing policy says: no tool call, one final answer.
DO_NOTHING = {"turns": [{"text": "I will not do anything."}]}


@dataclass
class TaskCheck:
    """One task's verdicts: its reference replay (None: it has no reference solution) and its
    do-nothing rollout, and the problems found (empty: the task is sound)."""

    task_id: str
    reference: Trajectory | None = None
    nothing: Trajectory | None = None
    problems: list[str] = field(default_factory=list)


def _by_task(groups: Sequence) -> dict[str, Trajectory]:
    """The last attempt of each task (a retried infrastructure failure is not the verdict)."""
    out: dict[str, Trajectory] = {}
    for t in [*(t for g in groups for t in g.trajectories), *groups.discarded]:
        if "retried" not in str((t.metadata or {}).get("discard_reason", "")):
            out[t.task_id] = t
    return out


async def _roll(backend, env: Environment, tasks: Sequence[Task], harness: str, launcher: str,
                harness_options: dict, out: Path, name: str, concurrency: int) -> dict[str, Trajectory]:
    from ..runner.session import RolloutSettings, Session

    session = Session.from_names(backend, environment=env, harness=harness, harness_options=harness_options,
                                 launcher=launcher, store=out / f"{name}.db", close_backend=True,
                                 rollouts=RolloutSettings(progress=False, concurrency=concurrency))
    async with session:
        return _by_task(await session.groups(tasks, 1, min_group=1, max_retries=1))


def _reference_problem(t: Trajectory | None) -> str | None:
    from ..runner.run_health import first_error

    if t is None:
        return "reference solution: no rollout came back"
    if not t.trainable:
        return f"reference solution: {first_error(t, limit=3000)}"
    if t.status.value != "success":
        md = t.metadata or {}
        why = (f"; the verifier read {md['verify_missing_file']!r}, which is not in the sandbox (does setup write it?)"
               if md.get("verify_missing_file") else "")
        detail = f"; verifier: {md['verify_detail']}" if md.get("verify_detail") else ""
        return (f"reference solution did not succeed ({t.status.value}, reward {t.reward:g}): the task, its setup "
                f"or its verifier is broken{why}{detail}")
    return None


def _nothing_problem(t: Trajectory | None) -> str | None:
    from ..runner.run_health import first_error

    if t is None:
        return "do-nothing: no rollout came back"
    if not t.trainable:
        return f"do-nothing: {first_error(t, limit=3000)}"
    if t.status.value == "success":
        return (f"doing nothing succeeds (reward {t.reward:g}): the verifier passes an untouched sandbox, so "
                "GRPO would reward any policy")
    return None


async def check_environment(env: Environment, tasks: Sequence[Task], *, harness: str = "react",
                            launcher: str = "local", harness_options: dict | None = None, out: Path,
                            concurrency: int = 2) -> list[TaskCheck]:
    """Replay every reference solution of ``tasks`` (must succeed) and roll each task out under a
    do-nothing policy (must not), through ``harness``; one :class:`TaskCheck` per task."""
    from ..proxy.backends.scripted import ScriptedBackend
    from ..runner.parts import reference_script

    out.mkdir(parents=True, exist_ok=True)
    opts = dict(harness_options or {})
    with_ref = [t for t in tasks if env.reference_solution(t)]
    nothing_run = _roll(ScriptedBackend(DO_NOTHING), env, tasks, harness, launcher, opts, out, "nothing", concurrency)
    if with_ref:  # both at once: two sessions, two proxies
        refs, nothing = await asyncio.gather(_roll(ScriptedBackend(reference_script(env, with_ref)), env, with_ref,
                                                   harness, launcher, opts, out, "reference", concurrency), nothing_run)
    else:
        refs, nothing = {}, await nothing_run
    checks = []
    for t in tasks:
        c = TaskCheck(t.id, reference=refs.get(t.id), nothing=nothing.get(t.id))
        if env.reference_solution(t):
            c.problems.append(_reference_problem(c.reference))
        c.problems.append(_nothing_problem(c.nothing))
        c.problems = [p for p in c.problems if p]
        checks.append(c)
    return checks


def _cell(t: Trajectory | None, want_success: bool) -> str:
    if t is None:
        return "–"
    ok = (t.status.value == "success") == want_success and t.trainable
    return f"[{'green' if ok else 'red'}]{t.status.value} {t.reward:g}[/]"


def _print(checks: list[TaskCheck], env_name: str, harness: str) -> None:
    from rich.markup import escape
    from rich.table import Table

    from ..util.console import new_console

    table = Table("task", "reference (must succeed)", "do-nothing (must fail)", "",
                  title=f"forge env check {env_name} -H {harness}")
    for c in checks:
        table.add_row(c.task_id, _cell(c.reference, True) if c.reference else "no reference solution",
                      _cell(c.nothing, False), "[green]ok[/]" if not c.problems else "[red]problem[/]")
    console = new_console()
    console.print(table)
    err = new_console(stderr=True)
    for c in checks:
        for p in c.problems:
            err.print(f"[bold red]{escape(c.task_id)}:[/] {escape(p)}")


def register(group: typer.Typer) -> None:
    @group.command("check")
    def check(
        env: str = typer.Argument(..., help="environment name, module:Class, or a folder of task directories"),
        harness: str = typer.Option("react", "--harness", "-H", help="harness the rollouts run through"),
        split: str = typer.Option(None, "--split", "-s", help="only this split's tasks (default: every task)"),
        task: list[str] = typer.Option([], "--task", "-t", help="only these task ids (repeatable)"),
        launcher: str = typer.Option("local", "--launcher", "-l", help="local | kubernetes"),
        harness_opt: list[str] = typer.Option([], "--harness-opt", help="KEY=VALUE option of the harness"),
        concurrency: int = typer.Option(2, "--concurrency", "-j", min=1, help="rollouts at once"),
        out: Path = typer.Option(Path("runs/env-check"), "--out", "-o", help="where the rollouts' stores go"),
    ) -> None:
        """Replay every reference solution (must succeed) and a do-nothing policy (must fail) on each task,
        before anyone trains; show each verifier's or harness's traceback. Exit 3 when a task has a problem."""
        from ..runner.session import load_environment
        from ..runner.task_selection import select_tasks
        from ._opts import parse_options

        environment = load_environment(env)
        environment.use_run_dir(out)
        tasks = select_tasks(environment, split=split, task_ids=task)
        checks = asyncio.run(check_environment(environment, tasks, harness=harness, launcher=launcher,
                                               harness_options=parse_options(harness_opt, "--harness-opt"),
                                               out=out, concurrency=concurrency))
        _print(checks, env, harness)
        bad = [c for c in checks if c.problems]
        if not any(c.reference for c in checks):
            typer.echo(f"note: no task of {environment.name} has a reference solution (metadata['solution'] or "
                       "solution.sh): only the do-nothing check ran", err=True)
        if bad:
            typer.echo(f"{len(bad)} of {len(checks)} task(s) have a problem", err=True)
            raise typer.Exit(3)
        typer.echo(f"{len(checks)} task(s) sound: every reference succeeds, doing nothing never does")
