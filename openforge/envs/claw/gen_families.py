"""The task families of the generated claw streams: one seeded generator per easy claw skill.

Owns: :data:`FAMILIES` (family name → generator), :class:`Pools` (the names and values one stream may
draw from) and :func:`pools` (a stream's pools: every pool is cut in two disjoint parts, one for the
``train`` stream and one for the ``heldout`` stream, so no held-out name or value can ever reach a
training instance), and :class:`Draft` (what a generator returns: the canonical instance key and the
:class:`ClawSpec` without id/split).

A generator is ``gen(rng, pools) -> Draft``: it draws names, values, contents, the instruction's
phrasing and the order of the seed files from ``rng`` and ``pools`` only, so a stream is a pure
function of its seed. Every instance has a reference solution that passes all its checks and is
scored with partial credit (:mod:`openforge.envs.claw.credit`): its progress checks are the task's
result (each right value, the side effect asked for), and what any output can satisfy (a file
exists, holds an integer or a colon, a tag of that name exists) or what doing nothing satisfies (a
decoy file or the other service records untouched) is a guard, which can only take credit away.
Progress per family: files-create, files-rename, git-tag, sqlite-count, issues-close have a single
progress check (the right content / the right commit / the right count / the issue closed);
files-append the first new line in place, then the whole list; shell-chmod the executable bit and
the saved output; json-extract the host and the port, each a field; notes-create the title, then
the body.
"""

from __future__ import annotations

import json
import random
import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .credit import Kind
from .spec import ClawSpec, exists, file_is, gone, intact, lines_start, matches, same, sh, sql, state
from .tasks_local import GIT
from .tasks_services import API

__all__ = ["FAMILIES", "Draft", "Pools", "pools"]

#: one in HELDOUT_EVERY entries of every pool belongs to the held-out stream, the rest to train
HELDOUT_EVERY = 4

_STEMS = ("memo", "draft", "summary", "plan", "agenda", "budget", "journal", "recipe", "ticket", "invoice",
          "roster", "outline", "digest", "minutes", "checklist", "letter", "story", "poem", "manual", "backlog",
          "release", "status", "review", "sketch", "brief", "ledger", "diary", "index", "survey", "quote",
          "notice", "receipt", "report", "guide", "log", "schedule", "result", "answer", "record", "entry")
_LINES = ("hello world", "good morning", "ship it", "all done", "see you soon", "keep going", "well done",
          "try again", "first draft", "final answer", "on the way", "back at noon", "lights off", "it works",
          "new beginning", "almost there", "thank you", "stay calm", "fresh start", "long live tea",
          "rain today", "tests pass", "open late", "good night", "call me", "big news", "deep breath",
          "no comment", "quiet please", "all clear", "goodbye", "hello again")
_ITEMS = ("apples", "bread", "cheese", "eggs", "flour", "grapes", "honey", "jam", "kale", "lemons", "milk",
          "nuts", "oats", "pears", "rice", "salt", "tea", "yogurt", "beans", "carrots", "dates", "figs",
          "garlic", "herbs", "lime", "mango", "olives", "pasta", "plums", "soup", "tofu", "water")
_PEOPLE = ("ann", "ben", "cy", "di", "ed", "fay", "gus", "hal", "ivy", "jo", "kim", "lee", "max", "ned",
           "ola", "pia", "quin", "ray", "sue", "tom", "uma", "vic", "wes", "xia", "yul", "zoe", "abe", "bea",
           "cal", "dot", "eli", "flo")
_SECTIONS = ("database", "server", "cache", "queue", "auth", "storage", "mail", "search", "metrics", "proxy",
             "backup", "worker")
_FIELDS = ("host", "port", "user", "region", "timeout", "name")
_HOSTS = ("db.internal", "cache.local", "10.0.0.7", "api.example.org", "mq.lan", "store-1", "auth.corp",
          "smtp.lan", "search-2", "metrics.io", "edge.net", "node-9", "alpha.svc", "beta.svc", "gamma.svc",
          "delta.svc")
_REGIONS = ("eu-west", "us-east", "ap-south", "eu-north", "us-west", "sa-east", "af-south", "ca-central")
_TITLES = ("Groceries", "Ideas", "Trip", "Reading", "Gifts", "Chores", "Garden", "Meeting", "Workout", "Movies",
           "Recipes", "Packing", "Errands", "Goals", "Travel", "Music", "Budget", "Birthday", "Repairs", "Hobbies",
           "Projects", "Podcasts", "Cleaning", "Taxes")
_BODIES = ("call bob", "buy stamps", "water plants", "book flights", "fix the sink", "email carol",
           "pay rent", "walk the dog", "read chapter 3", "back up photos", "renew passport", "order paint",
           "clean the garage", "plan the party", "return books", "check tyres")
