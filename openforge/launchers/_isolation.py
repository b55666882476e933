"""Isolation primitives of the local launcher: namespace detection, cgroups (v1 and v2), rlimits,
and the scrubbed environment a sandboxed process starts with.

Owns: :func:`detect_isolation` (the strongest of ``bwrap`` > ``unshare`` > ``none``, probed once),
:class:`CgroupSet` (one rollout's memory / cpu / pids cgroups where writable, and its memory cgroup's
count of OOM kills: :func:`oom_kills`), :class:`OomWatch` (the OOM kills at the moment a command
died), :func:`limits_prefix`, :func:`rlimit_memory_gaps`, :func:`scrub_env`, and :data:`WEAK_MODE_RISKS` (what
an agent can do in the weaker modes).
"""

from __future__ import annotations

import asyncio
import functools
import os
import resource
import shlex
import shutil
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path

__all__ = ["WEAK_MODE_RISKS", "CgroupSet", "OomWatch", "detect_isolation", "limits_prefix", "oom_kills", "rlimit_memory_gaps", "scrub_env"]

#: Host variables a sandboxed process keeps; everything else (API keys, tokens, cloud creds) is dropped.
KEEP_ENV = ("PATH", "LANG", "LANGUAGE", "TERM", "TZ", "LC_ALL", "LC_CTYPE", "COLORTERM", "NO_COLOR")

#: What an agent can do in each weaker mode, in plain words (logged when such a mode is asked for).
WEAK_MODE_RISKS = {
    "unshare": "only the network is isolated. The agent runs as your user (as root if the driver is root) on "
               "the host's file system: it can read the driver's environment through /proc (API keys, "
               "OPENFORGE_ADMIN_TOKEN) and so forge its reward, read and write other rollouts' directories, "
               "read the task's verifier and reference solution, and leave files anywhere your user can write",
    "none": "nothing is isolated. The agent runs as your user with the network open: it can read the driver's "
            "environment through /proc (API keys, OPENFORGE_ADMIN_TOKEN), call the proxy's admin API and forge "
            "its reward, read and write other rollouts' directories, read the task's verifier and reference "
            "solution, and reach any port on this machine",
}


