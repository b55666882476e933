"""``forge harness``: list the harnesses with their wire API and install state; install one.

Owns the ``harness`` command group: ``forge harness list`` and ``forge harness install NAME``
(npm CLIs into the cache dir, Node.js for openclaw/pi, the browser-use venv, apt packages when root).
"""

from __future__ import annotations

import typer

__all__ = ["register"]


def register(app: typer.Typer) -> None:
    group = typer.Typer(help="Agent harnesses: list them, install one.", no_args_is_help=True)
    app.add_typer(group, name="harness")

    @group.command("list")
    def list_() -> None:
        """Each harness, the wire API it speaks, and whether it is installed here."""
        from rich.console import Console
        from rich.table import Table

        from ..errors import ForgeError
        from ..plugins import HARNESSES

        table = Table(title="harnesses")
        for col in ("harness", "wire API", "installed", "where / how to install"):
            table.add_column(col)
        for name in HARNESSES.names():
            try:
                info = HARNESSES.create(name).describe()
            except ForgeError as e:
                table.add_row(name, "?", "[red]error[/]", str(e))
                continue
            mark = "[green]yes[/]" if info["installed"] else "[yellow]no[/]"
            table.add_row(name, info["wire_api"], mark, info["detail"] or info["install"])
        Console().print(table)

    @group.command("install")
    def install(
        name: str = typer.Argument(..., help="harness name (codex, claude-code, pi, openclaw, browser-use, "
                                   "computer-use) or 'node'"),
        force: bool = typer.Option(False, "--force", help="reinstall even if the pinned version is there"),
        cache_dir: str = typer.Option(None, "--cache-dir", help="install here instead of $OPENFORGE_HARNESS_DIR "
                                      "(default ~/.cache/openforge/harnesses)"),
    ) -> None:
        """Install a harness CLI (pinned version) into the cache dir ($OPENFORGE_HARNESS_DIR)."""
        from pathlib import Path

        from rich.console import Console

        from ..harnesses import installer

        console = Console()
        with console.status(f"installing {name} …"):
            msg = installer.install(name, Path(cache_dir) if cache_dir else None, force=force,
                                    log=lambda s: console.log(s))
        console.print(f"[green]ok[/] {msg}")
