"""The in-pod agent of the Kubernetes launcher: a tiny HTTP server that runs commands and moves files.

Stdlib only; the launcher ships its source in the pod's command (``python3 -I -c SOURCE ...``), so any
image with ``python3`` works. The driver reaches it through the API server's pod proxy
(``/api/v1/namespaces/NS/pods/NAME:PORT/proxy/...``) — no Service, no port-forward — and every
request must carry the per-rollout token (``X-Openforge-Token``; given to the pod through a Secret).

Routes: ``GET /healthz``; ``POST /exec`` ``{argv, env, cwd, timeout_s, stdin_b64, grace_s}`` → ``{returncode,
stdout, stderr, duration_s, timed_out, oom_kills}`` (``oom_kills``: the pod's memory cgroup's OOM kills just before
the command died, :class:`OomWatch`) (own process group; on timeout SIGTERM then SIGKILL of the
group); ``GET /file?path=&root=&max_bytes=`` → bytes (read as a hostile file by ``_hostile_read``: no
link below ``root`` followed, regular files only, never blocking, at most ``max_bytes``; 404 with
``"missing": true`` when absent, 403 with ``"refused": true`` otherwise); ``PUT /file?path=&mode=`` (raw
bytes, or JSON ``{data_b64}``); ``GET /tar?path=`` → a gzip tar;
``POST /verify`` ``{base, tar_b64, digest, ...exec fields}``: the verifier's one step (:func:`verify`);
``POST /end``: end every process of the agent (:func:`end_agent_processes`) → ``{ended}``.

The agent's processes run as the pod agent's uid, so the pod agent guards itself (:func:`_guard_self`):
it is the pod's first process (PID 1 of the pod's pid namespace, to which the kernel delivers no
signal from inside the pod that it has no handler for, SIGKILL and SIGSTOP included), it is not
dumpable (no ``ptrace`` or ``/proc/1/mem`` for a process of the same uid), and it imports nothing
from its working directory (the agent's workdir).

``_hostile_read`` is imported (from the package, or as a sibling when this file runs as a script); the
source shipped to the pod has that module's source in place of the import
(``k8s_manifests.agent_source``).
"""

from __future__ import annotations

import argparse
import base64
import gzip  # noqa: F401  (tarfile imports it lazily; loaded here, before any agent file exists)
import hashlib
import io
import json
import os
import signal
import stat
import subprocess
import sys
import tarfile
import threading
import time
import zlib  # noqa: F401
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

# >>> _hostile_read (the pod gets that module's source here: k8s_manifests.agent_source)
try:
    from ._hostile_read import DEFAULT_MAX_BYTES, FileRefused, read_hostile
except ImportError:  # run as a script, beside it
    from _hostile_read import DEFAULT_MAX_BYTES, FileRefused, read_hostile  # type: ignore[no-redef]
# <<< _hostile_read

TOKEN = ""  # set by main() from OPENFORGE_AGENT_TOKEN, which it removes from the environment
#: How long the verifier's step waits for the agent's processes to be gone after SIGKILL.
SWEEP_S = 10.0


#: How often the pod agent reaps the zombies of processes it did not start (:func:`reap_orphans`).
REAP_INTERVAL_S = 1.0
#: Held while a command is started and its pid noted, and while orphans are reaped: a command that exits
#: at once is never mistaken for an orphan (its exit status belongs to its ``Popen``).
_SPAWN = threading.Lock()
#: Pids of the commands this agent started and has not waited for yet.
_OWN: set = set()


#: Where the pod's memory cgroup counts its OOM kills (``oom_kill N``): cgroup v2, then v1.
OOM_EVENTS = ("/sys/fs/cgroup/memory.events", "/sys/fs/cgroup/memory/memory.oom_control")
#: Kills counted this long before a command died are its death's cause (as the local launcher's OomWatch).
OOM_WINDOW_S = 2.0


def oom_count() -> int | None:
    """The pod's memory cgroup's ``oom_kill`` count (None: not counted here)."""
    for path in OOM_EVENTS:
        try:
            with open(path) as f:
                for line in f:
                    key, _, value = line.partition(" ")
                    if key == "oom_kill" and value.strip().isdigit():
                        return int(value)
        except OSError:
            continue
    return None


