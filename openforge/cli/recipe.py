"""``forge recipe list|show NAME|cp NAME DIR [env.name=ENV]|NAME [--preset P] [key=value ...]``: run shipped recipes.

Owns the ``recipe`` command. ``forge recipe claw-grpo`` runs the recipe's default preset (``cpu``);
``key=value`` arguments override any config key (``rollout.group_size=8 trainer.steps=4``). The
config is validated completely before anything starts; the run ends with a summary table.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

import typer

__all__ = ["register"]

HELP = """Run a shipped recipe, or list / show / copy recipes.

\b
  forge recipe list
  forge recipe show claw-grpo
  forge recipe cp claw-grpo ./my-recipe
  forge recipe cp claw-grpo ./my-recipe env.name=./my-tasks   # drops claw-only settings
  forge recipe claw-grpo                          # default preset (cpu)
  forge recipe claw-grpo --preset verl model.name=Qwen/Qwen3-8B
  forge recipe ./my-recipe trainer.steps=4 rollout.group_size=8
"""


@dataclass
class _RecipeInfo:
    name: str
    presets: list[str]
    default_preset: str | None
    path: str
    description: str


def _recipe_rows() -> list[_RecipeInfo]:
    import yaml

    from ..recipes import list_recipes

    rows = []
    for name, path in list_recipes().items():
        data = yaml.safe_load((path / "config.yaml").read_text()) or {}
        rows.append(_RecipeInfo(name, list(data.get("presets") or {}), data.get("default_preset"), str(path),
                                " ".join(str(data.get("description", "")).split())))
    return rows


def _list(as_json: bool) -> None:
    import json

    from rich.table import Table

    from ..util.console import new_console

    rows = _recipe_rows()
    if as_json:
        typer.echo(json.dumps([asdict(r) for r in rows], indent=1))
        return
    table = Table(title="recipes")
    table.add_column("recipe", no_wrap=True)
    table.add_column("presets")
    table.add_column("description", overflow="fold")  # wrapped at words, never cut
    for r in rows:
        shown = ", ".join(f"[bold]{p}[/]" if p == r.default_preset else p for p in r.presets)
        table.add_row(r.name, shown, r.description)
    new_console().print(table)


def _show(name: str, preset: str | None, overrides: list[str]) -> None:
    import yaml
    from rich.syntax import Syntax

    from ..recipes import load_recipe_config, recipe_dir
    from ..util.console import new_console

    console = new_console()
    path = recipe_dir(name)
    console.print(f"[bold]{path / 'config.yaml'}[/]")
    console.print(Syntax((path / "config.yaml").read_text(), "yaml"))
    cfg = load_recipe_config(name, preset=preset, overrides=overrides)
    console.print(f"[bold]resolved ({preset or 'default preset'}):[/]")
    console.print(Syntax(yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False), "yaml"))
    readme = path / "README.md"
    if readme.is_file():
        console.print(f"see {readme}")


def _run(name: str, preset: str | None, overrides: list[str], dry_run: bool, quiet: bool) -> None:
    from ..harnesses.prompt_fit import prompt_tokens
    from ..recipes import load_recipe_config
    from ..runner.forge import arun
    from ..runner.run_report import print_summary
    from ..util.console import new_console

    # all errors before anything starts; what a recipe for another environment dropped was said already
    cfg = load_recipe_config(name, preset=preset, overrides=overrides, notes=[])
    if dry_run:
        import yaml

        from ..runner.preflight import preflight

        checks = preflight(cfg)  # what the real run would refuse; no run directory, no weights
        typer.echo(yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False))
        for h in cfg.harness.names():
            size = prompt_tokens(h, cfg.model.name)
            typer.echo(f"# {h}'s prompt: " + (f"~{size.tokens} tokens ({size.how})" if size else "not known"))
        if cfg.trainer.backend == "verl":
            import shlex

            from ..train.verl.launch import verl_overrides

            ov = verl_overrides(cfg, train_file="RUN_DIR/verl/train.parquet", val_file="RUN_DIR/verl/val.parquet",
                                agent_loop_path="RUN_DIR/verl/agent_loops.yaml", run_dir="RUN_DIR")
            typer.echo("python -m verl.trainer.main_ppo \\\n  " + " \\\n  ".join(shlex.quote(o) for o in ov))
        for c in checks:
            typer.echo(f"# {c}")
        return
    from ..runner.run_health import TooManyRolloutErrors
    from ._signals import run_main

    try:
        summary = run_main(arun(cfg, progress=not quiet))
    except TooManyRolloutErrors as e:  # the steps so far, then the error (exit 3) with the first traceback
        if e.summary:
            print_summary(e.summary, new_console())
        raise
    if cfg.trainer.backend == "verl":
        rc = summary.get("rc")
        if rc:
            raise typer.Exit(rc)
        return
    print_summary(summary, new_console())


def register(app: typer.Typer) -> None:
    @app.command("recipe", help=HELP, context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
    def recipe(
        ctx: typer.Context,
        name: str = typer.Argument(..., help="list | show NAME | cp NAME DIR | a recipe name or folder"),
        preset: str = typer.Option(None, "--preset", "-p", help="Preset of the recipe (default: its default_preset)"),
        dry_run: bool = typer.Option(False, "--dry-run", help="Check what the run would refuse (environment options, "
                                     "tasks, model and tokenizer, harness, sandbox) and print the resolved config "
                                     "(and veRL command); create nothing, load no weights"),
        quiet: bool = typer.Option(False, "--quiet", "-q", help="No live progress"),
        as_json: bool = typer.Option(False, "--json", help="forge recipe list: print JSON for scripts"),
    ) -> None:
        args = list(ctx.args)
        if name == "list":
            _list(as_json)
        elif name == "show":
            if not args:
                raise typer.BadParameter("forge recipe show NAME [key=value ...]")
            _show(args[0], preset, args[1:])
        elif name == "cp":
            if len(args) < 2:
                raise typer.BadParameter("forge recipe cp NAME DIR [env.name=ENV]")
            from .recipe_copy import copy_for_env

            target, notes = copy_for_env(args[0], Path(args[1]), args[2:])
            typer.echo(f"copied {args[0]} to {target}; run it with: forge recipe {target}")
            for note in notes:
                typer.echo(note)
        else:
            from ..core.errors import ConfigError
            from ..recipes import load_recipe_config

            problems = [f"{a!r}: expected key.path=value" for a in args if "=" not in a]
            notes: list[str] = []
            try:
                load_recipe_config(name, preset=preset, overrides=[a for a in args if "=" in a], notes=notes)
            except ConfigError as e:
                problems += e.problems
            for note in notes:  # env.name=ANOTHER: the recipe's settings that environment lacks were dropped
                typer.echo(note, err=True)
            if problems:
                raise ConfigError(problems)
            _run(name, preset, args, dry_run, quiet)
