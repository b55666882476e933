"""Rendering and tokenizing large prompts in worker processes, so that one rollout's large prompt holds
neither the serving process's event loop nor its GIL (a thread would not do: the tokenizer holds the GIL).

Owns: :class:`TokenPool` (a few worker processes, spawned lazily, each loading the renderer — chat
template + tokenizer — once), :class:`WorkerCrashed` (the worker died during a call: that call is
retryable, the worker is replaced on the next need), :class:`RemoteError` (the template or tokenizer
raised in the worker) and the worker's entry point (``python -m openforge.proxy.tokenpool FD``).

A worker runs :meth:`Renderer.render_new <openforge.proxy.render.Renderer.render_new>` — the very code
the serving process runs for small prompts — on an unpickled copy of the serving process's renderer, so
its ids are the in-process ids. Splice heads travel without their ids (only their length, for the
context bound); the worker answers with the new ids and which head they continue, and the caller joins
them. Frames on a Unix socket pair: an 8-byte length, then a pickle; ids come back as an int32 array.

Lifetime: :meth:`TokenPool.close` (called when the proxy stops) kills every worker and reaps it; a
worker also exits when its socket closes or its parent process is gone (checked every second), and an
``atexit`` hook kills what is left, so no worker outlives the proxy.
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import os
import pickle
import signal
import socket
import struct
import subprocess
import sys
import threading
import weakref
from array import array
from pathlib import Path
from typing import Any

from ..core.errors import PicklableError
from .context_limit import PromptTooLong
from .render import Head, Rendered, Renderer

__all__ = ["RemoteError", "TokenPool", "WorkerCrashed", "default_workers"]

log = logging.getLogger("openforge.proxy")
_HEADER = struct.Struct("!Q")
NICE = 5  # workers' scheduling niceness, relative to the proxy
_SLICE = 1 << 16  # ids converted per event-loop step
_LIVE: weakref.WeakSet[TokenPool] = weakref.WeakSet()


def default_workers() -> int:
    """``$OPENFORGE_TOKEN_WORKERS`` (0 switches the pool off), else 2 (1 on a one-core machine)."""
    env = os.environ.get("OPENFORGE_TOKEN_WORKERS", "").strip()
    if env.isdigit():
        return int(env)
    return min(2, os.cpu_count() or 1)


class WorkerCrashed(RuntimeError):
    """A token worker died (or could not start) while serving a call; the call may be retried."""


class RemoteError(PicklableError, RuntimeError):
    """The chat template or tokenizer raised in a worker: ``type_name`` is the exception's class name."""

    def __init__(self, type_name: str, message: str):
        super().__init__(message)
        self.type_name = type_name


class _Worker:
    """One worker process and the parent's end of its socket (non-blocking, used from the event loop)."""

    def __init__(self, proc: subprocess.Popen, sock: socket.socket):
        self.proc, self.sock = proc, sock

    @property
    def pid(self) -> int:
        return self.proc.pid

    async def call(self, msg: Any) -> Any:
        loop = asyncio.get_running_loop()
        data = pickle.dumps(msg, protocol=5)
        try:
            await loop.sock_sendall(self.sock, _HEADER.pack(len(data)) + data)
            n = _HEADER.unpack(await self._recv_exactly(loop, _HEADER.size))[0]
            return pickle.loads(await self._recv_exactly(loop, n))
        except (OSError, EOFError) as e:
            raise WorkerCrashed(f"token worker {self.pid} died ({self._status()}): {type(e).__name__}") from None

    async def _recv_exactly(self, loop: asyncio.AbstractEventLoop, n: int) -> bytearray:
        buf = bytearray(n)
        view, got = memoryview(buf), 0
        while got < n:
            k = await loop.sock_recv_into(self.sock, view[got:])
            if k == 0:
                raise EOFError
            got += k
        return buf

    def _status(self) -> str:
        rc = self.proc.poll()
        if rc is None:
            return "still running"
        return f"killed by signal {-rc}" if rc < 0 else f"exit status {rc}"

    def terminate(self) -> None:
        """SIGKILL the process (its socket stays open for the call reading it)."""
        if self.proc.poll() is None:
            try:
                self.proc.kill()
            except OSError:
                pass

    def kill(self) -> None:
        """Kill and reap the process and close the socket (idempotent)."""
        try:
            self.sock.close()
        except OSError:
            pass
        if self.proc.poll() is None:
            try:
                self.proc.kill()
            except OSError:
                pass
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:  # pragma: no cover - a SIGKILLed process is reaped at once
            log.warning("token worker %d did not exit after SIGKILL", self.pid)


