"""The claw environment's mock services — mail, calendar, notes, issue tracker — as one loopback
server per rollout, speaking both a small JSON HTTP API and MCP (streamable HTTP at ``/mcp``).

Owns: :class:`ServiceState` (the in-driver state the verifier inspects; the agent can change it only
through the API), :func:`build_app` and :class:`ServiceServer` (uvicorn on a Unix socket, which the
sandbox exposes as ``http://127.0.0.1:PORT`` inside; the URL is given to the agent as
``$CLAW_API``). ``GET /`` lists the routes, so an agent can discover the API.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from ..serve import AppServer

__all__ = ["ServiceServer", "ServiceState", "build_app"]

ROUTES = {
    "GET /mail/messages": "inbox (query: folder=inbox|sent)",
    "GET /mail/messages/{id}": "one message",
    "POST /mail/send": "{to, subject, body, in_reply_to?}",
    "DELETE /mail/messages/{id}": "delete a message",
    "GET /calendar/events": "events (query: date=YYYY-MM-DD)",
    "POST /calendar/events": "{title, start, end} (ISO 8601, e.g. 2026-12-01T10:00)",
    "PATCH /calendar/events/{id}": "{title?, start?, end?}",
    "DELETE /calendar/events/{id}": "cancel an event",
    "GET /notes": "all notes",
    "POST /notes": "{title, body}",
    "PATCH /notes/{id}": "{title?, body?}",
    "DELETE /notes/{id}": "delete a note",
    "GET /issues": "issues (query: state=open|closed, label=...)",
    "POST /issues": "{title, body?, labels?}",
    "PATCH /issues/{id}": "{state?, assignee?, labels?, title?}",
    "POST /issues/{id}/comments": "{body}",
    "POST /mcp": "the same operations as MCP tools (streamable HTTP)",
}


class ServiceState:
    """All four services' data. Seeded per task; mutated only through the API."""

    def __init__(self, seed: dict[str, Any] | None = None):
        seed = copy.deepcopy(seed or {})
        self.messages: list[dict[str, Any]] = seed.get("messages", [])
        self.events: list[dict[str, Any]] = seed.get("events", [])
        self.notes: list[dict[str, Any]] = seed.get("notes", [])
        self.issues: list[dict[str, Any]] = seed.get("issues", [])
        for coll, prefix in ((self.messages, "m"), (self.events, "e"), (self.notes, "n")):
            for i, item in enumerate(coll, 1):
                item.setdefault("id", f"{prefix}{i}")
        for i, item in enumerate(self.issues, 1):
            item.setdefault("id", i)
            item.setdefault("state", "open")
            item.setdefault("labels", [])
            item.setdefault("assignee", None)
            item.setdefault("comments", [])
        for m in self.messages:
            m.setdefault("folder", "inbox")
            m.setdefault("to", "me@example.com")
        self.log: list[tuple[str, str]] = []  # (operation, target) — what the agent did

    def _next(self, coll: list[dict[str, Any]], prefix: str) -> str:
        return f"{prefix}{len(coll) + 1 + sum(1 for op, _ in self.log if op.endswith('delete'))}"

    # mail
    def mail_list(self, folder: str = "inbox") -> list[dict[str, Any]]:
        return [m for m in self.messages if m["folder"] == folder]

    def mail_send(self, to: str, subject: str, body: str, in_reply_to: str | None = None) -> dict[str, Any]:
        msg = {"id": self._next(self.messages, "m"), "from": "me@example.com", "to": to, "subject": subject,
               "body": body, "folder": "sent", "in_reply_to": in_reply_to}
        self.messages.append(msg)
        self.log.append(("mail_send", msg["id"]))
        return msg

    def mail_delete(self, id: str) -> dict[str, Any]:
        msg = self._find(self.messages, id, "message")
        self.messages.remove(msg)
        self.log.append(("mail_delete", id))
        return {"deleted": id}

    # calendar
    def calendar_list(self, date: str | None = None) -> list[dict[str, Any]]:
        return sorted((e for e in self.events if not date or e["start"].startswith(date)), key=lambda e: e["start"])

    def calendar_create(self, title: str, start: str, end: str) -> dict[str, Any]:
        ev = {"id": self._next(self.events, "e"), "title": title, "start": start, "end": end}
        self.events.append(ev)
        self.log.append(("calendar_create", ev["id"]))
        return ev

    def calendar_update(self, id: str, **changes: Any) -> dict[str, Any]:
        ev = self._find(self.events, id, "event")
        ev.update({k: v for k, v in changes.items() if k in ("title", "start", "end") and v is not None})
        self.log.append(("calendar_update", id))
        return ev

    def calendar_delete(self, id: str) -> dict[str, Any]:
        self.events.remove(self._find(self.events, id, "event"))
        self.log.append(("calendar_delete", id))
        return {"deleted": id}

    # notes
    def notes_list(self) -> list[dict[str, Any]]:
        return list(self.notes)

    def notes_create(self, title: str, body: str = "") -> dict[str, Any]:
        note = {"id": self._next(self.notes, "n"), "title": title, "body": body}
        self.notes.append(note)
        self.log.append(("notes_create", note["id"]))
        return note

    def notes_update(self, id: str, **changes: Any) -> dict[str, Any]:
        note = self._find(self.notes, id, "note")
        note.update({k: v for k, v in changes.items() if k in ("title", "body") and v is not None})
        self.log.append(("notes_update", id))
        return note

    def notes_delete(self, id: str) -> dict[str, Any]:
        self.notes.remove(self._find(self.notes, id, "note"))
        self.log.append(("notes_delete", id))
        return {"deleted": id}

    # issues
    def issues_list(self, state: str | None = None, label: str | None = None) -> list[dict[str, Any]]:
        return [i for i in self.issues if (not state or i["state"] == state) and (not label or label in i["labels"])]

    def issues_create(self, title: str, body: str = "", labels: list[str] | None = None) -> dict[str, Any]:
        issue = {"id": len(self.issues) + 1, "title": title, "body": body, "labels": list(labels or []),
                 "state": "open", "assignee": None, "comments": []}
        self.issues.append(issue)
        self.log.append(("issues_create", str(issue["id"])))
        return issue

    def issues_update(self, id: int, **changes: Any) -> dict[str, Any]:
        issue = self._find(self.issues, int(id), "issue")
        if changes.get("state") not in (None, "open", "closed"):
            raise ValueError("state must be open or closed")
        issue.update({k: v for k, v in changes.items() if k in ("state", "assignee", "labels", "title") and v is not None})
        self.log.append(("issues_update", str(id)))
        return issue

    def issues_comment(self, id: int, body: str) -> dict[str, Any]:
        issue = self._find(self.issues, int(id), "issue")
        issue["comments"].append({"body": body})
        self.log.append(("issues_comment", str(id)))
        return issue

    @staticmethod
    def _find(coll: list[dict[str, Any]], id: Any, what: str) -> dict[str, Any]:
        for item in coll:
            if str(item["id"]) == str(id):
                return item
        raise KeyError(f"no {what} with id {id!r}")


