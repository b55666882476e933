"""``forge rollout``: one task, one harness, one back-end → ``OUT/trajectory.json`` and a summary.

Exit status: 0 when the rollout ran to a trainable outcome (success, policy_failure, timeout);
3 for harness_error / env_error / infra_error (the summary says why, the first error's traceback
follows on stderr, as ``forge eval`` prints it); 4 when the reference solution (``--backend reference``)
did not succeed: a reference that fails means the task, its setup or its verifier is broken, whatever
the outcome was called; 130 when interrupted.
"""

from __future__ import annotations

import json
from pathlib import Path

import typer


def register(app: typer.Typer) -> None:
    app.command("rollout")(rollout)


def rollout(
    harness: str = typer.Option("react", "--harness", "-H", help="Harness name (forge harness list)"),
    env: str = typer.Option("claw", "--env", "-e", help="Environment name or a folder of task directories"),
    task: str = typer.Option(..., "--task", "-t", help="Task id (forge env tasks ENV)"),
    backend: str = typer.Option(None, "--backend", "-b", help="scripted:FILE | transformers:MODEL | vllm:URL | "
                                "openai:URL | reference (replay the task's reference solution)  [required "
                                "unless --reference]"),
    launcher: str = typer.Option("local", "--launcher", "-l", help="local | kubernetes"),
    out: Path = typer.Option(Path("rollout-out"), "--out", "-o", help="Directory for trajectory.json and store.db"),
    budget_s: float = typer.Option(None, "--budget-s", help="Wall-clock budget in seconds (default: the task's)"),
    budget_old: float = typer.Option(None, "--budget", hidden=True, help="old spelling of --budget-s"),
    launcher_opt: list[str] = typer.Option([], "--launcher-opt", help="KEY=VALUE option of the launcher (repeatable)"),
    harness_opt: list[str] = typer.Option([], "--harness-opt",
                                          help="KEY=VALUE option of the harness, e.g. max_turns=4 (repeatable)"),
    reference: bool = typer.Option(False, "--reference", help="Replay the task's reference solution (= --backend reference)"),
    proxy_host: str = typer.Option("127.0.0.1", "--proxy-host",
                                   help="Interface the proxy listens on (0.0.0.0 for pods of a cluster)"),
    proxy_port: int = typer.Option(0, "--proxy-port", help="Proxy port (0: any free port)"),
) -> None:
    """Run one rollout through the real proxy and harness, verify it and write the trajectory."""
    import asyncio

    from ._opts import either, parse_options

    budget = either(budget_s, budget_old, "--budget-s", "--budget")
    if backend == "reference" or (backend is None and reference):  # the same spelling as forge eval's
        backend, reference = "scripted:-", True
    if backend is None:
        typer.echo("forge rollout: give --backend (or --reference)", err=True)
        raise typer.Exit(2)
    from ..analysis.eval_many import normalize_backend
    from ._opts import check_run_backend

    check_run_backend(backend)  # RUN@last (a training run's checkpoint), as forge eval takes it
    backend = normalize_backend(backend)
    opts = parse_options(launcher_opt, "--launcher-opt", typed=False)
    hopts = parse_options(harness_opt, "--harness-opt")
    out.mkdir(parents=True, exist_ok=True)
    from ._ports import listen_errors

    try:
        with listen_errors(proxy_host, proxy_port, "--proxy-port"):
            traj = asyncio.run(_run(harness, env, task, backend, launcher, out, budget, opts, reference, proxy_host,
                                    proxy_port, hopts))
    except KeyboardInterrupt:
        typer.echo("interrupted: the rollout was recorded as cancelled and its sandbox removed", err=True)
        raise typer.Exit(130) from None
    _summary(traj, out)
    if not traj.trainable:
        _print_error(traj)
        raise typer.Exit(3)
    if reference and traj.status.value != "success":
        _reference_failed(traj)
        raise typer.Exit(4)
    raise typer.Exit(0)


