"""The rich consoles openforge prints through.

In a terminal a console takes the terminal's width. Piped into a file, a CI log or ``nohup``, rich would
fall back to 80 columns and cut table cells to "…" — install paths, status headers, descriptions — so
there a console is :data:`LOG_WIDTH` wide instead (``$COLUMNS`` still wins when set).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console

#: Width of a console that does not write to a terminal (and has no ``$COLUMNS``).
LOG_WIDTH = 160


def new_console(*, stderr: bool = False, quiet: bool = False, soft_wrap: bool = False) -> Console:
    """A console on stdout (or stderr) that keeps table cells whole when its output is not a terminal."""
    from rich.console import Console

    out = Console(stderr=stderr, quiet=quiet, soft_wrap=soft_wrap)
    if not out.is_terminal and not out.is_jupyter and not os.environ.get("COLUMNS", "").isdigit():
        out.width = max(out.width, LOG_WIDTH)
    return out
