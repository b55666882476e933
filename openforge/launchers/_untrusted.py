"""Run the agent's code from a verifier, out of the verifier's reach: ``$OPENFORGE_UNTRUSTED``.

Usage (in a task directory's verifier)::

    python3 "$OPENFORGE_UNTRUSTED" --check || exit 2      # can it isolate here? (else: the verifier failed)
    python3 "$OPENFORGE_UNTRUSTED" [--timeout S] [--hide PATH]... [--network] -- CMD [ARG...]

A verifier that imports or runs the agent's code shares its uid, pid namespace and output with that
code: the code could print a result line, kill the verifier, or write the verifier's verdict. This
helper runs ``CMD`` so that it cannot:

* **own pid, mount, network and IPC namespaces** (a user namespace when the verifier is not root):
  the verifier's processes are not there to signal, trace or open (``/proc`` is a fresh one of the
  new pid namespace, or an empty read-only mount where a fresh one cannot be made); it has no
  network (``--network`` keeps the verifier's: the task's services); when ``CMD`` exits, everything
  it started is killed with it;
* **hidden paths**: the verdict's directory (``$OPENFORGE_VERDICT``), the task directory
  (``$OPENFORGE_TASK_DIR``: answers, the reference solution), the services' state
  (``$OPENFORGE_SERVICE_DIR``) and each ``--hide PATH`` are empty and read-only for it (mounts it
  cannot remove: it holds no capability once ``CMD`` starts);
* **no inherited descriptors** but stdin/stdout/stderr, a session of its own, ``no_new_privs``;
  ``OPENFORGE_VERDICT`` is not in its environment;
* **another identity when the verifier is root** (a pod, ``verify_on_host`` under a root driver):
  it runs as ``nobody`` (65534), so the directories it works in must be readable (and writable where
  it writes) by all. Without ``CAP_SYS_ADMIN`` (a pod) it then shares the pid namespace, but as
  another user it can signal, trace or write nothing of the verifier's.

``--check`` (run from the directory the command will run in) exits 125 too when a root verifier's
``nobody`` cannot enter that directory. Where none of that can be set up (a non-root verifier where user namespaces are disabled) it exits
:data:`EXIT_SETUP` (125) without running anything, unless ``OPENFORGE_UNTRUSTED_WEAK_OK=1`` (set by
the driver for a Kubernetes pod, one trust domain anyway): then ``CMD`` runs with only the
descriptor, session and ``no_new_privs`` measures, and a note on stderr says so.

Exit status: ``CMD``'s; 128+N when a signal N ended it; 124 when ``--timeout`` ran out; 125 when
the helper could not isolate it. ``CMD`` can exit 124 or 125 too, so a verifier tells its own failure
from the agent's with ``--check`` first: it sets the same isolation up, runs nothing, and exits 0
(isolation works here) or 125 (it does not, or only in the weak mode where that is allowed: 0). It still shares stdout/stderr with the verifier: write the verdict
to ``$OPENFORGE_VERDICT`` (docs/task-format.md), never trust stdout after running agent code.

Stdlib only, no openforge imports: a pod's ``python3`` runs it from a copy.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

CLONE_NEWNS, CLONE_NEWIPC, CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x20000, 0x8000000, 0x10000000, 0x20000000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_BIND, MS_REC, MS_PRIVATE = 1, 2, 4, 8, 4096, 0x4000, 1 << 18
PR_SET_PDEATHSIG, PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS = 1, 24, 38
NOBODY = 65534
EXIT_TIMEOUT, EXIT_SETUP = 124, 125
#: Environment the agent's code never gets.
PRIVATE_ENV = ("OPENFORGE_VERDICT", "OPENFORGE_UNTRUSTED_WEAK_OK")

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_void_p]


class SetupError(RuntimeError):
    """The isolation could not be set up (nothing of the agent's has run)."""


class NoNamespaces(SetupError):
    """The namespaces cannot be made here (no user namespaces, no CAP_SYS_ADMIN): the one failure
    after which a weaker mode may run the command."""


def _call(rc: int, what: str) -> None:
    if rc != 0:
        err = ctypes.get_errno()
        raise SetupError(f"{what}: {os.strerror(err)}")


def _enc(s: str | None) -> bytes | None:
    return s.encode() if s is not None else None


def _mount(src: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    _call(_libc.mount(_enc(src), _enc(target), _enc(fstype), flags, _enc(data)), f"mount {fstype or src} on {target}")


def _usage(msg: str) -> SystemExit:
    print(f"openforge-untrusted: {msg}\nusage: python3 \"$OPENFORGE_UNTRUSTED\" [--timeout S] [--hide PATH]... "
          "[--network] -- CMD [ARG...]  |  --check", file=sys.stderr)
    return SystemExit(2)


def parse(argv: list[str]) -> tuple[float | None, list[str], bool, list[str]]:
    """(timeout, hidden paths, keep network, command); ``--check`` is an empty command."""
    timeout: float | None = None
    hide: list[str] = []
    network = False
    if argv == ["--check"]:
        return None, [], False, []
    i = 0
    while i < len(argv) and argv[i] != "--":
        a = argv[i]
        if a in ("--timeout", "--hide") and i + 1 < len(argv):
            i += 1
            if a == "--hide":
                hide.append(argv[i])
            else:
                try:
                    timeout = float(argv[i])
                except ValueError:
                    raise _usage(f"--timeout {argv[i]!r} is not a number of seconds") from None
        elif a == "--network":
            network = True
        else:
            raise _usage(f"unknown option {a!r}")
        i += 1
    cmd = argv[i + 1:]
    if not cmd:
        raise _usage("no command given (put it after --)")
    return timeout, hide, network, cmd


def hidden_paths(extra: list[str]) -> list[str]:
    """What the agent's code must not see: the verdict's directory, the task and service dirs, ``extra``."""
    env = os.environ
    out = [os.path.dirname(env["OPENFORGE_VERDICT"])] if env.get("OPENFORGE_VERDICT") else []
    out += [env[k] for k in ("OPENFORGE_TASK_DIR", "OPENFORGE_SERVICE_DIR") if env.get(k)]
    out += extra
    return [os.path.realpath(p) for p in dict.fromkeys(out) if os.path.lexists(p)]


def _hide(paths: list[str]) -> None:
    for p in paths:
        if os.path.isdir(p):
            _mount("tmpfs", p, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=4k,mode=555")
        else:
            _mount("/dev/null", p, None, MS_BIND)


def _own_proc() -> None:
    """A fresh ``/proc`` of this pid namespace, else an empty read-only one (the old one shows the verifier)."""
    try:
        _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    except SetupError:
        _mount("tmpfs", "/proc", "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=4k,mode=555")


def _recheck_cwd(why: str = "it is inside a hidden path") -> None:
    """Enter the cwd again by its path: a cwd inside a hidden path would otherwise still show it,
    and the agent's code (``nobody`` under a root verifier) must be able to enter it."""
    cwd = os.getcwd()
    try:
        os.chdir(cwd)
    except OSError:
        raise SetupError(f"cannot run in {cwd}: {why}") from None


def _close_inherited() -> None:
    """Every descriptor but 0-2 (the verifier's verdict, pipes, directories), however high."""
    try:
        high = [int(f) for f in os.listdir("/proc/self/fd") if f.isdigit()]
    except OSError:
        high = []
    os.closerange(3, max([1 << 16, os.sysconf("SC_OPEN_MAX"), *(f + 1 for f in high)]))


def _become_nobody() -> None:
    os.setgroups([])
    os.setresgid(NOBODY, NOBODY, NOBODY)
    os.setresuid(NOBODY, NOBODY, NOBODY)
    if os.getresuid() != (NOBODY,) * 3:
        raise SetupError("could not become nobody")


def _seal() -> None:
    """No capability can come back: bounding set emptied (where allowed), ``no_new_privs``."""
    for cap in range(64):
        _libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)
    _call(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(PR_SET_NO_NEW_PRIVS)")


def _exec(cmd: list[str]) -> None:
    if not cmd:  # --check: everything is set up; nothing to run
        os._exit(0)
    env = {k: v for k, v in os.environ.items() if k not in PRIVATE_ENV}
    try:
        os.execvpe(cmd[0], cmd, env)
    except OSError as e:
        print(f"openforge-untrusted: cannot run {cmd[0]!r}: {e.strerror or e}", file=sys.stderr)
        os._exit(127 if isinstance(e, FileNotFoundError) else 126)


def _status(st: int) -> int:
    if os.WIFSIGNALED(st):
        return 128 + os.WTERMSIG(st)
    return os.WEXITSTATUS(st)


def _wait(pid: int, timeout: float | None) -> int:
    """Wait for ``pid``; SIGKILL it when ``timeout`` runs out (→ 124)."""
    expired = []

    def kill(*_: object) -> None:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:  # gone already
            pass

    def on_alarm(*_: object) -> None:
        expired.append(True)
        kill()

    if timeout:
        signal.signal(signal.SIGALRM, on_alarm)
        signal.setitimer(signal.ITIMER_REAL, timeout)
    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(s, kill)
    _, st = os.waitpid(pid, 0)
    signal.setitimer(signal.ITIMER_REAL, 0)
    return EXIT_TIMEOUT if expired else _status(st)


def _report(fd: int, err: BaseException | None) -> None:
    os.write(fd, b"ok" if err is None else f"{err}".encode()[:2000] or b"failed")
    os.close(fd)


def _read_all(fd: int) -> bytes:
    out = b""
    while chunk := os.read(fd, 4096):
        out += chunk
    os.close(fd)
    return out


def _pid1(cmd: list[str], hide: list[str], root: bool, report: int) -> None:
    """In the new pid namespace (pid 1): fresh /proc, hidden paths, drop, exec. Never returns."""
    try:
        _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        _own_proc()
        _hide(hide)
        _recheck_cwd()
        if root:
            _become_nobody()
            _recheck_cwd("nobody cannot enter it: chmod -R a+rX it and its parents")
        os.setsid()
        _seal()
    except (SetupError, OSError) as e:
        _report(report, e)
        os._exit(EXIT_SETUP)
    _report(report, None)
    _exec(cmd)


def _maker(cmd: list[str], hide: list[str], root: bool, flags: int, timeout: float | None,
           to_host: int, from_host: int) -> None:
    """The forked namespace maker: unshare (→ ``u``, or ``N<why>``: no namespaces here), wait for the
    helper to write its id maps, then fork pid 1, relay its setup report and wait for it. Never returns."""
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    try:
        _call(_libc.unshare(flags), "unshare")
    except SetupError as e:
        _report(to_host, SetupError(f"N{e}"))
        os._exit(EXIT_SETUP)
    os.write(to_host, b"u")
    if _read_all(from_host) != b"mapped":
        os._exit(EXIT_SETUP)
    try:
        _mount(None, "/", None, MS_REC | MS_PRIVATE)
    except SetupError as e:
        _report(to_host, e)
        os._exit(EXIT_SETUP)
    r, w = os.pipe()
    child = os.fork()
    if child == 0:
        os.close(r)
        os.close(to_host)
        _pid1(cmd, hide, root, w)
    os.close(w)
    msg = _read_all(r)
    _report(to_host, None if msg == b"ok" else SetupError(msg.decode(errors="replace")))
    os._exit(_wait(child, timeout))


def _map_ids(pid: int, root: bool) -> None:
    """Map the helper's own uid/gid into ``pid``'s new user namespace (none when root: no userns)."""
    if root:
        return
    uid, gid = os.geteuid(), os.getegid()
    _write(f"/proc/{pid}/setgroups", "deny")
    _write(f"/proc/{pid}/uid_map", f"{uid} {uid} 1")
    _write(f"/proc/{pid}/gid_map", f"{gid} {gid} 1")


def _in_namespaces(cmd: list[str], hide: list[str], network: bool, timeout: float | None) -> int:
    """The isolated run: this process forks a child that makes the namespaces (a user namespace too
    unless root), whose own child is pid 1 there and runs ``cmd``. :class:`NoNamespaces` when they
    cannot be made here, :class:`SetupError` when anything else of the isolation fails."""
    root = os.geteuid() == 0
    flags = CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC | (0 if network else CLONE_NEWNET) | (0 if root else CLONE_NEWUSER)
    c2h_r, c2h_w = os.pipe()
    h2c_r, h2c_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(c2h_r)
        os.close(h2c_w)
        _maker(cmd, hide, root, flags, timeout, c2h_w, h2c_r)
    os.close(c2h_w)
    os.close(h2c_r)
    first = os.read(c2h_r, 4096)
    if first != b"u":
        os.waitpid(pid, 0)
        if first.startswith(b"N"):
            raise NoNamespaces(first[1:].decode(errors="replace"))
        raise SetupError(first.decode(errors="replace") or "the namespace child died")
    try:
        _map_ids(pid, root)
        os.write(h2c_w, b"mapped")
    except OSError as e:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        raise NoNamespaces(f"cannot map the user namespace: {e}") from None
    finally:
        os.close(h2c_w)
    rest = _read_all(c2h_r)
    if rest != b"ok":
        os.waitpid(pid, 0)
        raise SetupError(rest.decode(errors="replace") or "the namespace child died")
    return _wait(pid, timeout)


def _write(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


def _plain(cmd: list[str], timeout: float | None, root: bool) -> int:
    """No namespaces: another identity when root, else only descriptors, session, no_new_privs."""
    pid = os.fork()
    if pid == 0:
        try:
            _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
            if root:
                _become_nobody()
                _recheck_cwd("nobody cannot enter it: chmod -R a+rX it and its parents")
            os.setsid()
            _seal()
        except (SetupError, OSError) as e:
            print(f"openforge-untrusted: {e}", file=sys.stderr)
            os._exit(EXIT_SETUP)
        _exec(cmd)
    st = _wait(pid, timeout)
    try:  # what it left in its session
        os.killpg(pid, signal.SIGKILL)
    except OSError:
        pass
    return st


def main(argv: list[str]) -> int:
    timeout, extra, network, cmd = parse(argv)
    _close_inherited()
    hide = hidden_paths(extra)
    root = os.geteuid() == 0
    try:
        return _in_namespaces(cmd, hide, network, timeout)
    except NoNamespaces as e:
        why = str(e)
    except SetupError as e:
        print(f"openforge-untrusted: cannot isolate the agent's code ({e}); nothing was run", file=sys.stderr)
        return EXIT_SETUP
    if root:
        print(f"openforge-untrusted: no namespaces here ({why}): running the agent's code as nobody in this pid "
              "namespace, the hidden paths readable if others may read them", file=sys.stderr)
        return _plain(cmd, timeout, root=True)
    if os.environ.get("OPENFORGE_UNTRUSTED_WEAK_OK") == "1":
        print(f"openforge-untrusted: no user namespace here ({why}): the agent's code runs as the verifier's user, "
              "without isolation (a pod is one trust domain)", file=sys.stderr)
        return _plain(cmd, timeout, root=False)
    print(f"openforge-untrusted: cannot isolate the agent's code ({why}); nothing was run. User namespaces are "
          "needed (sysctl user.max_user_namespaces > 0, kernel.unprivileged_userns_clone=1)", file=sys.stderr)
    return EXIT_SETUP


if __name__ == "__main__":
    sys.stdout.flush()
    os._exit(main(sys.argv[1:]))