def _print_error(traj) -> None:
    """The rollout's error with its verifier's, harness's or rollout's traceback, on stderr."""
    from rich.markup import escape

    from ..runner.run_health import first_error
    from ..util.console import new_console

    new_console(stderr=True).print(f"[bold red]error:[/] {escape(first_error(traj, limit=3000))}")


def _reference_failed(traj) -> None:
    """Why a reference solution that did not succeed is the task's problem, not a model's."""
    from rich.markup import escape

    from ..util.console import new_console

    md = traj.metadata or {}
    why = [f"the reference solution of {traj.task_id} did not succeed ({traj.status.value}, reward "
           f"{traj.reward:g}): the task, its setup or its verifier is broken, not a model"]
    if md.get("verify_missing_file"):
        why.append(f"the verifier read {md['verify_missing_file']!r}, which is not in the sandbox: does setup "
                   "write what the solution and the verifier expect (a setup/ file, a path)?")
    if md.get("verify_detail"):
        why.append(f"verifier: {md['verify_detail']}")
    new_console(stderr=True).print("[bold red]error:[/] " + escape("\n".join(why)))


async def _run(harness_name: str, env_name: str, task_id: str, backend_spec: str, launcher_name: str, out: Path,
               budget: float | None, opts: dict[str, str], reference: bool, host: str, port: int,
               harness_opts: dict | None = None):
    import secrets

    from ..runner.session import ProxySettings, RolloutSettings, Session, backend_for, load_environment

    environment = load_environment(env_name)
    environment.use_run_dir(out)
    task = environment.task(task_id)
    if reference and not environment.reference_solution(task):
        from ..core.errors import ConfigError

        raise ConfigError(f"task {task.id!r} has no reference solution")
    backend = backend_for("reference" if reference else backend_spec, environment=environment, tasks=[task])
    admin = secrets.token_urlsafe(24) if host not in ("127.0.0.1", "::1", "localhost") else None
    session = Session.from_names(
        backend, environment=environment, harness=harness_name, harness_options=harness_opts or {},
        launcher=launcher_name, launcher_options=opts, store=out / "store.db", close_backend=True,
        proxy=ProxySettings(host=host, port=port, admin_token=admin),
        rollouts=RolloutSettings(budget_s=budget, progress=False))
    async with session:
        traj = await session.rollout(task)
    (out / "trajectory.json").write_text(traj.to_json(indent=2))
    return traj


def _summary(traj, out: Path) -> None:
    from rich.table import Table

    from ..util.console import new_console

    color = {"success": "green", "policy_failure": "yellow", "timeout": "yellow"}.get(traj.status.value, "red")
    t = Table.grid(padding=(0, 2))
    t.add_row("rollout", traj.rollout_id)
    t.add_row("task", f"{traj.task_id} ({traj.environment})")
    t.add_row("harness", str(traj.harness))
    t.add_row("status", f"[bold {color}]{traj.status.value}[/]")
    t.add_row("reward", f"{traj.reward:g}" + (f"  {json.dumps(traj.rewards)}" if traj.rewards else ""))
    if traj.error:
        t.add_row("error", traj.error)
    if traj.harness_drift:
        t.add_row("[yellow]harness drift[/]", ", ".join(traj.harness_drift.get("changed", {})) + " differ from "
                  + str(traj.harness_drift.get("reference")))
    if traj.metadata.get("verify_detail"):
        t.add_row("verifier", traj.metadata["verify_detail"])
    n_out = sum(len(c.output_ids) for c in traj.calls)
    t.add_row("calls", f"{len(traj.calls)} model calls, {n_out} generated tokens, {len(traj.segments)} segments")
    times = ", ".join(f"{k[:-2]} {v:.2f}s" for k, v in traj.metrics.items() if k.endswith("_s") and isinstance(v, float))
    t.add_row("time", times)
    t.add_row("written", str(out / "trajectory.json"))
    new_console().print(t)