def scrub_env(home: Path, tmpdir: Path, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of a sandboxed process: a short allow-list of host variables plus HOME,
    TMPDIR, USER and whatever the caller passes explicitly."""
    env = {k: v for k, v in os.environ.items() if k in KEEP_ENV or k.startswith("LC_")}
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    env.setdefault("LANG", "C.UTF-8")
    env.update(HOME=str(home), TMPDIR=str(tmpdir), USER="agent", LOGNAME="agent", SHELL="/bin/sh")
    env.update(extra or {})
    return env


@functools.lru_cache(maxsize=1)
def detect_isolation() -> tuple[str, str]:
    """Return ``(mode, reason)``: the strongest mode that works here — ``bwrap`` (the full sandbox,
    see ``_bwrap.py``), ``unshare`` (network namespace only) or ``none`` — and why a stronger one
    is not available. Only ``bwrap`` is ever chosen by ``isolation='auto'``."""
    from ._bwrap import probe_bwrap

    bw = probe_bwrap()
    if bw.ok:
        return "bwrap", ""
    reasons = [bw.error or "bwrap is not available"]
    unshare = shutil.which("unshare")
    if unshare:
        try:
            r = subprocess.run([unshare, "--net", "--map-root-user", "--", "true"], capture_output=True, timeout=20)
            if r.returncode == 0:
                return "unshare", "; ".join(reasons)
            reasons.append(f"unshare -n failed: {r.stderr.decode(errors='replace').strip()[:200]}")
        except (OSError, subprocess.TimeoutExpired) as e:
            reasons.append(f"unshare failed: {e}")
    return "none", "; ".join(reasons)


def _own_cgroup_v1(controller: str) -> Path | None:
    try:
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, ctrls, path = line.split(":", 2)
            if controller in ctrls.split(","):
                return Path("/sys/fs/cgroup") / controller / path.lstrip("/")
    except OSError:
        pass
    return None


def _own_cgroup_v2() -> Path | None:
    try:
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            if line.startswith("0::"):
                p = Path("/sys/fs/cgroup") / line[3:].lstrip("/")
                return p if (p / "cgroup.controllers").exists() else None
    except OSError:
        pass
    return None


class CgroupSet:
    """Per-rollout cgroups for memory, CPU and pids, created where writable (v1 or v2).

    ``paths`` lists the directories created (``limits_prefix`` moves each sandbox process in);
    :meth:`attach` moves a given process in; :meth:`remove` kills what is left inside and removes
    the directories; :meth:`oom_kills` counts the processes its memory limit's OOM killer killed.
    """

    def __init__(self, name: str, *, memory_mb: int | None, cpu: float | None, max_procs: int | None):
        self.paths: list[Path] = []
        self.limited: set[str] = set()
        self.memory: Path | None = None  # the directory whose memory limit is enforced
        v2 = _own_cgroup_v2()
        if v2 is not None:
            self._make_v2(v2 / name, memory_mb, cpu, max_procs)
        else:
            self._make_v1(name, memory_mb, cpu, max_procs)

    def _try(self, d: Path, files: dict[str, str], what: str) -> None:
        try:
            d.mkdir()
        except OSError:
            return
        self.paths.append(d)
        try:
            for f, v in files.items():
                (d / f).write_text(v)
            self.limited.add(what)
        except OSError:
            pass

    def _make_v1(self, name: str, memory_mb: int | None, cpu: float | None, max_procs: int | None) -> None:
        if memory_mb:
            base = _own_cgroup_v1("memory")
            if base and os.access(base, os.W_OK):
                self._try(base / name, {"memory.limit_in_bytes": str(memory_mb * 1024 * 1024)}, "memory")
                if "memory" in self.limited:
                    self.memory = base / name
        if cpu:
            base = _own_cgroup_v1("cpu")
            if base and os.access(base, os.W_OK):
                period = 100_000
                self._try(base / name, {"cpu.cfs_period_us": str(period),
                                        "cpu.cfs_quota_us": str(max(1000, int(cpu * period)))}, "cpu")
        if max_procs:
            base = _own_cgroup_v1("pids")
            if base and os.access(base, os.W_OK):
                self._try(base / name, {"pids.max": str(max_procs)}, "pids")

    def _make_v2(self, d: Path, memory_mb: int | None, cpu: float | None, max_procs: int | None) -> None:
        files = {}
        if memory_mb:
            files["memory.max"] = str(memory_mb * 1024 * 1024)
        if cpu:
            files["cpu.max"] = f"{max(1000, int(cpu * 100_000))} 100000"
        if max_procs:
            files["pids.max"] = str(max_procs)
        try:
            d.mkdir()
        except OSError:
            return
        self.paths.append(d)
        for f, v in files.items():
            try:
                (d / f).write_text(v)
                self.limited.add(f.split(".")[0])
            except OSError:
                pass
        if "memory" in self.limited:
            self.memory = d

    def attach(self, pid: int | None = None) -> None:
        for d in self.paths:
            try:
                (d / "cgroup.procs").write_text(str(pid or os.getpid()))
            except OSError:
                pass

    def oom_kills(self) -> int | None:
        """How many processes the memory limit's OOM killer has killed in this cgroup so far (None: no
        memory cgroup, or a kernel that does not count them)."""
        return oom_kills(self.memory) if self.memory is not None else None

    def remove(self) -> None:
        from ._reaper import remove_cgroup

        for d in self.paths:
            remove_cgroup(str(d))
        self.paths = []


def oom_kills(cgroup: Path) -> int | None:
    """The ``oom_kill`` count of a memory cgroup directory: cgroup v2's ``memory.events``, v1's
    ``memory.oom_control`` (kernel 4.13+; an older v1 kernel counts no kills: None). ``memory.failcnt``
    is not read: it counts allocations that hit the limit and were reclaimed, not kills."""
    for name in ("memory.events", "memory.oom_control"):
        try:
            text = (cgroup / name).read_text()
        except OSError:
            continue
        for line in text.splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill" and value.strip().isdigit():
                return int(value)
    return None


class OomWatch:
    """The OOM kills of a memory cgroup around the moment a command died: polls the counter (every
    ``interval_s``) until the process has exited, so :meth:`stop` can tell the kills of the last
    ``window_s`` before its death (the OOM killer's SIGKILL and the death it caused) from older ones (an
    agent's command the killer took earlier, the harness killed later by something else). Inactive (0
    kills) without a memory cgroup that counts them."""

    def __init__(self, cgroups: CgroupSet | None, *, window_s: float = 2.0, interval_s: float = 0.25):
        self.cgroups, self.window_s, self.interval_s = cgroups, window_s, interval_s
        self._samples: list[tuple[float, int]] = []  # (monotonic time, count), the first and the changes
        self._exited: float | None = None
        self._task: asyncio.Task[None] | None = None

    def start(self, proc: asyncio.subprocess.Process) -> None:
        n = self.cgroups.oom_kills() if self.cgroups is not None else None
        if n is not None:
            self._samples = [(time.monotonic(), n)]
            self._task = asyncio.ensure_future(self._poll(proc))

    async def _poll(self, proc: asyncio.subprocess.Process) -> None:
        while self._exited is None:
            await asyncio.sleep(self.interval_s)
            self._sample()
            if proc.returncode is not None:  # dead (its pipes may stay open in a child's hands)
                self._exited = time.monotonic()

    def _sample(self) -> None:
        n = self.cgroups.oom_kills() if self.cgroups is not None else None
        if n is not None and n != self._samples[-1][1]:
            self._samples.append((time.monotonic(), n))
            del self._samples[1:-64]

    def stop(self) -> int:
        """The kills in the last ``window_s`` before the process died (before now, if not seen dead yet)."""
        if self._task is None:
            return 0
        self._task.cancel()
        self._task = None
        if self._exited is None:
            self._sample()
        end = self._exited if self._exited is not None else time.monotonic()
        at_death = [c for t, c in self._samples if t <= end][-1]
        before = [c for t, c in self._samples if t <= end - self.window_s] or [self._samples[0][1]]
        return max(0, at_death - before[-1])


def limits_prefix(
    *, memory_mb: int | None, cpu_s: float | None, max_open_files: int | None, max_procs: int | None,
    cgroups: CgroupSet | None = None, max_file_mb: int | None = None,
) -> list[str]:
    """A ``sh -c`` prefix that joins the cgroups and lowers rlimits, then ``exec``s the command.

    A shell wrapper rather than a ``preexec_fn``: a ``preexec_fn`` forces a real ``fork()`` of the
    whole driver (~15 ms and rising with its size) where ``posix_spawn``/``vfork`` is otherwise used.
    Raising a limit is impossible without CAP_SYS_RESOURCE, so each is ``min(requested, hard)``.
    Memory falls back to RLIMIT_DATA (not RLIMIT_AS: Node and Chromium reserve far more address
    space than they use) when no memory cgroup is available."""
    cg_limited = cgroups.limited if cgroups else set()
    lines = [f"echo $$ > {shlex.quote(str(d / 'cgroup.procs'))} 2>/dev/null" for d in (cgroups.paths if cgroups else [])]

    def lower(flag: str, which: int, value: int, unit: int = 1) -> None:
        _soft, hard = resource.getrlimit(which)
        if hard != resource.RLIM_INFINITY:
            value = min(value, hard // unit)
        lines.append(f"ulimit {flag} {max(1, value)} 2>/dev/null")

    if memory_mb and "memory" not in cg_limited:
        lower("-d", resource.RLIMIT_DATA, memory_mb * 1024, 1024)
    if cpu_s:
        lower("-t", resource.RLIMIT_CPU, int(cpu_s))
    if max_open_files:
        lower("-n", resource.RLIMIT_NOFILE, max_open_files)
    if max_file_mb:  # in 512-byte blocks (dash; bash counts 1024: at worst twice as lax, never tighter)
        lower("-f", resource.RLIMIT_FSIZE, max_file_mb * 2048, 512)
    if max_procs and "pids" not in cg_limited and os.getuid() != 0:
        # RLIMIT_NPROC counts every process of the user, not just ours (and root ignores it).
        base = sum(1 for p in Path("/proc").iterdir() if p.name.isdigit())
        lower("-p", resource.RLIMIT_NPROC, base + max_procs)
    lines.append('exec "$@"')
    return ["/bin/sh", "-c", "; ".join(lines), "sh"]


def rlimit_memory_gaps(memory_mb: int, max_processes: int, scratch: str, rollout_tmpfs_mb: int | None) -> str:
    """What ``memory_mb`` leaves open when RLIMIT_DATA alone enforces it (no writable memory cgroup),
    in words for a warning. ``scratch``: how the scratch mounts are bounded; ``rollout_tmpfs_mb``: the
    size of the rollout directory's tmpfs (``None``: it is on the host's disk)."""
    tmpfs = f"its own tmpfs of disk_mb={rollout_tmpfs_mb} MB" if rollout_tmpfs_mb else "none: it is on the host disk"
    return (f"no writable memory cgroup here, so memory_mb={memory_mb} is enforced per process by RLIMIT_DATA only. "
            f"Left open: the sum over a rollout's processes (up to max_processes={max_processes} of them, each under "
            "the limit); memory that is not a process's data segment: shared memory, memfd and tmpfs pages, i.e. the "
            f"rollout directory ({tmpfs}) and each command's scratch /tmp, /var/tmp, /run, /dev/shm ({scratch}), and "
            "the page cache. Bound them by running the driver with a writable cgroup (cgroup v2 delegated to its "
            "user; docker: --cgroupns=private with /sys/fs/cgroup writable), or give each rollout less disk_mb.")
