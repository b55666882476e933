"""One line, not a traceback, when a command cannot listen where it was told to.

Owns: :func:`listen_errors`, a context manager that turns the ``OSError`` of a port already in use
(or one that needs privileges, or a host that is not an address of this machine) into a
:class:`~openforge.core.errors.ConfigError` naming the command-line flag to change.
"""

from __future__ import annotations

import errno
from collections.abc import Iterator
from contextlib import contextmanager

from ..core.errors import ConfigError

__all__ = ["listen_errors"]


def _why(e: OSError, host: str, port: int, flag: str) -> str | None:
    if e.errno == errno.EADDRINUSE:
        return (f"{flag} {port}: {host}:{port} is already in use (another proxy or server listens there); "
                f"choose another port, or {flag} 0 for any free one")
    if e.errno == errno.EACCES:
        return f"{flag} {port}: not allowed to listen on {host}:{port} (ports below 1024 need privileges)"
    if e.errno == errno.EADDRNOTAVAIL:
        return f"cannot listen on {host}:{port}: {host} is not an address of this machine"
    return None


@contextmanager
def listen_errors(host: str, port: int, flag: str) -> Iterator[None]:
    """Run the body; a bind failure on ``host:port`` becomes a one-line :class:`ConfigError`."""
    try:
        yield
    except OSError as e:
        why = _why(e, host, port, flag)
        if why is None:
            raise
        raise ConfigError(why) from None