class TokenPool:
    """Up to ``size`` worker processes rendering and tokenizing prompts with a copy of ``renderer``.

    Workers start on first need (the first start imports the tokenizer's libraries: seconds); a call
    takes an idle worker or waits for one. A call whose worker dies raises :class:`WorkerCrashed` and
    the worker is replaced by the next call that needs one."""

    def __init__(self, renderer: Renderer, size: int = 2):
        self.renderer = renderer
        self.size = max(1, int(size))
        self.started = 0  # workers spawned so far (observability, tests)
        self._blob: bytes | None = None
        self._broken: str | None = None  # why the renderer cannot be shipped to a worker
        self._idle: list[_Worker] = []
        self._all: set[_Worker] = set()
        self._starting = 0
        self._changed = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._jobs: set[asyncio.Future] = set()
        self._epoch = 0  # bumped by close(): jobs from before it fail instead of starting workers
        _LIVE.add(self)

    @property
    def usable(self) -> bool:
        """False when the renderer cannot be pickled for a worker (the caller renders in-process)."""
        if self._blob is None and self._broken is None:
            try:
                self._blob = pickle.dumps(self.renderer, protocol=5)
            except Exception as e:
                self._broken = f"{type(e).__name__}: {e}"
                log.warning("token pool off: the renderer cannot be sent to a worker process (%s)", self._broken)
        return self._broken is None

    @property
    def pids(self) -> list[int]:
        """The live workers' process ids."""
        return sorted(w.pid for w in self._all)

    @property
    def busy_pids(self) -> list[int]:
        idle = set(self._idle)
        return sorted(w.pid for w in self._all if w not in idle)

    async def render(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None,
                     heads: list[Head], *, limit: int | None = None) -> Rendered:
        """:meth:`Renderer.render` in a worker. Raises :class:`PromptTooLong`, :class:`RemoteError` or
        :class:`WorkerCrashed`. A cancelled caller leaves the job to finish (the worker stays in step)."""
        # Only heads that the request could continue travel (their messages, without their ids).
        cands = [i for i, h in enumerate(heads) if len(h.messages) < len(messages)]
        stripped = [(Head(messages=h.messages, tools_key=h.tools_key, ids=[], ended_with_eos=h.ended_with_eos,
                          system_prefix_len=h.system_prefix_len), len(h.ids)) for h in (heads[i] for i in cands)]
        job = asyncio.ensure_future(self._job(("render", messages, tools, stripped, limit), self._epoch))
        self._jobs.add(job)
        job.add_done_callback(self._jobs.discard)
        reply = await asyncio.shield(job)
        kind = reply[0]
        if kind == "over":
            raise PromptTooLong(reply[1], reply[2])
        if kind == "err":
            raise RemoteError(reply[1], reply[2])
        ids = await _to_list(reply[1])
        head = cands[reply[4]] if reply[4] >= 0 else -1
        return Renderer.join(Rendered(ids, reply[2], spliced=reply[3], head=head), heads)

    async def _job(self, msg: Any, epoch: int) -> Any:
        w = await self._acquire(epoch)
        try:
            reply = await w.call(msg)
        except BaseException:
            self._discard(w)
            raise
        self._idle.append(w)
        self._changed.set()
        return reply

    async def _acquire(self, epoch: int) -> _Worker:
        loop = asyncio.get_running_loop()
        if loop is not self._loop:  # used from another event loop (e.g. a later asyncio.run): fresh event
            self._loop, self._changed = loop, asyncio.Event()
        while True:
            if epoch != self._epoch:
                raise WorkerCrashed("the token pool was closed (the proxy is stopping)")
            if self._idle:
                return self._idle.pop()
            if len(self._all) + self._starting < self.size:
                return await self._spawn(epoch)
            self._changed.clear()
            await self._changed.wait()

    async def _spawn(self, epoch: int) -> _Worker:
        if not self.usable:
            raise WorkerCrashed(f"the renderer cannot be sent to a worker: {self._broken}")
        self._starting += 1
        try:
            w = _start_worker()
            try:
                await w.call((list(sys.path), self._blob))  # the handshake: the worker loads the renderer and answers "ready"
                if epoch != self._epoch:
                    raise WorkerCrashed("the token pool was closed (the proxy is stopping)")
            except BaseException:
                w.kill()
                raise
            self.started += 1
            self._all.add(w)
            return w
        finally:
            self._starting -= 1
            self._changed.set()

    def _discard(self, w: _Worker) -> None:
        self._all.discard(w)
        if w in self._idle:
            self._idle.remove(w)
        w.kill()
        self._changed.set()

    def close(self) -> None:
        """Kill every worker now (idle ones are reaped at once, busy ones by their call, which fails with
        :class:`WorkerCrashed`, as do calls still waiting for a worker). The pool stays usable: a later
        call starts fresh workers."""
        self._epoch += 1
        idle = set(self._idle)
        for w in list(self._all):
            if w in idle:
                self._discard(w)
            else:  # its call is reading the socket: it sees EOF, fails, and discards (reaps) the worker
                w.terminate()
        try:
            self._changed.set()  # wake calls waiting for a worker: they fail
        except RuntimeError:  # at interpreter exit: their event loop is gone
            pass

    async def aclose(self) -> None:
        self.close()
        for job in list(self._jobs):
            try:
                await job
            except BaseException:
                pass