class OomWatch(threading.Thread):
    """Polls :func:`oom_count` while ``proc`` runs, noting when it changed and when ``proc`` died, so
    :meth:`at_death` counts only the kills of the last :data:`OOM_WINDOW_S` before its death (an older
    kill of the agent's own command followed by the agent killing its harness is not an OOM death)."""

    def __init__(self, proc: subprocess.Popen, interval_s: float = 0.25) -> None:
        super().__init__(daemon=True)
        self.proc, self.interval_s = proc, interval_s
        first = oom_count()
        self.samples = [] if first is None else [(time.monotonic(), first)]
        self.died: float | None = None

    def run(self) -> None:
        while self.samples and self.died is None:
            time.sleep(self.interval_s)
            n = oom_count()
            if n is not None and n != self.samples[-1][1]:
                self.samples.append((time.monotonic(), n))
            if self.proc.poll() is not None:
                self.died = time.monotonic()

    def at_death(self) -> int:
        if not self.samples:
            return 0
        self.join(timeout=2 * self.interval_s + 1)
        end = self.died if self.died is not None else time.monotonic()
        last = [c for t, c in self.samples if t <= end][-1]
        before = [c for t, c in self.samples if t <= end - OOM_WINDOW_S] or [self.samples[0][1]]
        return max(0, last - before[-1])


