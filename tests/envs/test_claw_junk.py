"""Junk earns nothing: every claw task the environment lists (hand-written train / eval / heldout, and
every generated instance of both streams) scores exactly 0 for a set of junk agents run in real
sandboxes through the real verifier: doing nothing, wiping the workdir, empty files at every path
the instruction names, a plausible-looking but wrong value there (``:``, ``0``, ``{}``, a random
integer), the input copied to the output, a tag of the asked name on HEAD, and placeholder or
wholesale service changes. Partial credit (:mod:`openforge.envs.claw.credit`) pays only for progress,
so a format probe passing (a file exists, holds an integer or a colon, the tag exists) is worth 0."""

from __future__ import annotations

import asyncio
import hashlib
import json
import random
import re
import shlex
from collections.abc import Callable

import pytest

from openforge.core.task import Task
from openforge.envs.claw import ClawEnvironment
from openforge.launchers.base import SandboxSpec
from openforge.launchers.local import LocalLauncher

HAND = ClawEnvironment()
GEN = ClawEnvironment(generated=True)  # the default streams: every family, train and held-out

#: a file path as an instruction names it (hello.txt, src/a.py, app.db)
_PATH = re.compile(r"(?<![\w/.$-])((?:[\w-]+/)*[\w-]+\.(?:txt|csv|json|sh|db|sha256|md|ini|log|bin|py|c))\b")
_TAG = re.compile(r"\bv\d+\.\d+\b")


def _paths(task: Task) -> list[str]:
    return list(dict.fromkeys(_PATH.findall(task.instruction)))


def _write_missing(task: Task, text: str) -> list[str]:
    """``text`` into every path the instruction names that is not there yet (the outputs)."""
    return [f"[ -e {q} ] || {{ mkdir -p \"$(dirname {q})\" && printf '%s\\n' {shlex.quote(text)} > {q}; }}"
            for q in map(shlex.quote, _paths(task))]


def _touch(task: Task) -> list[str]:
    return [f"mkdir -p \"$(dirname {q})\" && touch {q}" for q in map(shlex.quote, _paths(task))]


def _copy(task: Task) -> list[str]:
    """The first input the instruction names (else the first file there) copied to every output."""
    names = " ".join(map(shlex.quote, _paths(task)))
    pick = (f"src=; for p in {names}; do [ -f \"$p\" ] && {{ src=$p; break; }}; done; "
            "[ -n \"$src\" ] || src=$(find . -maxdepth 1 -type f | sort | head -1)")
    return [f"{pick}; [ -n \"$src\" ] && for p in {names}; do [ -e \"$p\" ] || cp \"$src\" \"$p\"; done; true"]


def _random_int(task: Task) -> list[str]:
    return _write_missing(task, str(random.Random(task.id).randrange(10_000, 1_000_000)))


def _tag_head(task: Task) -> list[str]:
    return [f"[ -d repo ] && cd repo && git tag -f {t} HEAD" for t in dict.fromkeys(_TAG.findall(task.instruction))]


def _placeholders(task: Task) -> list[str]:
    """A record of the right shape in every service, about nothing asked for."""
    if not task.metadata.get("services"):
        return []
    post = "curl -s -X POST \"$CLAW_API{}\" -H 'content-type: application/json' -d {}"
    return [post.format(path, shlex.quote(json.dumps(body))) for path, body in [
        ("/notes", {"title": "note", "body": ""}), ("/issues", {"title": "issue", "labels": ["bug"]}),
        ("/mail/send", {"to": "me@example.com", "subject": "", "body": ""}),
        ("/calendar/events", {"title": "event", "start": "2026-12-01T00:00", "end": "2026-12-01T00:01"})]]