def build_app(state: ServiceState) -> Any:
    """A Starlette app: the JSON API plus the MCP server at ``/mcp``."""
    from mcp.server.mcpserver import MCPServer
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    mcp = MCPServer("claw-services", instructions="Mock mail, calendar, notes and issue tracker.", log_level="WARNING")
    for name in ("mail_list", "mail_send", "mail_delete", "calendar_list", "calendar_create", "calendar_update",
                 "calendar_delete", "notes_list", "notes_create", "notes_update", "notes_delete", "issues_list",
                 "issues_create", "issues_update", "issues_comment"):
        mcp.add_tool(getattr(state, name), name=name, description=(ROUTES.get(name) or name.replace("_", " ")))
    app = mcp.streamable_http_app(stateless_http=True, json_response=True)

    def endpoint(fn: Any) -> Any:
        async def handler(request: Request) -> JSONResponse:
            try:
                body = await request.json() if request.method in ("POST", "PATCH") else {}
                if not isinstance(body, dict):
                    raise ValueError("the body must be a JSON object")
                result = fn(request, body)
            except KeyError as e:
                return JSONResponse({"error": str(e).strip("'\"")}, status_code=404)
            except (ValueError, TypeError) as e:
                return JSONResponse({"error": str(e)}, status_code=400)
            return JSONResponse(result)

        return handler

    def q(r: Request, k: str) -> str | None:
        return r.query_params.get(k)

    def pid(r: Request) -> str:
        return r.path_params["id"]

    s = state
    routes = [
        Route("/", endpoint(lambda r, b: {"routes": ROUTES}), methods=["GET"]),
        Route("/mail/messages", endpoint(lambda r, b: s.mail_list(q(r, "folder") or "inbox")), methods=["GET"]),
        Route("/mail/messages/{id}", endpoint(lambda r, b: s._find(s.messages, pid(r), "message")), methods=["GET"]),
        Route("/mail/messages/{id}", endpoint(lambda r, b: s.mail_delete(pid(r))), methods=["DELETE"]),
        Route("/mail/send", endpoint(lambda r, b: s.mail_send(**b)), methods=["POST"]),
        Route("/calendar/events", endpoint(lambda r, b: s.calendar_list(q(r, "date"))), methods=["GET"]),
        Route("/calendar/events", endpoint(lambda r, b: s.calendar_create(**b)), methods=["POST"]),
        Route("/calendar/events/{id}", endpoint(lambda r, b: s.calendar_update(pid(r), **b)), methods=["PATCH"]),
        Route("/calendar/events/{id}", endpoint(lambda r, b: s.calendar_delete(pid(r))), methods=["DELETE"]),
        Route("/notes", endpoint(lambda r, b: s.notes_list()), methods=["GET"]),
        Route("/notes", endpoint(lambda r, b: s.notes_create(**b)), methods=["POST"]),
        Route("/notes/{id}", endpoint(lambda r, b: s.notes_update(pid(r), **b)), methods=["PATCH"]),
        Route("/notes/{id}", endpoint(lambda r, b: s.notes_delete(pid(r))), methods=["DELETE"]),
        Route("/issues", endpoint(lambda r, b: s.issues_list(q(r, "state"), q(r, "label"))), methods=["GET"]),
        Route("/issues", endpoint(lambda r, b: s.issues_create(**b)), methods=["POST"]),
        Route("/issues/{id}", endpoint(lambda r, b: s.issues_update(pid(r), **b)), methods=["PATCH"]),
        Route("/issues/{id}/comments", endpoint(lambda r, b: s.issues_comment(pid(r), **b)), methods=["POST"]),
    ]
    app.router.routes[:0] = routes
    return app


class ServiceServer(AppServer):
    """Serves :func:`build_app` for ``state`` on a Unix socket (see :class:`AppServer`)."""

    def __init__(self, state: ServiceState, uds: str | Path):
        super().__init__(build_app(state), uds)
        self.state = state