_ISSUES = ("Crash on start", "Add dark mode", "Typo in docs", "Slow search", "Broken link", "Login fails",
           "Memory leak", "Wrong totals", "Missing icon", "Flaky test", "Bad encoding", "Timeout on save",
           "Old API used", "Button misaligned", "Cache never expires", "Export is empty")
_DECOYS = ("readme.md", "keep.md", "about.md", "license.md", "contact.md", "changes.md", "credits.md",
           "authors.md")


@dataclass(frozen=True)
class Pools:
    """The names and values one stream draws from (disjoint from the other stream's)."""

    stems: tuple[str, ...]
    lines: tuple[str, ...]
    items: tuple[str, ...]
    people: tuple[str, ...]
    hosts: tuple[str, ...]
    regions: tuple[str, ...]
    titles: tuple[str, ...]
    bodies: tuple[str, ...]
    issues: tuple[str, ...]
    versions: tuple[str, ...]
    sections: tuple[str, ...]


def _cut(values: Sequence[str], stream: str) -> tuple[str, ...]:
    held = stream == "heldout"
    return tuple(v for i, v in enumerate(values) if (i % HELDOUT_EVERY == HELDOUT_EVERY - 1) == held)


def pools(stream: str) -> Pools:
    """The pools of ``stream`` (``train`` or ``heldout``): disjoint parts of every pool."""
    if stream not in ("train", "heldout"):
        raise ValueError(f"a generated stream is 'train' or 'heldout', not {stream!r}")
    versions = [f"v{a}.{b}" for a in range(1, 9) for b in range(0, 8)]
    return Pools(*(_cut(p, stream) for p in (_STEMS, _LINES, _ITEMS, _PEOPLE, _HOSTS, _REGIONS, _TITLES, _BODIES,
                                              _ISSUES, versions, _SECTIONS)))


@dataclass(frozen=True)
class Draft:
    """A generated instance before it gets its id and split."""

    key: tuple[str, ...]
    spec: ClawSpec


def _decoy(rng: random.Random, p: Pools) -> tuple[str, str]:
    return rng.choice(_DECOYS), f"{rng.choice(p.lines)}\n"


def _spec(family: str, instruction: str, solution: list[str], checks: dict, **kw: object) -> ClawSpec:
    return ClawSpec("", family, instruction, solution, checks, easy=True, partial=True, **kw)  # type: ignore[arg-type]


def _shuffled(rng: random.Random, files: dict[str, str]) -> dict[str, str]:
    """The seed files in a drawn order (the order the sandbox is filled in, and listings by time)."""
    items = list(files.items())
    rng.shuffle(items)
    return dict(items)


def files_create(rng: random.Random, p: Pools) -> Draft:
    name, line = f"{rng.choice(p.stems)}.txt", rng.choice(p.lines)
    decoy, dtext = _decoy(rng, p)
    instruction = rng.choice((
        "Create a file named {f} containing exactly the line: {t}",
        "Write the single line `{t}` into a new file {f}.",
        "Make a new file {f} whose only line is: {t}"))
    return Draft(("files-create", name, line),
                 _spec("files-create", instruction.format(f=name, t=line), [f"printf '%s\\n' {shlex.quote(line)} > {name}"],
                       {"exists": exists(name), "content": file_is(name, line), "kept": intact(file_is(decoy, dtext))},
                       files={decoy: dtext}))


def files_append(rng: random.Random, p: Pools) -> Draft:
    """Two new lines, in a given order, at the end of a list (the single-line version was always solved)."""
    name = f"{rng.choice(p.stems)}.txt"
    first = rng.sample(p.items, rng.randint(2, 3))
    new1, new2 = rng.sample([i for i in p.items if i not in first], 2)
    decoy, dtext = _decoy(rng, p)
    old = "".join(f"{i}\n" for i in first)
    instruction = rng.choice((
        "Append two new lines to {f}: first `{a}`, then `{b}`. Keep the existing lines.",
        "Add the lines `{a}` and `{b}` (in that order) at the end of {f}; do not change the lines already there.",
        "{f} is a list. Add `{a}` and after it `{b}` as its last two lines."))
    return Draft(("files-append", name, *first, new1, new2),
                 _spec("files-append", instruction.format(a=new1, b=new2, f=name),
                       [f"printf '%s\\n' {new1} {new2} >> {name}"],
                       {"first": lines_start(name, *first, new1), "content": file_is(name, old + new1 + "\n" + new2),
                        "kept": intact(file_is(decoy, dtext))},
                       files=_shuffled(rng, {name: old, decoy: dtext})))


