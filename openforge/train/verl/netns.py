"""A single-machine veRL run inside a network namespace whose only interface is loopback.

Owns: :func:`loopback_prefix` (the command prefix that puts a job there, or why it cannot be done here)
and ``python -m openforge.train.verl.netns CMD ...`` (makes the namespace, brings ``lo`` up in it, then
execs CMD).

Why: Ray (2.60, what veRL 0.9.1 runs on) binds its GCS server, raylet, object manager and workers on
every interface even when ``ray.init`` is given ``_node_ip_address="127.0.0.1"``, and its dashboard and
runtime-env agents on the host's own address; Ray's token is the only guard on them. A run on one machine
(``trainer.verl.device=cpu``) needs nothing beyond loopback: its proxy, rollout server, sandboxes and Ray
all talk over 127.0.0.1. In a namespace of its own nothing outside can reach those ports and nothing
inside can reach out. Only the network is new: files, processes and ``/dev/shm`` are the host's.

Who the job runs as: the caller, unchanged. A root caller gets a new network namespace alone. Any other
caller gets a new user namespace too (an unprivileged process may make a network namespace only there),
in which its own uid and gid map onto themselves: CMD runs as the caller's own uid, with no capability
left after ``exec``, exactly as outside. (``unshare --map-root-user`` would make it uid 0 of a namespace
where no other uid exists: the local launcher would then take the root path and fail to drop its
sandboxes to ``nobody``.) The namespaces are made by this module with ``unshare(2)``, not by the
``unshare`` command, whose options for this differ between util-linux releases.
"""

from __future__ import annotations

import ctypes
import fcntl
import os
import socket
import struct
import subprocess
import sys
from collections.abc import Sequence
from functools import lru_cache

__all__ = ["interfaces", "loopback_prefix"]

_SIOCGIFFLAGS, _SIOCSIFFLAGS, _IFF_UP = 0x8913, 0x8914, 0x1
_CLONE_NEWUSER, _CLONE_NEWNET = 0x10000000, 0x40000000


def interfaces() -> list[str]:
    """The network interfaces this process can see (``["lo"]`` inside the loopback namespace)."""
    return sorted(name for _, name in socket.if_nameindex())


def _loopback_up() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        req = struct.pack("16sH", b"lo", 0)
        flags = struct.unpack("16sH", fcntl.ioctl(s, _SIOCGIFFLAGS, req)[:18])[1]
        fcntl.ioctl(s, _SIOCSIFFLAGS, struct.pack("16sH", b"lo", flags | _IFF_UP))


def _unshare(flags: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(ctypes.c_int(flags)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def _write(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


def _enter() -> None:
    """Move this (single-threaded) process into a new network namespace; a non-root one into a new user
    namespace too, where its uid and gid stay what they are (the only ids mapped there)."""
    if os.geteuid() == 0:
        _unshare(_CLONE_NEWNET)
        return
    uid, gid = os.geteuid(), os.getegid()
    _unshare(_CLONE_NEWUSER | _CLONE_NEWNET)
    _write("/proc/self/setgroups", "deny")  # the kernel's condition for an unprivileged gid_map
    _write("/proc/self/uid_map", f"{uid} {uid} 1")
    _write("/proc/self/gid_map", f"{gid} {gid} 1")


@lru_cache(maxsize=1)
def _probe() -> tuple[tuple[str, ...], str]:
    prefix = (sys.executable, "-m", __name__)
    check = "import os; from openforge.train.verl.netns import interfaces; print(','.join(interfaces()), os.geteuid())"
    try:
        r = subprocess.run([*prefix, sys.executable, "-c", check], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        return (), f"{sys.executable} -m {__name__} could not run: {e}"
    if r.returncode != 0 or r.stdout.split() != ["lo", str(os.geteuid())]:
        why = (r.stderr.strip().splitlines() or [r.stdout.strip() or f"exit {r.returncode}"])[-1]
        return (), why[:400]
    return prefix, ""


def loopback_prefix() -> tuple[list[str], str]:
    """``(prefix, "")``: prepend ``prefix`` to a command to run it, as this user, in a loopback-only network
    namespace; ``([], why)`` where this machine cannot make one (a root caller without ``CAP_SYS_ADMIN``,
    or user namespaces disabled for a normal user)."""
    prefix, why = _probe()
    return list(prefix), why


_FIX = {True: "the driver is root but may not make a network namespace (a container without CAP_SYS_ADMIN?)",
        False: "user namespaces look disabled for this user (sysctl kernel.unprivileged_userns_clone=1, "
               "user.max_user_namespaces > 0; AppArmor: kernel.apparmor_restrict_unprivileged_userns=0)"}


def main(argv: Sequence[str]) -> None:
    argv = list(argv[1:] if argv[:1] == ["--"] else argv)
    if not argv:
        raise SystemExit("usage: python -m openforge.train.verl.netns [--] CMD [ARG ...]")
    try:
        _enter()
    except OSError as e:
        raise SystemExit(f"unshare(2) failed: {e.strerror or e}; {_FIX[os.geteuid() == 0]}") from None
    if interfaces() != ["lo"]:  # never bring interfaces up, or exec, in a namespace that reaches out
        raise SystemExit(f"refusing: the new network namespace shows {interfaces()}, not loopback alone")
    _loopback_up()
    os.execvp(argv[0], argv)


if __name__ == "__main__":
    main(sys.argv[1:])
