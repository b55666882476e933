"""Watchdog that cleans up after a driver that died without cleaning up (SIGKILL, crash, OOM).

The local launcher starts this script once, in its own session (so a Ctrl-C aimed at the driver's
foreground group does not reach it), and keeps a pipe to its stdin. The driver registers what it
creates and unregisters what it removed, one line each::

    +pid 1234       a sandbox process (bwrap or a process-group leader): kill it and its descendants
    +cg /sys/...    a cgroup directory: kill its members, rmdir it
    +dir /tmp/...   a rollout's temp directory: remove it
    +mnt /tmp/...   a rollout's size-bounded tmpfs (see :func:`mount_quota`): unmount it first
    -pid 1234 / -cg PATH / -dir PATH / -mnt PATH     already cleaned up by the driver

When the pipe reaches EOF (the driver exited, however it exited) everything still registered is
removed, and the script exits. Stdlib only; run with ``python -I -S``.

Also owns :func:`remove_tree`, the removal every cleanup of an agent-made tree uses (the driver's
``close``, ``sweep_stale``, this watchdog): iterative (any depth: ``shutil.rmtree`` recurses and dies
of ``RecursionError`` on ~1,000 nested directories), file-descriptor based (paths of any length, no
symlink followed), and it never raises.
"""

from __future__ import annotations

import os
import signal
import stat
import sys
import time

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


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


def _open_dir(name: str, dir_fd: int | None) -> int:
    try:
        return os.open(name, _DIR, dir_fd=dir_fd)
    except PermissionError:  # an agent's 000 directory (a non-root driver is its owner): make it ours
        # through a descriptor of that very directory: a chmod by name would follow a link swapped in meanwhile
        ref = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
        try:
            if not stat.S_ISDIR(os.fstat(ref).st_mode):
                raise NotADirectoryError(name) from None
            os.chmod(f"/proc/self/fd/{ref}", 0o700)
            return os.open(".", _DIR, dir_fd=ref)
        finally:
            os.close(ref)


def _clear(fd: int, stuck: set[tuple[int, int]]) -> str | None:
    """Unlink every non-directory in ``fd``; return the name of a subdirectory still to empty."""
    try:
        os.fchmod(fd, 0o700)  # a 0500 directory: its entries cannot be unlinked otherwise
    except OSError:
        pass
    with os.scandir(fd) as it:
        for e in it:
            try:
                st = e.stat(follow_symlinks=False)
                if stat.S_ISDIR(st.st_mode):
                    if (st.st_dev, st.st_ino) not in stuck:
                        return e.name
                else:
                    os.unlink(e.name, dir_fd=fd)
            except OSError:
                pass
    return None


def remove_tree(path: str) -> bool:
    """Remove ``path`` and all below it at any depth, never following a symlink; True when it is gone.
    Walks down one directory at a time holding one descriptor (``..`` leads back up), so neither
    depth nor path length is bounded; what cannot be removed is left and skipped, never raised."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return True
    except OSError:
        return False
    try:
        if not stat.S_ISDIR(st.st_mode):
            os.unlink(path)
            return True
        fd = _open_dir(path, None)
    except OSError:
        return False
    names: list[str] = []  # the directories entered below ``path``
    stuck: set[tuple[int, int]] = set()
    try:
        while True:
            try:
                sub = _clear(fd, stuck)
            except OSError:  # cannot list it: leave it as it is
                sub = None
            if sub is not None:
                try:
                    child = _open_dir(sub, fd)
                except OSError:  # cannot enter it: skip it from now on
                    st = os.stat(sub, dir_fd=fd, follow_symlinks=False)
                    stuck.add((st.st_dev, st.st_ino))
                    continue
                os.close(fd)
                fd = child
                names.append(sub)
                continue
            if not names:
                break
            parent = os.open("..", _DIR, dir_fd=fd)
            here = os.fstat(fd)
            os.close(fd)
            fd, name = parent, names.pop()
            try:
                os.rmdir(name, dir_fd=fd)
            except OSError:
                stuck.add((here.st_dev, here.st_ino))
    finally:
        os.close(fd)
    try:
        os.rmdir(path)
    except OSError:
        pass
    return not os.path.lexists(path)


#: The ``mount`` source name of a rollout's tmpfs (how a leftover mount is recognised).
QUOTA_SOURCE = "openforge-rollout"


def mount_quota(path: str | os.PathLike[str], size_mb: int) -> bool:
    """Mount a tmpfs of ``size_mb`` on ``path`` (a rollout's fresh, empty directory), so what the
    rollout writes cannot fill any other file system; False where that is not possible (not root)."""
    if os.geteuid() != 0:
        return False
    import subprocess

    opts = f"size={int(size_mb)}m,mode=0700,nosuid,nodev"
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", opts, QUOTA_SOURCE, os.path.abspath(path)],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    return r.returncode == 0


def unmount_quota(path: str | os.PathLike[str]) -> None:
    """Detach a rollout's tmpfs (lazily: a process still in it cannot keep it), if one is mounted there."""
    target = os.path.abspath(path)
    listed = target.replace("\\", "\\134").replace(" ", "\\040")  # as /proc/self/mounts writes it
    try:
        with open("/proc/self/mounts") as f:
            mounted = any(ln.split()[:2] == [QUOTA_SOURCE, listed] for ln in f)
    except OSError:
        return
    if mounted:
        import subprocess

        subprocess.run(["umount", "-l", target], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)


def main() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    pids: set[int] = set()
    cgs: set[str] = set()
    dirs: set[str] = set()
    mnts: set[str] = set()
    table = {"pid": pids, "cg": cgs, "dir": dirs, "mnt": mnts}
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
    for m in mnts:
        unmount_quota(m)
    for d in dirs:
        remove_tree(d)


if __name__ == "__main__":
    main()