def files_rename(rng: random.Random, p: Pools) -> Draft:
    a, b = rng.sample(p.stems, 2)
    old, new, text = f"{a}_old.txt", f"{b}.txt", rng.choice(p.lines)
    decoy, dtext = _decoy(rng, p)
    instruction = rng.choice(("Rename {o} to {n}.", "Give the file {o} the new name {n}.",
                              "Move {o} to {n} (a rename in the same directory)."))
    return Draft(("files-rename", old, new, text),
                 _spec("files-rename", instruction.format(o=old, n=new), [f"mv {old} {new}"],
                       {"renamed": file_is(new, text), "old_gone": intact(gone(old)), "kept": intact(file_is(decoy, dtext))},
                       files=_shuffled(rng, {old: f"{text}\n", decoy: dtext})))


def shell_chmod(rng: random.Random, p: Pools) -> Draft:
    """Make a script executable, run it and keep what it prints (chmod alone was always solved)."""
    name, word = f"{rng.choice(p.stems)}.sh", rng.choice(p.items)
    out = rng.choice(("output.txt", "out.txt", "printed.txt"))
    body = f"#!/bin/sh\necho {word}\n"
    decoy, dtext = _decoy(rng, p)
    instruction = rng.choice(("Make the script {f} executable, then run it and save what it prints to {o}.",
                              "Give {f} execute permission, run it as ./{f} and write its output to {o}.",
                              "{f} cannot be run yet: make it executable, run it, and put its output in {o}."))
    return Draft(("shell-chmod", name, word, out),
                 _spec("shell-chmod", instruction.format(f=name, o=out), [f"chmod +x {name} && ./{name} > {out}"],
                       {"executable": sh(f"test -x {name}", kind=Kind.EFFECT), "output": file_is(out, word),
                        "kept": intact(file_is(name, body))},
                       files=_shuffled(rng, {name: body, decoy: dtext})))


def git_tag(rng: random.Random, p: Pools) -> Draft:
    """Tag the commit with a given message in a 2–3 commit history (tagging HEAD was always solved)."""
    tag = rng.choice(p.versions)
    msgs = rng.sample(p.lines, rng.randint(2, 3))
    back = rng.randrange(len(msgs))  # commits after the target: 0 is HEAD
    target = msgs[len(msgs) - 1 - back]
    instruction = rng.choice(("In repo/, tag the commit whose message is `{m}` as {t}.",
                              "Create the git tag {t} in repo/ on the commit with the message `{m}`.",
                              "The repository repo/ has a commit `{m}`: mark that commit with the tag {t}."))
    commits = " && ".join(f"echo {shlex.quote(m)} > v && git add v && git commit -qm {shlex.quote(m)}" for m in msgs)
    want = f"cd repo && git rev-parse HEAD~{back}"
    return Draft(("git-tag", tag, *msgs, str(back)),
                 _spec("git-tag", instruction.format(t=tag, m=target), ["cd repo && git log --format='%h %s'", f"cd repo && git tag {tag} HEAD~{back}"],
                       {"tagged": sh(f"cd repo && git rev-parse -q --verify refs/tags/{tag}", kind=Kind.FORMAT),
                        "at_commit": same(f"cd repo && git rev-parse {tag}^{{commit}}", want),
                        "kept": intact(sh("cd repo && git rev-list --count HEAD", str(len(msgs))))},
                       setup=[GIT, f"mkdir repo && cd repo && git init -q && {commits}"]))


def sqlite_count(rng: random.Random, p: Pools) -> Draft:
    people = rng.sample(p.people, rng.randint(4, 7))
    flags = [rng.randint(0, 1) for _ in people]
    while len(set(flags)) < 2:  # both counts ≥ 1: an answer of 0 is what a constant guess writes
        flags = [rng.randint(0, 1) for _ in people]
    want = rng.randint(0, 1)
    out = rng.choice(("answer.txt", "count.txt", "result.txt"))
    rows = ",".join(f"('{n}',{f})" for n, f in zip(people, flags))
    setup = f"sqlite3 app.db \"CREATE TABLE users(id INTEGER PRIMARY KEY, name TEXT, active INTEGER); " \
            f"INSERT INTO users(name,active) VALUES {rows};\""
    what = "active users (active = 1)" if want else "inactive users (active = 0)"
    instruction = rng.choice(("Write the number of {w} in app.db's users table to {o}.",
                              "Count the {w} in the users table of app.db and write just the number to {o}.",
                              "How many {w} does app.db's users table have? Write the number to {o}."))
    return Draft(("sqlite-count", *people, *map(str, flags), str(want), out),
                 _spec("sqlite-count", instruction.format(w=what, o=out),
                       [f"sqlite3 app.db 'SELECT COUNT(*) FROM users WHERE active={want}' > {out}"],
                       {"written": matches(out, "[0-9]+"), "count": file_is(out, str(flags.count(want))),
                        "kept": intact(sql("app.db", "SELECT COUNT(*) FROM users", [(len(people),)]))},
                       setup=[setup]))


