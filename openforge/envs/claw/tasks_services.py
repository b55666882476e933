"""Claw tasks against the mock services (mail, calendar, notes, issue tracker) at ``$CLAW_API``."""

from __future__ import annotations

from .spec import ClawSpec, curl, file_is, intact, state

PY_GET = "python3 -c \"import json,sys;d=json.load(sys.stdin);{}\""

MAIL = {"messages": [
    {"from": "alice@example.com", "subject": "Lunch", "body": "Lunch on Friday at noon?"},
    {"from": "it@corp.example", "subject": "Your verification code", "body": "Your code is 482913. It expires soon."},
    {"from": "promo@spam.example", "subject": "WIN a free cruise", "body": "Click here"},
    {"from": "promo@spam.example", "subject": "You WIN again", "body": "Click"},
    {"from": "boss@example.com", "subject": "Quarterly report", "body": "Please send the report to bob."},
]}
CAL = {"events": [
    {"title": "Standup", "start": "2026-12-01T09:00", "end": "2026-12-01T09:15"},
    {"title": "Dentist", "start": "2026-12-02T14:00", "end": "2026-12-02T15:00"},
    {"title": "Standup", "start": "2026-12-02T09:00", "end": "2026-12-02T09:15"},
    {"title": "Review", "start": "2026-12-01T08:30", "end": "2026-12-01T08:50"},
]}
NOTES = {"notes": [
    {"title": "Plan", "body": "Ship v2 in December"},
    {"title": "Home", "body": "The wifi password is tulip-42."},
    {"title": "Books", "body": "Dune, Emma"},
]}
ISSUES = {"issues": [
    {"title": "Crash on start", "body": "segfault", "labels": ["bug"]},
    {"title": "Add dark mode", "labels": ["feature"]},
    {"title": "Typo in docs", "labels": ["bug"]},
    {"title": "Old bug", "labels": ["bug"], "state": "closed"},
]}
API = "The services are at $CLAW_API (GET $CLAW_API/ lists the HTTP routes; MCP at $CLAW_API/mcp). "


def _sent(s, to: str) -> list:
    return [m for m in s.messages if m["folder"] == "sent" and m["to"] == to]


