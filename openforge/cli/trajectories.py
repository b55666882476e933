"""``forge trajectories show|export``: look at and export recorded trajectories."""

from __future__ import annotations

import typer

group = typer.Typer(help="Inspect and export recorded trajectories.", no_args_is_help=True)


def register(app: typer.Typer) -> None:
    app.add_typer(group, name="trajectories")