def _host(text: str) -> str:
    return text.partition(":")[0]


def _port(text: str) -> str:
    return text.partition(":")[2]


def json_extract(rng: random.Random, p: Pools) -> Draft:
    """Two values of one section, joined as host:port (one value was always solved); the other section
    has a host and a port too."""
    sections = rng.sample(p.sections, 2)
    values = {"host": rng.choice(p.hosts), "port": rng.randint(1024, 9999), "region": rng.choice(p.regions),
              "user": rng.choice(p.people)}
    cfg = {"name": rng.choice(p.stems), sections[0]: values,
           sections[1]: {"host": rng.choice(p.hosts), "port": rng.randint(1024, 9999)}}
    if rng.random() < 0.5:
        cfg = {"name": cfg["name"], sections[1]: cfg[sections[1]], sections[0]: values}
    out = rng.choice(("address.txt", "endpoint.txt", "target.txt"))
    f"{values['host']}:{values['port']}"
    instruction = rng.choice(("Write the {s} host and port from config.json to {o}, as host:port on one line.",
                              "Read {s}.host and {s}.port in config.json and write them to {o} as host:port.",
                              "config.json has a {s} section. Put its address, written host:port, in {o}."))
    solution = (f"python3 -c \"import json;c=json.load(open('config.json'))['{sections[0]}'];"
                f"print(c['host'], c['port'], sep=':')\" > {out}")
    text = json.dumps(cfg) + "\n"
    return Draft(("json-extract", text, sections[0], out),
                 _spec("json-extract", instruction.format(s=sections[0], o=out), ["cat config.json", solution],
                       {"written": matches(out, r"[^:\s]+:[^:\s]+"),
                        "host": file_is(out, values["host"], part=_host),
                        "port": file_is(out, str(values["port"]), part=_port),
                        "kept": intact(file_is("config.json", text))},
                       files={"config.json": text}))


def notes_create(rng: random.Random, p: Pools) -> Draft:
    others = rng.sample(p.titles, 3)
    title = rng.choice([t for t in p.titles if t not in others])
    body = rng.choice(p.bodies)
    seed = {"notes": [{"title": t, "body": b} for t, b in zip(others, rng.sample(p.bodies, 3))]}
    instruction = rng.choice(("Create a note titled {t} with the body `{b}`.",
                              "Add a new note: title {t}, body `{b}`.",
                              "Make a note named {t} that says `{b}`."))
    return Draft(("notes-create", title, body, *others),
                 _spec("notes-create", API + instruction.format(t=title, b=body),
                       [f"curl -sf -X POST \"$CLAW_API/notes\" -H 'content-type: application/json' "
                        f"-d {shlex.quote(json.dumps({'title': title, 'body': body}))}"],
                       {"titled": state(lambda s: any(n["title"] == title for n in s.notes)),
                        "body": state(lambda s: any(n["title"] == title and body in n["body"] for n in s.notes)),
                        "kept": intact(state(lambda s: [n["title"] for n in s.notes[:3]] == others))},
                       services=seed, tools=("shell", "http")))


def issues_close(rng: random.Random, p: Pools) -> Draft:
    titles = rng.sample(p.issues, rng.randint(3, 4))
    target = rng.randint(1, len(titles))
    seed = {"issues": [{"title": t, "labels": ["bug"]} for t in titles]}
    instruction = rng.choice(("Close issue number {n}.", "Issue {n} is fixed: close it.",
                              "Set the state of issue #{n} to closed."))
    n = len(titles)
    return Draft(("issues-close", *titles, str(target)),
                 _spec("issues-close", API + instruction.format(n=target),
                       [f"curl -sf -X PATCH \"$CLAW_API/issues/{target}\" -H 'content-type: application/json' "
                        "-d '{\"state\": \"closed\"}'"],
                       {"closed": state(lambda s: s._find(s.issues, target, "issue")["state"] == "closed"),
                        "kept": intact(state(lambda s: len(s.issues) == n and len(s.issues_list("open")) == n - 1))},
                       services=seed, tools=("shell", "http")))


FAMILIES: dict[str, Callable[[random.Random, Pools], Draft]] = {
    "files-create": files_create, "files-append": files_append, "files-rename": files_rename,
    "shell-chmod": shell_chmod, "git-tag": git_tag, "sqlite-count": sqlite_count, "json-extract": json_extract,
    "notes-create": notes_create, "issues-close": issues_close,
}