async def _to_list(data: bytes) -> list[int]:
    """Ids from a worker's int32 array, converted a slice at a time so that other calls run between."""
    ids = array("i")
    ids.frombytes(data)
    if len(ids) <= _SLICE:
        return ids.tolist()
    out: list[int] = []
    for i in range(0, len(ids), _SLICE):
        out += ids[i:i + _SLICE].tolist()
        await asyncio.sleep(0)
    return out


def _start_worker() -> _Worker:
    parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    root = str(Path(__file__).resolve().parents[2])  # this openforge, whatever the child's cwd
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([root, *filter(None, [os.environ.get("PYTHONPATH")])])}
    try:
        proc = subprocess.Popen([sys.executable, "-m", "openforge.proxy.tokenpool", str(child.fileno())],
                                pass_fds=(child.fileno(),), env=env, stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, close_fds=True)
    except OSError as e:
        parent.close()
        raise WorkerCrashed(f"could not start a token worker: {e}") from None
    finally:
        child.close()
    parent.setblocking(False)
    return _Worker(proc, parent)


@atexit.register
def _kill_all() -> None:
    for pool in list(_LIVE):
        pool.close()


# -- the worker process ----------------------------------------------------------------------------


def _recv(sock: socket.socket) -> Any:
    head = _read(sock, _HEADER.size)
    if head is None:
        return None
    body = _read(sock, _HEADER.unpack(head)[0])
    return None if body is None else pickle.loads(body)


def _read(sock: socket.socket, n: int) -> bytearray | None:
    buf = bytearray(n)
    view, got = memoryview(buf), 0
    while got < n:
        k = sock.recv_into(view[got:])
        if k == 0:
            return None
        got += k
    return buf


def _send(sock: socket.socket, msg: Any) -> None:
    data = pickle.dumps(msg, protocol=5)
    sock.sendall(_HEADER.pack(len(data)) + data)


def _watch_parent(parent: int) -> None:
    """Exit when the process that started this worker is gone (even mid-tokenization)."""
    import time

    while os.getppid() == parent:
        time.sleep(1.0)
    os._exit(0)


def _serve(renderer: Renderer, msg: tuple) -> tuple:
    _, messages, tools, heads, limit = msg
    try:
        r = renderer.render_new(messages, tools, heads, limit=limit)
    except PromptTooLong as e:
        return ("over", e.min_tokens, e.n_bytes)
    except Exception as e:
        return ("err", type(e).__name__, str(e))
    return ("ok", array("i", r.ids).tobytes(), r.system_prefix_len, r.spliced, r.head)


def worker_main(fd: int) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the proxy's to handle; it closes us
    os.nice(NICE)  # a large prompt's work yields the CPU to the serving process's small calls
    threading.Thread(target=_watch_parent, args=(os.getppid(),), daemon=True).start()
    sock = socket.socket(fileno=fd)
    init = _recv(sock)
    if init is None:
        return
    path, blob = init
    sys.path.extend(p for p in path if p not in sys.path)  # where the renderer's classes come from
    renderer = pickle.loads(blob)
    _send(sock, ("ready", os.getpid()))
    while True:
        msg = _recv(sock)
        if msg is None:
            return
        _send(sock, _serve(renderer, msg))


if __name__ == "__main__":
    worker_main(int(sys.argv[1]))
