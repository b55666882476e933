"""The built-in ``browser`` environment: small web apps on loopback (forms, a shop, search and
navigation, settings, a todo list) whose server-side state the verifier checks. Used with the
``browser-use`` harness and Chromium; the instruction names the app's URL inside the sandbox.

Owns: :class:`BrowserEnvironment` and the task table. Reference solutions are ``curl`` commands
(the same HTTP requests the browser's form submissions make), so they replay through the react
harness's shell tool and the tests need no browser.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...core.errors import EnvironmentError_
from ...core.task import Task
from ...environment import Environment, VerifyResult
from ...launchers.base import Sandbox
from ..serve import AppServer, socket_path
from .app import WebState, build_app

__all__ = ["BrowserEnvironment"]


@dataclass
class _Spec:
    id: str
    category: str
    instruction: str  # {url} is the app's base URL inside the sandbox
    solution: list[str]
    checks: dict[str, Any]
    split: str = "train"


def _post(path: str, data: str) -> str:
    return f"curl -sf -o /dev/null -X POST --data '{data}' \"$WEB_URL{path}\""


SPECS = {s.id: s for s in [
    _Spec("web-contact-form", "form", "Open {url}/contact and send a message as Ada Lovelace (ada@example.com) saying hello.",
          [_post("/contact", "name=Ada+Lovelace&email=ada@example.com&message=hello")],
          {"sent": lambda s: any(c["email"] == "ada@example.com" and "ada" in c["name"].lower() for c in s.contacts)}),
    _Spec("web-signup-pro", "form", "Create an account named grace on {url}/signup with the Pro plan (accept the terms).",
          [_post("/signup", "username=grace&plan=pro&agree=yes")],
          {"account": lambda s: any(x.get("username") == "grace" for x in s.signups),
           "pro": lambda s: any(x.get("plan") == "pro" for x in s.signups)}),
    _Spec("web-shop-mugs", "shop", "On {url}/shop buy two Blue Mugs (add them to the cart and check out).",
          [_post("/cart/add", "product=1&qty=2"), _post("/checkout", "")],
          {"ordered": lambda s: any(o["items"] == {1: 2} for o in s.orders)}),
    _Spec("web-shop-cheapest-book", "shop", "On {url}/shop buy exactly one copy of the cheapest book.",
          [_post("/cart/add", "product=4&qty=1"), _post("/checkout", "")],
          {"ordered": lambda s: any(o["items"] == {4: 1} for o in s.orders)}, split="eval"),
    _Spec("web-search-like", "navigation", "Search {url}/search for penguins and like the article about the Antarctic.",
          [_post("/article/1/like", "")],
          {"liked": lambda s: s.likes.get(1) == 1, "only_that": lambda s: sum(s.likes.values()) == 1}),
    _Spec("web-open-article", "navigation", "Find the article about Antarctic penguins on {url} and open it.",
          ["curl -sf -o /dev/null \"$WEB_URL/article/1\""],
          {"opened": lambda s: "/article/1" in s.visits}),
    _Spec("web-profile-name", "navigation", "In the settings of {url} change your profile's display name to Ada and the theme to dark.",
          [_post("/settings/profile", "display_name=Ada&theme=dark")],
          {"name": lambda s: s.profile["display_name"] == "Ada", "theme": lambda s: s.profile["theme"] == "dark"}),
    _Spec("web-todo", "form", "On {url}/todo add the item `water plants` and mark `pay rent` as done.",
          [_post("/todo", "text=water+plants"), _post("/todo", "done=0")],
          {"added": lambda s: any(t["text"] == "water plants" for t in s.todos),
           "done": lambda s: s.todos[0]["done"] is True, "untouched": lambda s: s.todos[1]["done"] is False},
          split="eval"),
    _Spec("web-shop-lamp-and-book", "shop", "On {url}/shop buy one Desk Lamp and one Dune in a single order.",
          [_post("/cart/add", "product=6&qty=1"), _post("/cart/add", "product=3&qty=1"), _post("/checkout", "")],
          {"ordered": lambda s: any(o["items"] == {6: 1, 3: 1} for o in s.orders)}),
]}


class BrowserEnvironment(Environment):
    """Web tasks (forms, shop, search, settings, todo) on loopback apps with server-side verifiers."""

    name = "browser"

    def __init__(self) -> None:
        self._tasks = [Task(id=s.id, instruction=s.instruction, environment="browser", split=s.split,  # type: ignore[arg-type]
                            category=s.category, timeout_s=300.0, required_tools=("browser",), subgoals=tuple(s.checks),
                            metadata={"solution": s.solution}) for s in SPECS.values()]
        self._live: dict[int, tuple[AppServer, WebState, str]] = {}

    def tasks(self, split: str | None = None) -> list[Task]:
        return [t for t in self._tasks if split is None or t.split == split]

    def hidden_paths(self, task: Task) -> list[str]:
        from pathlib import Path

        return [str(Path(__file__).resolve().parent.parent)]

    async def setup(self, task: Task, sandbox: Sandbox) -> None:
        if task.id not in SPECS:
            raise EnvironmentError_(f"browser has no task {task.id!r}")
        state = WebState()
        server = await AppServer(build_app(state), socket_path(sandbox, "web")).start()
        url = await sandbox.expose(server.uds)
        self._live[id(sandbox)] = (server, state, url)

    def _url(self, sandbox: Sandbox) -> str:
        return self._live[id(sandbox)][2]

    def instruction(self, task: Task, sandbox: Sandbox) -> str:
        return task.instruction.replace("{url}", self._url(sandbox))

    def harness_env(self, task: Task, sandbox: Sandbox) -> dict[str, str]:
        url = self._url(sandbox)
        return {"WEB_URL": url, "OPENFORGE_START_URL": url}

    async def verify(self, task: Task, sandbox: Sandbox) -> VerifyResult:
        state = self._live[id(sandbox)][1]
        checks = {}
        for name, fn in SPECS[task.id].checks.items():
            try:
                checks[name] = bool(fn(state))
            except (KeyError, IndexError, StopIteration):
                checks[name] = False
        return VerifyResult.from_checks(checks)

    async def teardown(self, task: Task, sandbox: Sandbox) -> None:
        entry = self._live.pop(id(sandbox), None)
        if entry is not None:
            await entry[0].stop()

    def state_of(self, sandbox: Sandbox) -> WebState | None:
        entry = self._live.get(id(sandbox))
        return entry[1] if entry else None
