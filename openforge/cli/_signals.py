"""SIGTERM stops a long command the way Ctrl-C does.

Owns: :func:`run_main`. A job scheduler, ``kill``, ``timeout`` or a container stop sends SIGTERM,
whose default kills the process where it stands: no "run again to resume" line, the proxy and store
not closed, sandboxes left to the watchdog. Under :func:`run_main` SIGTERM cancels the command's
task like Ctrl-C, its clean-up runs, and the command exits 143 (128 + SIGTERM).
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Coroutine
from typing import Any, TypeVar

import typer

from ..core.errors import ForgeError

__all__ = ["run_main"]

T = TypeVar("T")


class _Terminated(ForgeError, RuntimeError):
    """The command was cancelled by SIGTERM (turned into exit code 143 by :func:`run_main`)."""


def run_main(coro: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(coro)``, with SIGTERM cancelling it (clean-up first, then exit code 143)."""

    async def main() -> T:
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None
        termed: list[bool] = []

        def on_term() -> None:
            termed.append(True)
            task.cancel()

        loop.add_signal_handler(signal.SIGTERM, on_term)
        try:
            return await coro
        except asyncio.CancelledError:
            if termed:
                raise _Terminated from None
            raise
        finally:
            loop.remove_signal_handler(signal.SIGTERM)

    try:
        return asyncio.run(main())
    except _Terminated:
        typer.echo("terminated (SIGTERM)", err=True)
        raise typer.Exit(128 + signal.SIGTERM) from None
