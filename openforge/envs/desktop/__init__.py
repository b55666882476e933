"""The built-in ``desktop`` environment: an Xvfb display with a simple X application (a text editor,
a Tk form, a counter) whose saved state the verifier checks. Used with the ``computer-use`` harness.

Owns: :class:`DesktopEnvironment`. Xvfb and the app run on the driver's side (killed with the
driver: parent-death signal), their state file is outside the sandbox; the sandbox reaches the
display only through the X socket forwarded to ``127.0.0.1:6000+D`` (``DISPLAY=127.0.0.1:D``).
Reference solutions are ``xdotool`` keyboard commands, replayable through a shell tool.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...core.errors import EnvironmentError_
from ...core.task import Task
from ...environment import Environment, VerifyResult
from ...launchers.base import Sandbox

__all__ = ["DesktopEnvironment"]
APPS = str(Path(__file__).with_name("apps.py"))


def _focus(title: str) -> str:
    return f"xdotool search --sync --name '{title}' windowfocus --sync"


def _type(text: str) -> str:
    return f"xdotool type --delay 15 '{text}'"


@dataclass
class _Spec:
    id: str
    app: str
    instruction: str
    solution: list[str]
    checks: dict[str, Any]
    init: str = ""
    split: str = "train"
    easy: bool = False
    extra: dict[str, Any] = field(default_factory=dict)


ED, FORM, CNT = "openforge editor", "openforge form", "openforge counter"
SPECS = {s.id: s for s in [
    _Spec("editor-hello", "editor", "In the text editor on the screen, type `hello desktop` and save (Ctrl+S).",
          [_focus(ED), _type("hello desktop"), "xdotool key ctrl+s"],
          {"saved": lambda s: s.get("saves", 0) >= 1, "text": lambda s: s["text"].strip() == "hello desktop"}, easy=True),
    _Spec("editor-fix-typo", "editor", "The editor shows `teh cat sat`. Correct it to `the cat sat` and save.",
          [_focus(ED), "xdotool key ctrl+slash Delete", _type("the cat sat"), "xdotool key ctrl+s"],
          {"text": lambda s: s["text"].strip() == "the cat sat"}, init="teh cat sat"),
    _Spec("editor-two-lines", "editor", "Write two lines in the editor, `first` and then `second`, and save.",
          [_focus(ED), _type("first"), "xdotool key Return", _type("second"), "xdotool key ctrl+s"],
          {"text": lambda s: s["text"].strip().splitlines() == ["first", "second"]}, split="eval"),
    _Spec("form-subscribe", "form", "Fill in the form: name Ada, email ada@example.com, tick Subscribe, and submit.",
          [_focus(FORM), _type("Ada"), "xdotool key Tab", _type("ada@example.com"), "xdotool key Tab space",
           "xdotool key Return"],
          {"name": lambda s: s["name"] == "Ada", "email": lambda s: s["email"] == "ada@example.com",
           "subscribed": lambda s: s["subscribe"] is True}),
    _Spec("form-large", "form", "Submit the form with the name Bo and the size Large (not subscribed).",
          [_focus(FORM), _type("Bo"), "xdotool key Tab Tab Tab Tab space", "xdotool key Return"],
          {"name": lambda s: s["name"] == "Bo", "size": lambda s: s["size"] == "large",
           "not_subscribed": lambda s: s["subscribe"] is False}, split="eval"),
    _Spec("counter-three", "counter", "Use the counter app to count to exactly 3, then press Done.",
          [_focus(CNT), "xdotool key plus plus plus", "xdotool key Return"],
          {"count": lambda s: s["count"] == 3, "done": lambda s: s["done"] is True}, easy=True),
]}


def _die_with_parent() -> None:
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL("libc.so.6").prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def _settled_count(ack: Path) -> int:
    try:
        return int(json.loads(ack.read_text())["n"])
    except (OSError, ValueError, KeyError, TypeError):
        return 0


class _Desk:
    def __init__(self, tmp: Path, xvfb: subprocess.Popen, app: subprocess.Popen | None, display: int):
        self.tmp, self.xvfb, self.app, self.display = tmp, xvfb, app, display
        self.sandbox_display = ""

    def settle(self, timeout_s: float = 10.0) -> None:
        """Wait until the app has handled every input event sent to the display so far (the agent's last
        key press may still be queued when its command returns); apps.py answers SIGUSR1 in
        ``state.json.settled``. A dead or unanswering app is left to the state check."""
        if self.app is None or self.app.poll() is not None:
            return
        ack = self.tmp / "state.json.settled"
        before = _settled_count(ack)
        os.kill(self.app.pid, signal.SIGUSR1)
        deadline = time.monotonic() + timeout_s
        while _settled_count(ack) <= before and self.app.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)

    def stop(self) -> None:
        for p in (self.app, self.xvfb):
            if p is not None and p.poll() is None:
                with contextlib.suppress(OSError):
                    os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        shutil.rmtree(self.tmp, ignore_errors=True)


class DesktopEnvironment(Environment):
    """X desktop tasks (editor, form, counter) on Xvfb with state verifiers."""

    name = "desktop"

    def __init__(self, *, width: int = 1024, height: int = 768):
        self.width, self.height = width, height
        self._tasks = [Task(id=s.id, instruction=s.instruction, environment="desktop", split=s.split,  # type: ignore[arg-type]
                            category=s.app, timeout_s=300.0, required_tools=("computer",), subgoals=tuple(s.checks),
                            metadata={"solution": s.solution, "easy": s.easy}) for s in SPECS.values()]
        self._live: dict[int, _Desk] = {}

    def tasks(self, split: str | None = None) -> list[Task]:
        if split == "easy":
            return [t for t in self._tasks if t.metadata["easy"]]
        return [t for t in self._tasks if split is None or t.split == split]

    def hidden_paths(self, task: Task) -> list[str]:
        return [str(Path(__file__).resolve().parent.parent)]

    async def setup(self, task: Task, sandbox: Sandbox) -> None:
        spec = SPECS.get(task.id)
        if spec is None:
            raise EnvironmentError_(f"desktop has no task {task.id!r}")
        missing = [b for b in ("Xvfb", "xdotool") if not shutil.which(b)]
        if missing:
            raise EnvironmentError_(f"the desktop environment needs {', '.join(missing)} (apt-get install xvfb xdotool)")
        desk = await asyncio.to_thread(self._start, spec)
        self._live[id(sandbox)] = desk
        url = await sandbox.expose(f"/tmp/.X11-unix/X{desk.display}")
        port = int(url.rsplit(":", 1)[1])
        desk.sandbox_display = f"127.0.0.1:{port - 6000}"

    def _start(self, spec: _Spec) -> _Desk:
        tmp = Path(tempfile.mkdtemp(prefix="openforge-desktop-"))
        r, w = os.pipe()
        xvfb = subprocess.Popen(["Xvfb", "-displayfd", str(w), "-screen", "0", f"{self.width}x{self.height}x24",
                                 "-nolisten", "tcp", "-noreset"], pass_fds=(w,), stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, start_new_session=True, preexec_fn=_die_with_parent)
        os.close(w)
        with os.fdopen(r) as f:
            line = f.readline().strip()
        if not line.isdigit():
            xvfb.kill()
            shutil.rmtree(tmp, ignore_errors=True)
            raise EnvironmentError_("Xvfb did not start")
        display = int(line)
        env = {"PATH": os.environ.get("PATH", ""), "DISPLAY": f":{display}", "HOME": str(tmp), "LANG": "C.UTF-8"}
        app = subprocess.Popen([sys.executable, APPS, spec.app, "--state", str(tmp / "state.json"), "--text", spec.init],
                               env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True,
                               preexec_fn=_die_with_parent)
        desk = _Desk(tmp, xvfb, app, display)
        title = {"editor": ED, "form": FORM, "counter": CNT}[spec.app]
        ok = subprocess.run(["xdotool", "search", "--sync", "--name", title], env=env, capture_output=True, timeout=30)
        if ok.returncode != 0 or app.poll() is not None:
            err = app.stderr.read().decode(errors="replace")[-500:] if app.poll() is not None and app.stderr else ""
            desk.stop()
            raise EnvironmentError_(f"the {spec.app} app did not appear on the display: {err}")
        return desk

    def harness_env(self, task: Task, sandbox: Sandbox) -> dict[str, str]:
        return {"DISPLAY": self._live[id(sandbox)].sandbox_display}

    def state(self, sandbox: Sandbox) -> dict[str, Any] | None:
        f = self._live[id(sandbox)].tmp / "state.json"
        return json.loads(f.read_text()) if f.exists() else None

    async def verify(self, task: Task, sandbox: Sandbox) -> VerifyResult:
        await asyncio.to_thread(self._live[id(sandbox)].settle)
        st = self.state(sandbox)
        checks = {}
        for name, fn in SPECS[task.id].checks.items():
            try:
                checks[name] = st is not None and bool(fn(st))
            except (KeyError, TypeError):
                checks[name] = False
        return VerifyResult.from_checks(checks, detail="" if st is not None else "the app's state was never saved")

    async def teardown(self, task: Task, sandbox: Sandbox) -> None:
        desk = self._live.pop(id(sandbox), None)
        if desk is not None:
            await asyncio.to_thread(desk.stop)
