"""``forge harness``: list the harnesses with their wire API and install state; install one.

Owns the ``harness`` command group: ``forge harness list``, ``forge harness install NAME|SPEC``
(npm CLIs into the cache dir, Node.js for openclaw/pi, the browser-use venv, apt packages when root;
a spec file's declared package) and ``forge harness check NAME|SPEC`` (the conformance probe, which
saves the harness's notes: :mod:`openforge.harnesses.conformance`).
"""

from __future__ import annotations

from typing import Any

import typer

__all__ = ["register"]


def _names() -> list[str]:
    from ..plugins import HARNESSES

    return HARNESSES.names()


def _describe(name: str) -> dict[str, Any]:
    """``describe()`` of harness ``name`` plus its options (see :mod:`openforge.harnesses.options`)."""
    from ..core.errors import ForgeError
    from ..harnesses.options import harness_options
    from ..plugins import harness_class, make_harness

    try:
        info = {**make_harness(name).describe(), "name": name}
        known = harness_options(harness_class(name))
    except ForgeError as e:
        return {"name": name, "error": str(e)}
    except Exception as e:  # a broken plugin (its import, constructor or describe() raised): listed as broken
        return {"name": name, "error": f"broken plugin: {type(e).__name__}: {e}", "broken": True}
    info["options"] = None if known is None else sorted(known)
    return info


def register(app: typer.Typer) -> None:
    group = typer.Typer(help="Agent harnesses: list them, install one.", no_args_is_help=True)
    app.add_typer(group, name="harness")

    @group.command("list")
    def list_(as_json: bool = typer.Option(False, "--json", help="print JSON for scripts (with each harness's "
                                           "options)")) -> None:
        """Each harness, the wire API it speaks, and whether it is installed here."""
        import json

        from rich.markup import escape
        from rich.table import Table

        from ..harnesses.versions import UNSUPPORTED
        from ..util.console import new_console

        rows = [_describe(name) for name in _names()]
        rows += [{"name": n, "installed": False, "unsupported": why} for n, why in sorted(UNSUPPORTED.items())
                 if n not in {r["name"] for r in rows}]
        if as_json:
            typer.echo(json.dumps(rows, indent=1))
            return
        table = Table(title="harnesses")
        for col in ("harness", "wire API", "installed", "where / how to install"):
            table.add_column(col)
        for r in rows:
            if "error" in r:
                table.add_row(r["name"], "?", "[red]error[/]", escape(r["error"]))
                continue
            if "unsupported" in r:
                table.add_row(r["name"], "–", "[yellow]unsupported[/]", escape(r["unsupported"]))
                continue
            mark = "[green]yes[/]" if r["installed"] else "[yellow]no[/]"
            table.add_row(r["name"], r["wire_api"], mark, escape(r["detail"] or r["install"]))
        new_console().print(table)

    @group.command("install")
    def install(
        name: str = typer.Argument(..., help="harness name (see `forge harness list`), a harness "
                                   "spec file, or 'node'"),
        force: bool = typer.Option(False, "--force", help="reinstall even if the pinned version is there"),
        cache_dir: str = typer.Option(None, "--cache-dir", help="install here instead of $OPENFORGE_HARNESS_DIR "
                                      "(default ~/.cache/openforge/harnesses)"),
    ) -> None:
        """Install a harness CLI (pinned version) into the cache dir ($OPENFORGE_HARNESS_DIR)."""
        from pathlib import Path

        from ..harnesses import installer
        from ..harnesses.spec import is_spec_path
        from ..util.console import new_console

        console = new_console()
        if is_spec_path(name):  # a harness spec file: its declared package, pinned
            from ..plugins import make_harness

            with console.status(f"installing {name} …"):
                msg = make_harness(name).install(force=force)
            console.print(f"[green]ok[/] {msg}")
            return
        with console.status(f"installing {name} …"):
            msg = installer.install(name, Path(cache_dir) if cache_dir else None, force=force,
                                    log=lambda s: console.log(s))
        console.print(f"[green]ok[/] {msg}")

    @group.command("check")
    def check(
        name: str = typer.Argument(..., help="harness name, or a harness spec file (.yaml / .yml / .toml)"),
        wire_api: str = typer.Option(None, "--wire", help="the wire API to probe (a harness that speaks several)"),
        budget: float = typer.Option(300.0, "--budget", help="seconds the probe's rollout may take"),
        notes_dir: str = typer.Option(None, "--notes-dir", help="save the harness notes here instead of the user's "
                                      "notes folder (<cache>/harness-notes)"),
        save: bool = typer.Option(True, "--save/--no-save", help="save the notes (the reference for drift)"),
    ) -> None:
        """Conformance probe: one real rollout with a scripted policy (a shell call, then an answer);
        prints wire, streaming, tool call, final answer, exactness and splicing, and saves the
        harness's notes (system prompt fingerprint, tools, …) that later rollouts are compared with."""
        import asyncio
        from pathlib import Path

        from rich.markup import escape
        from rich.table import Table

        from ..harnesses.conformance import check_harness
        from ..harnesses.notes import save_notes
        from ..util.console import new_console

        res = asyncio.run(check_harness(name, wire_api=wire_api, budget_s=budget))
        table = Table(title=f"{res.harness} {res.version or ''} on {res.wire}")
        for col in ("check", "result", "detail"):
            table.add_column(col)
        for r in res.rows:
            mark = "[green]pass[/]" if r.ok else "[red]FAIL[/]" if r.ok is False else "[dim]info[/]"
            table.add_row(r.check, mark, escape(r.detail))
        console = new_console()
        console.print(table)
        if res.notes is not None and save:
            path = save_notes(res.notes, Path(notes_dir) if notes_dir else None)
            console.print(f"notes: system prompt {res.notes.system_sha} ({res.notes.system_chars} chars), "
                          f"{len(res.notes.tools)} tools → {path}")
        raise typer.Exit(0 if res.passed else 1)

    @group.command("matrix")
    def matrix(
        write: str = typer.Option(None, "--write", help="write the table between the markers of this docs page"),
        tests_dir: str = typer.Option("tests", "--tests-dir", help="the source checkout's tests (for the CI column)"),
    ) -> None:
        """The harness matrix (harness × version × wires × streaming × tool calls × trained through in
        CI), generated from the shipped conformance notes."""
        from pathlib import Path

        from ..harnesses.matrix import generate, update_doc

        table = generate(Path(tests_dir))
        if write is None:
            typer.echo(table, nl=False)
            return
        page = Path(write)
        page.write_text(update_doc(page.read_text() if page.exists() else "", table))
        typer.echo(f"wrote the harness matrix into {page}")