def _wholesale(task: Task) -> list[str]:
    """Everything of every service at once: every issue closed, every note, mail and event deleted."""
    if not task.metadata.get("services"):
        return []
    each = ("for id in $(curl -s \"$CLAW_API{list}\" | python3 -c 'import json,sys;print(*[x[\"id\"] for x in json.load(sys.stdin)])'); "
            "do curl -s -X {verb} \"$CLAW_API{item}/$id\" {body} >/dev/null; done")
    close = "-H 'content-type: application/json' -d '{\"state\": \"closed\"}'"
    return [each.format(list="/issues", verb="PATCH", item="/issues", body=close),
            each.format(list="/notes", verb="DELETE", item="/notes", body=""),
            each.format(list="/mail/messages", verb="DELETE", item="/mail/messages", body=""),
            each.format(list="/calendar/events", verb="DELETE", item="/calendar/events", body="")]


JUNK: dict[str, Callable[[Task], list[str]]] = {
    "nothing": lambda t: [],
    "wipe": lambda t: ["rm -rf ./* ./.[!.]*"],
    "empty-files": _touch,
    "colon": lambda t: _write_missing(t, ":"),
    "zero": lambda t: _write_missing(t, "0"),
    "braces": lambda t: _write_missing(t, "{}"),
    "random-int": _random_int,
    "copy-input": _copy,
    "tag-on-head": _tag_head,
    "placeholders": _placeholders,
    "wholesale": _wholesale,
}


def _tags_head(env: ClawEnvironment, task: Task) -> bool:
    """Whether the reference solution itself is a tag on HEAD (then that 'junk' is the answer)."""
    return bool(re.search(r"git tag \S+( HEAD(~0)?)?$", env.reference_solution(task)[-1]))


@pytest.fixture(scope="module")
def launcher(tmp_path_factory):
    launcher = LocalLauncher(base_dir=tmp_path_factory.mktemp("sbx"))
    yield launcher
    asyncio.run(launcher.aclose())


async def _run(launcher, env: ClawEnvironment, task: Task, agent: str, commands: list[str]):
    rid = "junk-" + hashlib.sha256(f"{agent}/{task.id}".encode()).hexdigest()[:10]  # short: AF_UNIX paths ≤ 108
    spec = SandboxSpec(rollout_id=rid, task=task, proxy_url="http://127.0.0.1:9",
                       api_key="k", hidden_paths=env.hidden_paths(task))
    sbx = await launcher.start(spec)
    try:
        await env.setup(task, sbx)
        for cmd in commands:
            await sbx.exec(["sh", "-c", cmd], env=env.harness_env(task, sbx), timeout_s=60)
        return await env.verify(task, sbx)
    finally:
        await env.teardown(task, sbx)
        await sbx.close()


async def _junk_scores(launcher, env: ClawEnvironment) -> list[str]:
    """Every junk agent against every task (an agent with nothing to do there is 'nothing' again and
    skipped); the problems: any reward but 0, save a tag on HEAD where that is the reference."""
    sem = asyncio.Semaphore(4)
    runs = [(t, name, cmds) for t in env.tasks() for name, junk in JUNK.items()
            if (cmds := junk(t)) or name == "nothing"]

    async def one(task: Task, name: str, cmds: list[str]) -> str | None:
        async with sem:
            r = await _run(launcher, env, task, name, cmds)
        if r.reward == 0.0 or (name == "tag-on-head" and r.reward == 1.0 and _tags_head(env, task)):
            return None
        return f"{task.id} [{name}]: reward {r.reward} ({r.detail})"

    problems = await asyncio.gather(*(one(*r) for r in runs))
    return [p for p in problems if p]


@pytest.mark.slow
async def test_junk_earns_nothing_on_the_hand_written_tasks(launcher):
    assert {t.split for t in HAND.tasks()} == {"train", "eval", "heldout"}
    problems = await _junk_scores(launcher, HAND)
    assert not problems, "\n".join(problems)


@pytest.mark.slow
async def test_junk_earns_nothing_on_the_generated_tasks(launcher):
    tasks = GEN.tasks()
    assert {t.split for t in tasks} == {"train", "heldout"} and len({t.category for t in tasks}) == 9
    problems = await _junk_scores(launcher, GEN)
    assert not problems, "\n".join(problems)
