"""uvicorn servers embedded in the driver's event loop (the proxy, environments' mock services and web
apps), built so that signals stay the program's.

Owns: :func:`embedded_server`.

uvicorn 0.29 and later swaps its own SIGINT/SIGTERM handlers in while a server runs
(``Server.capture_signals``) and puts back what it found when that server stops. A driver runs many
such servers at once — its proxy, side proxies, one service server per claw rollout — started and
stopped in no fixed order, so a stopped server's handler ends up installed: Ctrl-C and SIGTERM then
only flag a server that no longer runs, and the run goes on. An embedded server never takes signals;
its owner stops it.
"""

from __future__ import annotations

import contextlib
from typing import Any

__all__ = ["embedded_server"]


def embedded_server(config: Any) -> Any:
    """A ``uvicorn.Server`` for ``config`` that leaves SIGINT/SIGTERM to the program."""
    import uvicorn

    server = uvicorn.Server(config)
    server.capture_signals = contextlib.nullcontext  # type: ignore[method-assign]
    return server
