"""The ``forge`` command line: a typer app assembled from one module per command group.

Each ``openforge/cli/<group>.py`` exposes ``register(app)``; heavy imports stay inside commands so
``forge --version`` is instant.
"""

from __future__ import annotations

import importlib

import typer

from .. import __version__

app = typer.Typer(
    name="forge",
    help="openforge: train LLM agents inside the real harness they are deployed with.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

# Command-group modules under openforge/cli/, each with register(app).
GROUPS = ["trajectories", "harness", "analysis", "proxy", "env", "rollout", "recipe", "export"]


def _version(value: bool) -> None:
    if value:
        typer.echo(f"openforge {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Show the version and exit."),
) -> None:
    """openforge: train LLM agents inside the real harness they are deployed with."""


for _group in GROUPS:
    importlib.import_module(f"{__package__}.{_group}").register(app)


def main() -> None:
    from ..core.errors import ForgeError

    try:
        app()
    except ForgeError as e:  # our errors are for humans: no traceback
        from rich.text import Text

        from ..util.console import new_console

        new_console(stderr=True, soft_wrap=True).print(Text("error: ", style="bold red") + Text(str(e)))
        raise SystemExit(exit_code(e)) from None


def exit_code(e: BaseException) -> int:
    """3 when rollouts could not be trained (as ``forge rollout`` for a non-trainable rollout), else 2."""
    from ..runner.run_health import TooManyRolloutErrors

    return 3 if isinstance(e, TooManyRolloutErrors) else 2


if __name__ == "__main__":
    main()
