"""A single-machine veRL run inside a network namespace whose only interface is loopback.

Owns: :func:`loopback_prefix` (the command prefix that puts a job there, or why it cannot be done here)
and ``python -m openforge.train.verl.netns CMD ...`` (brings ``lo`` up in the new namespace, then execs
CMD).

Why: Ray (2.60, what veRL 0.9.1 runs on) binds its GCS server, raylet, object manager and workers on
every interface even when ``ray.init`` is given ``_node_ip_address="127.0.0.1"``, and its dashboard and
runtime-env agents on the host's own address; Ray's token is the only guard on them. A run on one machine
(``trainer.verl.device=cpu``) needs nothing beyond loopback: its proxy, rollout server, sandboxes and Ray
all talk over 127.0.0.1. In a namespace of its own nothing outside can reach those ports and nothing
inside can reach out. Only the network is new: files, processes and ``/dev/shm`` are the host's.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import socket
import struct
import subprocess
import sys
from collections.abc import Sequence
from functools import lru_cache

__all__ = ["interfaces", "loopback_prefix"]

_SIOCGIFFLAGS, _SIOCSIFFLAGS, _IFF_UP = 0x8913, 0x8914, 0x1


def interfaces() -> list[str]:
    """The network interfaces this process can see (``["lo"]`` inside the loopback namespace)."""
    return sorted(name for _, name in socket.if_nameindex())


def _loopback_up() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        req = struct.pack("16sH", b"lo", 0)
        flags = struct.unpack("16sH", fcntl.ioctl(s, _SIOCGIFFLAGS, req)[:18])[1]
        fcntl.ioctl(s, _SIOCSIFFLAGS, struct.pack("16sH", b"lo", flags | _IFF_UP))


def _unshare_args() -> list[str] | None:
    """``unshare --net`` (as root) or ``unshare --net --map-root-user`` (otherwise), or None without it."""
    exe = shutil.which("unshare")
    if exe is None:
        return None
    return [exe, "--net"] if os.geteuid() == 0 else [exe, "--net", "--map-root-user"]


@lru_cache(maxsize=1)
def _probe() -> tuple[tuple[str, ...], str]:
    args = _unshare_args()
    if args is None:
        return (), "the `unshare` command (util-linux) is not installed"
    prefix = (*args, "--", sys.executable, "-m", __name__)
    check = "from openforge.train.verl.netns import interfaces; print(','.join(interfaces()))"
    try:
        r = subprocess.run([*prefix, sys.executable, "-c", check], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        return (), f"`unshare --net` failed: {e}"
    if r.returncode != 0 or r.stdout.strip() != "lo":
        why = (r.stderr.strip().splitlines() or [r.stdout.strip() or f"exit {r.returncode}"])[-1]
        return (), f"`unshare --net` failed: {why[:200]}"
    return prefix, ""


def loopback_prefix() -> tuple[list[str], str]:
    """``(prefix, "")``: prepend ``prefix`` to a command to run it in a loopback-only network namespace;
    ``([], why)`` where this machine cannot make one (no ``unshare``, or user namespaces disabled)."""
    prefix, why = _probe()
    return list(prefix), why


def main(argv: Sequence[str]) -> None:
    if not argv:
        raise SystemExit("usage: python -m openforge.train.verl.netns CMD [ARG ...]")
    if interfaces() != ["lo"]:  # never bring interfaces up, or exec, in the host's own namespace
        raise SystemExit(f"refusing: this process sees {interfaces()}, not a fresh network namespace "
                         "(run it under `unshare --net`)")
    _loopback_up()
    os.execvp(argv[0], list(argv))


if __name__ == "__main__":
    main(sys.argv[1:])
