"""``forge trajectories show|export``: look at and export recorded trajectories.

A source is a ``trajectory.json``, a ``.jsonl``/``.parquet`` export, a store (``.db``) or a directory
holding one of them (a run directory's ``trajectories.db``, ``forge rollout``'s ``store.db`` and
``trajectory.json``, ``forge eval``'s ``trajectories.jsonl``). ``show`` without a rollout id lists the
rollouts of a source holding several instead of printing them all.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import typer

from ..core.errors import StoreError

group = typer.Typer(help="Inspect and export recorded trajectories.", no_args_is_help=True)


def register(app: typer.Typer) -> None:
    app.add_typer(group, name="trajectories")


#: What a directory is searched for, in order.
DIR_SOURCES = ("trajectories.db", "store.db", "trajectory.json", "trajectories.jsonl")


def _resolve(source: Path) -> Path:
    """``source`` itself, or the trajectory file inside a run / rollout / eval directory."""
    from ..core.errors import StoreError

    if not source.exists():
        raise StoreError(f"{source}: no such file or directory")
    if not source.is_dir():
        return source
    for name in DIR_SOURCES:
        if (source / name).is_file():
            return source / name
    raise StoreError(f"{source}: a directory without trajectories (looked for {', '.join(DIR_SOURCES)})")


def _is_store(source: Path) -> bool:
    with source.open("rb") as f:
        return f.read(16) == b"SQLite format 3\x00"


def _load(source: Path, rollout_id: str | None, on_bad: Callable[[StoreError], None] | None = None):
    from ..core.errors import StoreError
    from ..store import TrajectoryStore, load_trajectories

    source = _resolve(source)
    if _is_store(source) and rollout_id:
        with TrajectoryStore(source) as store:
            traj = store.get_trajectory(rollout_id)
            if traj is None:
                calls = store.calls(rollout_id)
                if not calls:
                    known = ", ".join(r["rollout_id"] for r in store.rollouts()[:10]) or "none"
                    raise StoreError(f"{source}: no rollout {rollout_id!r} (known: {known})")
                from ..core.trajectory import Trajectory

                row = next((r for r in store.rollouts() if r["rollout_id"] == rollout_id), {})
                traj = Trajectory(rollout_id=rollout_id, task_id=row.get("task_id") or "unknown",
                                  harness=row.get("harness"), environment=row.get("environment"), calls=calls,
                                  metadata={"unfinished": True}).build()
            return [traj]
    trajs = load_trajectories(source, on_bad=on_bad) if on_bad is not None else load_trajectories(source)
    if rollout_id:
        trajs = [t for t in trajs if t.rollout_id == rollout_id]
        if not trajs:
            raise StoreError(f"{source}: no rollout {rollout_id!r}")
    return trajs


def _rollout_rows(source: Path) -> list[dict]:
    """One row per rollout of ``source`` (a store lists unfinished rollouts too)."""
    from ..store import TrajectoryStore, load_trajectories

    path = _resolve(source)
    if _is_store(path):
        with TrajectoryStore(path) as store:
            return store.rollouts()
    return [{"rollout_id": t.rollout_id, "task_id": t.task_id, "harness": t.harness, "environment": t.environment,
             "status": str(t.status), "reward": t.reward, "num_calls": len(t.calls)} for t in load_trajectories(path)]


def _list_rollouts(source: Path, rows: list[dict], console: Any) -> None:
    from rich.table import Table

    table = Table(title=f"{_resolve(source)}: {len(rows)} rollouts", title_justify="left")
    for col in ("rollout", "task", "harness", "status", "reward", "calls"):
        table.add_column(col, justify="right" if col in ("reward", "calls") else "left", overflow="fold")
    for r in rows:
        reward = r.get("reward")
        table.add_row(r["rollout_id"], str(r.get("task_id") or ""), str(r.get("harness") or ""),
                      str(r.get("status") or "unfinished"), "" if reward is None else f"{reward:g}",
                      str(r.get("num_calls", "")))
    console.print(table)
    typer.echo(f"show one: forge trajectories show {source} ROLLOUT_ID")


@group.command("show")
def show(
    source: Path = typer.Argument(..., help="trajectory.json, a .jsonl/.parquet export, a store (.db), or a run, "
                                  "rollout or eval directory"),
    rollout_id: str = typer.Argument(None, help="Rollout id (without it, a source holding several is listed)"),
    max_tokens: int = typer.Option(300, help="Show at most this many trailing tokens per segment"),
    as_json: bool = typer.Option(False, "--json", help="print JSON (the list of rollouts, or the trajectory)"),
) -> None:
    """Show calls and segments; trained (mask 1) tokens are highlighted, context tokens dimmed."""
    from ..util.console import new_console

    console = new_console()
    if rollout_id is None:
        rows = _rollout_rows(source)
        if len(rows) != 1:
            if as_json:
                typer.echo(json.dumps(rows, indent=1))
            else:
                _list_rollouts(source, rows, console)
            return
        rollout_id = rows[0]["rollout_id"]
    trajs = _load(source, rollout_id)
    if as_json:
        typer.echo(trajs[0].to_json(indent=1))
        return
    _print_trajectories(trajs, console, max_tokens)


def _print_trajectories(trajs: list, console: Any, max_tokens: int) -> None:
    from rich.table import Table
    from rich.text import Text

    for traj in trajs:
        head = Table.grid(padding=(0, 2))
        for k, v in [("rollout", traj.rollout_id), ("task", traj.task_id), ("harness", traj.harness),
                     ("environment", traj.environment), ("status", str(traj.status)), ("reward", f"{traj.reward:g}")]:
            head.add_row(Text(k, style="bold"), str(v))
        if traj.error:
            head.add_row(Text("error", style="bold red"), traj.error)
        console.print(head)
        calls = Table(title=f"{len(traj.calls)} calls", title_justify="left")
        for col in ("#", "api", "prompt", "output", "finish", "exact", "status", "latency"):
            calls.add_column(col, justify="right" if col in ("#", "prompt", "output", "latency") else "left")
        for c in traj.calls:
            calls.add_row(str(c.index), c.api, str(len(c.prompt_ids)), str(len(c.output_ids)), c.finish_reason or "",
                          "yes" if c.exact else "[yellow]no[/]", str(c.status), f"{c.latency_s:.2f}s")
        console.print(calls)
        for si, seg in enumerate(traj.segments):
            trained = sum(seg.loss_mask)
            console.print(
                f"[bold]segment {si}[/] break_reason=[cyan]{seg.break_reason}[/] calls={seg.call_indices} "
                f"tokens={len(seg.input_ids)} trained={trained} reward={seg.reward:g}"
            )
            start = max(0, len(seg.input_ids) - max_tokens)
            text = Text("… " if start else "")
            for tok, m in zip(seg.input_ids[start:], seg.loss_mask[start:]):
                text.append(f"{tok} ", style="bold green" if m else "dim")
            console.print(text)
        skipped = traj.metrics.get("skipped_calls")
        if skipped:
            console.print(f"[yellow]calls not trained:[/] {skipped}")
        console.print("[dim]legend: [bold green]trained token[/] (loss_mask=1), context token (mask 0)[/]")


@group.command("export")
def export(
    store: Path = typer.Argument(..., help="Store file (.db) or an export to convert"),
    fmt: str = typer.Option("jsonl", "--format", help="jsonl or parquet"),
    out: Path = typer.Option(..., "--out", help="Output path"),
    status: str = typer.Option(None, help="Only trajectories with this status"),
) -> None:
    """Export trajectories to JSONL or Parquet (readable back with openforge.store.load_trajectories)."""
    from rich.text import Text

    from ..store import export_trajectories
    from ..util.console import new_console

    console, skipped = new_console(), []

    def report(e: StoreError) -> None:  # a bad row is named and left out; the rest is exported
        skipped.append(e)
        console.print(Text.assemble(("skipped ", "yellow"), str(e)), highlight=False)

    trajs = [t for t in _load(store, None, report) if status is None or str(t.status) == status]
    n = export_trajectories(trajs, out, fmt, on_bad=report)
    console.print(f"wrote {n} trajectories to {out}" + (f" ({len(skipped)} skipped)" if skipped else ""))
