"""Held-out claw tasks (``split="heldout"``): new variants of the skills of the ``easy`` train tasks.

The CPU default trains (SFT warm-start and GRPO) on train tasks only; the ``eval`` split is far beyond
it (notes/measured-2026-12.md: 0/48 before and after). These tasks ask for the same skills as the easy
train tasks (create, append, rename a file; chmod; git tag; count rows; read a JSON key; create a note;
close an issue) with other names, contents and answers, so a before/after on them can show whether
what was learned carries to tasks the run never saw. Disjoint from ``train`` and ``eval`` by
construction (own ids, own split).
"""

from __future__ import annotations

from .credit import Kind
from .spec import ClawSpec, file_is, gone, intact, same, sh, state
from .tasks_local import GIT, SQL_SETUP
from .tasks_services import API, ISSUES, NOTES

TASKS: list[ClawSpec] = [
    ClawSpec("files-create-bye", "files", "Create a file named bye.txt containing exactly the line: goodbye",
             ["printf 'goodbye\\n' > bye.txt"], {"bye": file_is("bye.txt", "goodbye")}, split="heldout"),
    ClawSpec("files-append-item", "files", "Append a new last line `eggs` to list.txt, keeping the existing lines.",
             ["echo eggs >> list.txt"], {"appended": file_is("list.txt", "bread\ncheese\neggs")},
             files={"list.txt": "bread\ncheese\n"}, split="heldout"),
    ClawSpec("files-rename-report", "files", "Rename report_old.txt to report.txt.", ["mv report_old.txt report.txt"],
             {"renamed": file_is("report.txt", "q3 numbers"), "old_gone": intact(gone("report_old.txt"))},
             files={"report_old.txt": "q3 numbers\n"}, split="heldout"),
    ClawSpec("shell-make-deploy-executable", "shell", "Make the script deploy.sh executable.", ["chmod +x deploy.sh"],
             {"executable": sh("test -x deploy.sh", kind=Kind.EFFECT)}, files={"deploy.sh": "#!/bin/sh\necho deployed\n"},
             split="heldout"),
    ClawSpec("git-tag-release", "git", "In repo/, tag the current commit as v2.0.", ["cd repo && git tag v2.0"],
             {"tag": same("cd repo && git rev-parse v2.0^{commit}", "cd repo && git rev-parse HEAD")},
             setup=[GIT, "mkdir repo && cd repo && git init -q && echo 2 > v && git add v && git commit -qm two"],
             split="heldout"),
    ClawSpec("sqlite-count-inactive", "sqlite",
             "Write the number of inactive users (active = 0) in app.db's users table to answer.txt.",
             ["sqlite3 app.db 'SELECT COUNT(*) FROM users WHERE active=0' > answer.txt"],
             {"count": file_is("answer.txt", "2")}, setup=[SQL_SETUP], split="heldout"),
    ClawSpec("json-extract-host", "data", "Write the value of database.host from config.json to host.txt.",
             ["python3 -c \"import json;print(json.load(open('config.json'))['database']['host'])\" > host.txt"],
             {"host": file_is("host.txt", "db.internal")},
             files={"config.json": '{"name": "api", "database": {"host": "db.internal", "port": 5432}}\n'},
             split="heldout"),
    ClawSpec("notes-create-todo", "notes", API + "Create a note titled Todo with the body `call bob`.",
             ["curl -sf -X POST \"$CLAW_API/notes\" -H 'content-type: application/json' "
              "-d '{\"title\": \"Todo\", \"body\": \"call bob\"}'"],
             {"note": state(lambda s: any(n["title"] == "Todo" and "call bob" in n["body"] for n in s.notes))},
             services=NOTES, split="heldout", tools=("shell", "http")),
    ClawSpec("issues-close-typo", "issues", API + "Close issue number 3.",
             ["curl -sf -X PATCH \"$CLAW_API/issues/3\" -H 'content-type: application/json' -d '{\"state\": \"closed\"}'"],
             {"closed": state(lambda s: s._find(s.issues, 3, "issue")["state"] == "closed"),
              "others": intact(state(lambda s: len(s.issues_list("open")) == 2))},
             services=ISSUES, split="heldout", tools=("shell", "http")),
]