TASKS: list[ClawSpec] = [
    # -- mail ----------------------------------------------------------------------------------
    ClawSpec("mail-send", "mail", API + "Send an email to bob@example.com with subject Report and a body that mentions the word attached.",
             [curl("POST", "/mail/send", {"to": "bob@example.com", "subject": "Report", "body": "Report attached."})],
             {"sent": state(lambda s: any(m["subject"] == "Report" and "attached" in m["body"] for m in _sent(s, "bob@example.com")))},
             services=MAIL, easy=True, tools=("shell", "http")),
    ClawSpec("mail-read-code", "mail", API + "Find the verification code in the mail from it@corp.example and write it to code.txt.",
             [curl("GET", "/mail/messages") + " | " + PY_GET.format(
                 "import re;print(re.search(r'\\\\d{6}',[m for m in d if m['from']=='it@corp.example'][0]['body']).group())")
              + " > code.txt"],
             {"code": file_is("code.txt", "482913")}, services=MAIL, tools=("shell", "http")),
    ClawSpec("mail-reply", "mail", API + "Reply to Alice's Lunch mail (to alice@example.com, subject `Re: Lunch`, in_reply_to its id) accepting.",
             [curl("POST", "/mail/send", {"to": "alice@example.com", "subject": "Re: Lunch", "body": "Yes, see you then!",
                                          "in_reply_to": "m1"})],
             {"replied": state(lambda s: any(m["subject"] == "Re: Lunch" for m in _sent(s, "alice@example.com"))),
              "threaded": state(lambda s: any(m.get("in_reply_to") == "m1" for m in _sent(s, "alice@example.com")))},
             services=MAIL, split="eval", tools=("shell", "http")),
    ClawSpec("mail-delete-spam", "mail", API + "Delete every inbox message whose subject contains WIN; keep all others.",
             [curl("DELETE", "/mail/messages/m3"), curl("DELETE", "/mail/messages/m4")],
             {"deleted": state(lambda s: not any("WIN" in m["subject"] for m in s.messages)),
              "kept": intact(state(lambda s: len(s.mail_list()) == 3))}, services=MAIL, tools=("shell", "http")),
    ClawSpec("mail-forward-request", "mail", API + "Your boss asked for the quarterly report to go to bob. Email bob@example.com "
             "with subject `Quarterly report` and a body that says it is attached.",
             [curl("POST", "/mail/send", {"to": "bob@example.com", "subject": "Quarterly report", "body": "The report is attached."})],
             {"sent": state(lambda s: any(m["subject"] == "Quarterly report" for m in _sent(s, "bob@example.com")))},
             services=MAIL, tools=("shell", "http")),
    # -- calendar ------------------------------------------------------------------------------
    ClawSpec("cal-create", "calendar", API + "Create a calendar event `Team sync` on 2026-12-01 from 10:00 to 10:30.",
             [curl("POST", "/calendar/events", {"title": "Team sync", "start": "2026-12-01T10:00", "end": "2026-12-01T10:30"})],
             {"created": state(lambda s: any(e["title"] == "Team sync" and e["start"].startswith("2026-12-01T10:00")
                                             and e["end"].startswith("2026-12-01T10:30") for e in s.events))},
             services=CAL, easy=True, tools=("shell", "http")),
    ClawSpec("cal-move", "calendar", API + "Move the Dentist appointment to 2026-12-03, same time of day.",
             [curl("PATCH", "/calendar/events/e2", {"start": "2026-12-03T14:00", "end": "2026-12-03T15:00"})],
             {"moved": state(lambda s: [e for e in s.events if e["title"] == "Dentist"][0]["start"].startswith("2026-12-03T14:00")),  # noqa: RUF015
              "one": intact(state(lambda s: sum(e["title"] == "Dentist" for e in s.events) == 1))},
             services=CAL, tools=("shell", "http")),
    ClawSpec("cal-cancel", "calendar", API + "Cancel the Standup on 2026-12-02 (only that one).",
             [curl("DELETE", "/calendar/events/e3")],
             {"cancelled": state(lambda s: not s.calendar_list("2026-12-02T09")),
              "kept": intact(state(lambda s: len(s.events) == 3))}, services=CAL, split="eval", tools=("shell", "http")),
    ClawSpec("cal-first-event", "calendar", API + "Write the title of the earliest event on 2026-12-01 to answer.txt.",
             [curl("GET", "/calendar/events?date=2026-12-01") + " | " + PY_GET.format("print(sorted(d,key=lambda e:e['start'])[0]['title'])")
              + " > answer.txt"],
             {"answer": file_is("answer.txt", "Review")}, services=CAL, tools=("shell", "http")),
    # -- notes ---------------------------------------------------------------------------------
    ClawSpec("notes-create", "notes", API + "Create a note titled Groceries with the body `milk, eggs`.",
             [curl("POST", "/notes", {"title": "Groceries", "body": "milk, eggs"})],
             {"note": state(lambda s: any(n["title"] == "Groceries" and "milk" in n["body"] and "eggs" in n["body"] for n in s.notes))},
             services=NOTES, easy=True, tools=("shell", "http")),
    ClawSpec("notes-edit", "notes", API + "Append ` - reviewed` to the body of the note titled Plan.",
             [curl("PATCH", "/notes/n1", {"body": "Ship v2 in December - reviewed"})],
             {"edited": state(lambda s: s._find(s.notes, "n1", "note")["body"] == "Ship v2 in December - reviewed")},
             services=NOTES, tools=("shell", "http")),
    ClawSpec("notes-search", "notes", API + "One of the notes mentions the wifi password. Write the password to answer.txt.",
             [curl("GET", "/notes") + " | " + PY_GET.format(
                 "import re;print(re.search(r'password is ([\\\\w-]+)',' '.join(n['body'] for n in d)).group(1))") + " > answer.txt"],
             {"answer": file_is("answer.txt", "tulip-42")}, services=NOTES, split="eval", tools=("shell", "http")),
    ClawSpec("notes-delete", "notes", API + "Delete the note titled Books.", [curl("DELETE", "/notes/n3")],
             {"deleted": state(lambda s: not any(n["title"] == "Books" for n in s.notes)),
              "kept": intact(state(lambda s: len(s.notes) == 2))}, services=NOTES, tools=("shell", "http")),
    # -- issues --------------------------------------------------------------------------------
    ClawSpec("issues-create", "issues", API + "File an issue titled `Login button broken` with the label bug.",
             [curl("POST", "/issues", {"title": "Login button broken", "labels": ["bug"]})],
             {"filed": state(lambda s: any(i["title"] == "Login button broken" and "bug" in i["labels"] for i in s.issues))},
             services=ISSUES, tools=("shell", "http")),
    ClawSpec("issues-close", "issues", API + "Close issue number 2.", [curl("PATCH", "/issues/2", {"state": "closed"})],
             {"closed": state(lambda s: s._find(s.issues, 2, "issue")["state"] == "closed"),
              "others": intact(state(lambda s: len(s.issues_list("open")) == 2))}, services=ISSUES, easy=True, tools=("shell", "http")),
    ClawSpec("issues-assign-bugs", "issues", API + "Assign every open issue labelled bug to dana.",
             [curl("PATCH", "/issues/1", {"assignee": "dana"}), curl("PATCH", "/issues/3", {"assignee": "dana"})],
             # issues 1 and 3 are the open bugs; closing them instead leaves no open bug to assign
             {"assigned": state(lambda s: all(s._find(s.issues, n, "issue")["assignee"] == "dana" for n in (1, 3))),
              "only_open_bugs": intact(state(lambda s: all(i["assignee"] is None for i in s.issues
                                                           if i["state"] == "closed" or "bug" not in i["labels"]))),
              "states": intact(state(lambda s: [i["state"] for i in s.issues] == ["open", "open", "open", "closed"]))},
             services=ISSUES, split="eval", tools=("shell", "http")),
    ClawSpec("issues-comment", "issues", API + "Comment `fixed in v2` on the issue titled `Crash on start`.",
             [curl("POST", "/issues/1/comments", {"body": "fixed in v2"})],
             {"commented": state(lambda s: any(c["body"] == "fixed in v2" for c in s._find(s.issues, 1, "issue")["comments"]))},
             services=ISSUES, tools=("shell", "http")),
]
