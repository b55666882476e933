"""Watchdog that cleans up after a driver that died without cleaning up (SIGKILL, crash, OOM).

The local launcher starts this script once, in its own session (so a Ctrl-C aimed at the driver's
foreground group does not reach it), and keeps a pipe to its stdin. The driver registers what it
creates and unregisters what it removed, one line each::

    +pid 1234       a sandbox process (bwrap or a process-group leader): kill it and its descendants
    +cg /sys/...    a cgroup directory: kill its members, rmdir it
    +dir /tmp/...   a rollout's temp directory: remove it
    -pid 1234 / -cg PATH / -dir PATH      already cleaned up by the driver

When the pipe reaches EOF (the driver exited, however it exited) everything still registered is
removed, and the script exits. Stdlib only; run with ``python -I -S``.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import time


def _children_map() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                stat = f.read()
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        kids.setdefault(ppid, []).append(int(name))
    return kids


def kill_tree(pid: int, sig: int = signal.SIGKILL) -> None:
    """Signal ``pid``, its process group and every descendant (found through /proc)."""
    kids = _children_map()
    todo, seen = [pid], []
    while todo:
        p = todo.pop()
        seen.append(p)
        todo.extend(kids.get(p, []))
    for p in seen:
        try:
            os.kill(p, sig)
        except OSError:
            pass
    try:
        os.killpg(pid, sig)
    except OSError:
        pass


def remove_cgroup(path: str) -> None:
    for _ in range(50):
        try:
            with open(os.path.join(path, "cgroup.procs")) as f:
                pids = [int(x) for x in f.read().split()]
        except OSError:
            return
        for p in pids:
            try:
                os.kill(p, signal.SIGKILL)
            except OSError:
                pass
        try:
            os.rmdir(path)
            return
        except OSError:
            time.sleep(0.05)


def main() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    pids: set[int] = set()
    cgs: set[str] = set()
    dirs: set[str] = set()
    table = {"pid": pids, "cg": cgs, "dir": dirs}
    for line in sys.stdin:
        line = line.rstrip("\n")
        if len(line) < 5 or line[0] not in "+-":
            continue
        kind, _, value = line[1:].partition(" ")
        bucket = table.get(kind)
        if bucket is None:
            continue
        item = int(value) if kind == "pid" else value
        (bucket.add if line[0] == "+" else bucket.discard)(item)
    for p in pids:
        kill_tree(p)
    for c in cgs:
        remove_cgroup(c)
    for d in dirs:
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