def run(req: dict, base_env: dict[str, str]) -> dict:
    t0 = time.monotonic()
    env = dict(base_env)
    env.update(req.get("env") or {})
    stdin = base64.b64decode(req["stdin_b64"]) if req.get("stdin_b64") is not None else None
    try:
        with _SPAWN:
            proc = subprocess.Popen(req["argv"], cwd=req.get("cwd") or None, env=env, start_new_session=True,
                                    stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            _OWN.add(proc.pid)
    except OSError as e:
        return {"returncode": 127, "stdout": "", "stderr": f"cannot run {req['argv'][0]!r}: {e}",
                "duration_s": time.monotonic() - t0, "timed_out": False}
    try:
        return _finish(proc, req, stdin, t0)
    finally:
        _OWN.discard(proc.pid)


def _finish(proc: subprocess.Popen, req: dict, stdin: bytes | None, t0: float) -> dict:
    timed_out, ooms = False, OomWatch(proc)
    ooms.start()
    try:
        out, err = proc.communicate(stdin, timeout=req.get("timeout_s"))
    except subprocess.TimeoutExpired:
        timed_out = True
        for sig, wait in ((signal.SIGTERM, float(req.get("grace_s", 2.0))), (signal.SIGKILL, None)):
            try:
                os.killpg(proc.pid, sig)
            except OSError:
                pass
            try:
                out, err = proc.communicate(timeout=wait)
                break
            except subprocess.TimeoutExpired:
                continue
    try:  # nothing of this command outlives it
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        pass
    return {"returncode": None if timed_out else proc.returncode, "stdout": out.decode(errors="replace"),
            "stderr": err.decode(errors="replace"), "duration_s": time.monotonic() - t0, "timed_out": timed_out,
            "oom_kills": ooms.at_death()}


def reap_orphans() -> int:
    """Reap the zombies of processes this agent did not start; how many. The pod agent is the pod's PID 1,
    so every process the agent orphans (``setsid`` + exit, a double fork) is re-parented to it, and when it
    dies it stays a zombie (holding a pid) until PID 1 waits for it: an agent that spawns short-lived
    orphans in a loop would otherwise fill the pod's pid limit. The agent's own commands are left to
    their ``Popen`` (:data:`_OWN`), which needs their exit status."""
    me, n = os.getpid(), 0
    with _SPAWN:
        for name in os.listdir("/proc"):
            if not name.isdigit() or int(name) in _OWN:
                continue
            try:
                with open(f"/proc/{name}/stat", "rb") as f:
                    fields = f.read().rsplit(b")", 1)[1].split()
                if fields[0] == b"Z" and int(fields[1]) == me:
                    os.waitpid(int(name), os.WNOHANG)
                    n += 1
            except (OSError, IndexError, ValueError):  # gone, or reaped meanwhile
                continue
    return n


def _reaper() -> None:
    while True:
        time.sleep(REAP_INTERVAL_S)
        reap_orphans()


def _live_others() -> list[int]:
    """Processes of this pid namespace, other than this one, that are not zombies and that this uid
    may signal (``/proc``; a process of another uid is not the agent's and is left alone)."""
    me, out = os.getpid(), []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == me:
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                state = f.read().rsplit(b")", 1)[1].split()[0]
            if state in (b"Z", b"X"):
                continue
            os.kill(int(name), 0)
        except (OSError, IndexError):  # gone, or not ours to signal
            continue
        out.append(int(name))
    return out


def end_agent_processes() -> int:
    """SIGKILL every other process of the pod this uid may signal, until none is left; how many there
    were. ``kill(-1)`` from the pod's PID 1 reaches every such process but the caller, atomically (a
    process forking meanwhile cannot leave a child behind), and only inside the pod's pid namespace:
    anywhere else it would reach the host's processes of this uid, so it is refused there."""
    if os.getpid() != 1:
        raise RuntimeError(f"the pod agent is pid {os.getpid()}, not its pod's first process, so it cannot make "
                           "sure that no process of the agent outlives the rollout (was the pod's command changed, "
                           "or shareProcessNamespace set?)")
    deadline, seen = time.monotonic() + SWEEP_S, set()
    while True:  # no walrus: the pod's python3 may be older than the driver's
        left = _live_others()
        if not left:
            return len(seen)
        seen.update(left)
        if time.monotonic() > deadline:
            raise RuntimeError(f"processes {sorted(left)[:10]} of the agent were still alive {SWEEP_S:g}s after SIGKILL")
        try:
            os.kill(-1, signal.SIGKILL)
        except OSError:
            pass
        time.sleep(0.005)


def tree_digest(entries: list[tuple[str, str, str]]) -> str:
    """sha256 of a tree given as ``(kind, relative path, content sha256 or "-")`` entries, in any order."""
    h = hashlib.sha256()
    for kind, path, sha in sorted(entries):
        h.update(f"{kind}\0{path}\0{sha}\0".encode("utf-8", "surrogateescape"))
    return h.hexdigest()


def tree_entries(root: str, skip: tuple[str, ...] = ("home", "verdict")) -> list[tuple[str, str, str]]:
    """:func:`tree_digest`'s entries for the tree under ``root`` (not following links; a link or any
    other irregular entry is its own kind ``o``), leaving out ``skip`` at the top."""
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        if dirpath == root:
            dirnames[:] = [d for d in dirnames if d not in skip]
        for name in dirnames + filenames:
            full = os.path.join(dirpath, name)
            rel, st = os.path.relpath(full, root), os.lstat(full)
            if stat.S_ISDIR(st.st_mode):
                out.append(("d", rel, "-"))
            elif stat.S_ISREG(st.st_mode):
                with open(full, "rb") as f:
                    out.append(("f", rel, hashlib.sha256(f.read()).hexdigest()))
            else:
                out.append(("o", rel, "-"))
    return out


def _unpack(base: str, data: bytes) -> None:
    """Unpack the verifier's files into ``base``, a new directory of ours (0700), and its HOME and verdict
    directory beside them."""
    os.mkdir(base, 0o700)  # fails if anything is there already
    # others may pass through (not list): a root verifier's $OPENFORGE_UNTRUSTED runs the agent's code as
    # nobody in a scratch directory under HOME
    os.chmod(base, 0o711)
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as t:
        try:
            t.extractall(base, filter="data")
        except TypeError:  # pragma: no cover - Python without extraction filters
            t.extractall(base, members=[m for m in t.getmembers() if (m.isreg() or m.isdir())
                                        and not m.name.startswith("/") and ".." not in m.name.split("/")])
    os.mkdir(os.path.join(base, "home"), 0o700)
    os.chmod(os.path.join(base, "home"), 0o711)
    os.mkdir(os.path.join(base, "verdict"), 0o700)  # $OPENFORGE_VERDICT's directory


def verify(req: dict) -> tuple[int, dict]:
    """The verifier's one step, with nothing of the agent's able to run between its parts: end every
    process of the agent (:func:`end_agent_processes`), unpack the task's files (first call: ``tar_b64``)
    into ``base``, check that the tree there is the one sent (``digest``), and run the verifier with
    exactly the environment given (nothing of the pod's). ``(HTTP status, reply)``."""
    try:
        ended = end_agent_processes()
    except RuntimeError as e:
        return 409, {"error": str(e)}
    base = str(req.get("base") or "")
    try:
        if req.get("tar_b64") is not None:
            _unpack(base, base64.b64decode(req["tar_b64"]))
        st = os.lstat(base)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o066:
            return 409, {"error": f"{base} is not the verifier's own directory"}
        digest = tree_digest(tree_entries(base))
    except (OSError, tarfile.TarError, ValueError) as e:
        return 409, {"error": f"cannot unpack the verifier's files into {base}: {e}"}
    if digest != req.get("digest"):
        return 409, {"error": f"the verifier's files in {base} are not the ones sent (tree sha256 {digest[:12]}, "
                              f"sent {str(req.get('digest'))[:12]})"}
    return 200, {**run(req, {}), "ended": ended}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a: object) -> None:
        pass

    def _reply(self, code: int, body: bytes, ctype: str = "application/json") -> None:
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _auth(self) -> bool:
        if TOKEN and self.headers.get("X-Openforge-Token") != TOKEN:
            self._reply(403, b'{"error": "bad token"}')
            return False
        return True

    def _body(self) -> bytes:
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def do_GET(self) -> None:
        url = urlparse(self.path)
        q = {k: v[0] for k, v in parse_qs(url.query).items()}
        if url.path.endswith("/healthz"):
            return self._reply(200, b'{"ok": true}')
        if not self._auth():
            return None
        try:
            if url.path.endswith("/file"):
                root = q.get("root") or os.path.dirname(q["path"])
                data = read_hostile(q["path"], root=root, max_bytes=int(q.get("max_bytes", DEFAULT_MAX_BYTES)))
                return self._reply(200, data, "application/octet-stream")
            if url.path.endswith("/tar"):
                buf = io.BytesIO()
                with tarfile.open(fileobj=buf, mode="w:gz") as tar:
                    tar.add(q["path"], arcname=".")
                return self._reply(200, buf.getvalue(), "application/gzip")
        except FileRefused as e:  # the agent left a FIFO, a link, a huge file: a distinct answer
            return self._reply(403, json.dumps({"error": e.why, "refused": True}).encode())
        except (FileNotFoundError, NotADirectoryError) as e:  # the agent did not write it: a distinct answer
            return self._reply(404, json.dumps({"error": str(e), "missing": True}).encode())
        except ValueError as e:
            return self._reply(400, json.dumps({"error": str(e)}).encode())
        except (OSError, KeyError) as e:
            return self._reply(404, json.dumps({"error": str(e)}).encode())
        return self._reply(404, b'{"error": "no such route"}')

    def do_PUT(self) -> None:
        url = urlparse(self.path)
        q = {k: v[0] for k, v in parse_qs(url.query).items()}
        if not self._auth():
            return None
        data = self._body()
        try:
            if (self.headers.get("Content-Type") or "").startswith("application/json"):
                data = base64.b64decode(json.loads(data)["data_b64"])
            os.makedirs(os.path.dirname(q["path"]) or ".", exist_ok=True)
            with open(q["path"], "wb") as f:
                f.write(data)
            os.chmod(q["path"], int(q.get("mode", "420")))
        except (OSError, KeyError, ValueError) as e:
            return self._reply(400, json.dumps({"error": str(e)}).encode())
        return self._reply(200, b'{"ok": true}')

    def do_POST(self) -> None:
        if not self._auth():
            return None
        route, body = urlparse(self.path).path, self._body()  # read whole: the connection is kept alive
        if route.endswith("/end"):
            try:
                return self._reply(200, json.dumps({"ended": end_agent_processes()}).encode())
            except RuntimeError as e:
                return self._reply(409, json.dumps({"error": str(e)}).encode())
        if not route.endswith(("/exec", "/verify")):
            return self._reply(404, b'{"error": "no such route"}')
        try:
            req = json.loads(body)
        except ValueError:
            return self._reply(400, b'{"error": "bad json"}')
        if route.endswith("/verify"):
            code, reply = verify(req)
            return self._reply(code, json.dumps(reply).encode())
        env = {k: v for k, v in os.environ.items() if not k.startswith("OPENFORGE_AGENT")}
        return self._reply(200, json.dumps(run(req, env)).encode())


