"""``forge env list`` and ``forge env tasks ENV``: see the environments and pick a task."""

from __future__ import annotations

import typer

group = typer.Typer(help="List environments and their tasks.", no_args_is_help=True)


def register(app: typer.Typer) -> None:
    app.add_typer(group, name="env")


@group.command("list")
def list_() -> None:
    """Environments with their task counts per split."""
    from rich.console import Console
    from rich.table import Table

    from ..environment import get_environment, list_environments
    from ..errors import ForgeError

    table = Table("environment", "train", "eval", "total", "description")
    for name in list_environments():
        try:
            env = get_environment(name)
            splits = env.splits()
            doc = (type(env).__doc__ or "").strip().split("\n")[0]
            table.add_row(name, str(splits.get("train", 0)), str(splits.get("eval", 0)), str(sum(splits.values())), doc)
        except (ForgeError, ImportError) as e:
            table.add_row(name, "-", "-", "-", f"[red]unavailable: {e}[/]")
    Console().print(table)


@group.command("tasks")
def tasks(
    env: str = typer.Argument(..., help="Environment name (forge env list) or a folder of task directories"),
    split: str = typer.Option(None, "--split", "-s", help="train, eval (or easy for claw)"),
) -> None:
    """Task ids, splits, categories and one-line instructions."""
    from rich.console import Console
    from rich.table import Table

    from ..environment import get_environment

    e = get_environment(env)
    rows = e.tasks(split)
    table = Table("task", "split", "category", "instruction", title=f"{e.name}: {len(rows)} tasks")
    for t in rows:
        line = " ".join(t.instruction.split())
        table.add_row(t.id, t.split, t.category, line if len(line) <= 90 else line[:89] + "…")
    Console().print(table)
