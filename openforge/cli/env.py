"""``forge env list`` and ``forge env tasks ENV``: see the environments and pick a task (``forge env check``:
:mod:`.env_check`)."""

from __future__ import annotations

import json
from typing import Any

import typer

group = typer.Typer(help="List environments and their tasks.", no_args_is_help=True)


def register(app: typer.Typer) -> None:
    from .env_check import register as register_check

    register_check(group)  # forge env check ENV [-H HARNESS]
    app.add_typer(group, name="env")


@group.command("list")
def list_(as_json: bool = typer.Option(False, "--json", help="print JSON for scripts")) -> None:
    """Environments with their task counts per split."""
    from rich.markup import escape
    from rich.table import Table

    from ..core.errors import ForgeError
    from ..plugins import list_environments, make_environment
    from ..util.console import new_console

    rows: list[dict[str, Any]] = []
    for name in list_environments():
        try:
            env = make_environment(name)
            rows.append({"name": name, "splits": env.splits(),
                         "description": (type(env).__doc__ or "").strip().split("\n")[0]})
        except (ForgeError, ImportError) as e:
            rows.append({"name": name, "splits": None, "error": str(e)})
    if as_json:
        typer.echo(json.dumps(rows, indent=1))
        return
    table = Table("environment", "train", "eval", "held-out", "total", "description")
    for r in rows:
        sp = r["splits"]
        if sp is None:
            table.add_row(r["name"], "-", "-", "-", "-", f"[red]unavailable: {escape(r['error'])}[/]")
        else:
            table.add_row(r["name"], str(sp.get("train", 0)), str(sp.get("eval", 0)), str(sp.get("heldout", 0)),
                          str(sum(sp.values())), r["description"])
    new_console().print(table)


@group.command("tasks")
def tasks(
    env: str = typer.Argument(..., help="Environment name (forge env list) or a folder of task directories"),
    split: str = typer.Option(None, "--split", "-s", help="train, eval (or easy for claw)"),
    as_json: bool = typer.Option(False, "--json", help="print JSON for scripts (full instructions)"),
) -> None:
    """Task ids, splits, categories and one-line instructions."""
    from rich.table import Table

    from ..plugins import make_environment
    from ..util.console import new_console

    e = make_environment(env)
    rows = e.tasks(split)
    if as_json:
        typer.echo(json.dumps([{"id": t.id, "split": t.split, "category": t.category, "instruction": t.instruction,
                                "timeout_s": t.timeout_s, "required_tools": list(t.required_tools)}
                               for t in rows], indent=1))
        return
    table = Table("task", "split", "category", "instruction", title=f"{e.name}: {len(rows)} tasks")
    for t in rows:
        line = " ".join(t.instruction.split())
        table.add_row(t.id, t.split, t.category, line if len(line) <= 90 else line[:89] + "…")
    console = new_console()
    console.print(table)
    from ..envs.harbor import HarborEnvironment

    if isinstance(e, HarborEnvironment):
        from rich.markup import escape

        for tid, why in e.refused().items():
            console.print(f"[yellow]left out[/] {tid}: {escape(why)}")


@group.command("images")
def images(
    path: str = typer.Argument(..., help="A folder of Harbor task directories"),
    registry: str = typer.Option(..., "--registry", help="Registry prefix, e.g. ghcr.io/me/tasks"),
) -> None:
    """The docker build / push commands that make a Harbor folder's task images (for Kubernetes: then
    pass registry=PREFIX, or images=FILE, as environment options)."""
    from ..envs.harbor import HarborEnvironment

    for line in HarborEnvironment(path).build_commands(registry):
        typer.echo(line)