def _guard_self() -> None:
    """What keeps the agent's processes (same uid) off the pod agent: no imports from the working
    directory, no ptrace / ``/proc/1/mem`` (not dumpable), and no signal it handles: as the pod's PID 1
    it then receives none from inside the pod (SIGINT gets a no-op handler, which commands do not inherit;
    SIGTERM keeps its default, so the pod is stopped by SIGKILL from outside: deletion uses grace 0)."""
    cwd = os.getcwd()
    sys.path[:] = [p for p in sys.path if p not in ("", ".", cwd)]
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE, 0
    except (ImportError, OSError, AttributeError):  # pragma: no cover - an image without ctypes
        print("openforge pod agent: cannot make itself non-dumpable (no ctypes)", file=sys.stderr, flush=True)
    signal.signal(signal.SIGINT, lambda *_: None)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def main(argv: list[str]) -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, default=8790)
    p.add_argument("--host", default="0.0.0.0")
    p.add_argument("--mkdir", action="append", default=[])
    a = p.parse_args(argv)
    global TOKEN
    TOKEN = os.environ.pop("OPENFORGE_AGENT_TOKEN", "")
    _guard_self()
    for d in a.mkdir:
        os.makedirs(d, exist_ok=True)
    if os.getpid() != 1:  # outside a pod (tests): orphans of its commands come to it all the same
        try:
            import ctypes

            ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
        except (ImportError, OSError, AttributeError):  # pragma: no cover
            pass
    threading.Thread(target=_reaper, name="reaper", daemon=True).start()
    server = ThreadingHTTPServer((a.host, a.port), Handler)
    server.daemon_threads = True
    print(f"LISTENING {server.server_address[1]}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main(sys.argv[1:])
