"""What a tool step *does*: split into actions, each a write, a read or something else, with targets.

Owns: :class:`Action`, :func:`step_actions`, :func:`is_write_tool`, :func:`resource_noun`. Used by
the self-verification metric (docs/metrics.md): a generic-shell step is split into its
sub-commands (at ``&&``, ``||``, ``;``, ``|`` and newlines) so that ``echo x > f && cat f`` is a
write followed by a read-back; any other step is one action.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass, field
from typing import Any

from ..readings.steps import ToolStep, base_tool_name

__all__ = ["Action", "is_write_tool", "resource_noun", "step_actions", "url_like"]

# Dedicated file-editing tools (base names, lower case).
FILE_WRITE_TOOLS = frozenset(
    {
        "write", "write_file", "create_file", "edit", "edit_file", "multiedit", "multi_edit", "apply_patch",
        "str_replace", "str_replace_editor", "str_replace_based_edit_tool", "notebookedit", "insert",
        "replace", "patch", "save_file",
    }
)
# Planning / to-do tools: they change the agent's plan, not the world (neither write nor read).
PLAN_TOOLS = frozenset({"todowrite", "todo_write", "todoread", "todo_read", "write_todos", "update_plan",
                        "exit_plan_mode", "exitplanmode", "create_goal", "update_goal", "get_goal"})
# Leading/contained verbs that make a service tool a write (create_event) or a read (list_events).
WRITE_VERBS = frozenset(
    {
        "create", "add", "update", "delete", "remove", "send", "post", "put", "set", "insert", "write", "edit",
        "patch", "save", "upload", "move", "rename", "book", "schedule", "cancel", "submit", "modify",
        "append", "reply", "forward", "assign", "archive", "mark", "approve", "reject",
    }
)
READ_VERBS = frozenset(
    {
        "get", "list", "read", "search", "fetch", "query", "find", "view", "show", "check", "verify", "lookup",
        "describe", "cat", "ls", "glob", "grep", "open", "inspect", "status", "count",
    }
)
_PATH_KEYS = ("path", "file_path", "filepath", "filename", "file", "target", "notebook_path", "dest",
              "destination", "target_file")
_SPLIT_RE = re.compile(r"\s*(?:&&|\|\||;|\n|\|)\s*")
_REDIRECT_RE = re.compile(r"(?:^|[^0-9&>])>{1,2}\s*(?!&)([^\s;&|<>()]+)")
_PATCH_FILE_RE = re.compile(r"^\*\*\* (?:Add|Update|Delete) File:\s*(\S+)", re.MULTILINE)
_CURL_WRITE_RE = re.compile(r"(?:-X\s*|--request\s+)(?:POST|PUT|PATCH|DELETE)\b|\s(?:-d|--data\S*|--json|-F|--form)\s")
_URL_RE = re.compile(r"https?://[^\s'\"]+")
_SQL_WRITE_RE = re.compile(r"\b(?:insert|update|delete|create|drop|alter|replace)\b", re.IGNORECASE)
_PY_WRITE_RE = re.compile(r"""open\(\s*['"]([^'"]+)['"]\s*,\s*['"][wax]|Path\(\s*['"]([^'"]+)['"]\s*\)\.write_(?:text|bytes)""")
GIT_WRITES = frozenset({"commit", "add", "mv", "rm", "checkout", "switch", "merge", "rebase", "reset", "tag",
                        "revert", "cherry-pick", "stash", "apply", "am", "push", "branch", "restore"})
GIT_READS = frozenset({"log", "show", "status", "diff", "rev-parse", "ls-files", "cat-file", "blame", "describe"})


def url_like(token: str) -> bool:
    """A URL, or a ``$VAR/path`` / ``${VAR}/path`` built from an environment variable."""
    t = token.strip("'\"")
    return "://" in t or (t.startswith("$") and "/" in t)


def _git_sub(words: list[str]) -> str:
    i = 1
    while i < len(words) and words[i].startswith("-"):
        i += 2 if words[i] in ("-C", "-c") else 1
    return words[i] if i < len(words) else ""


@dataclass
class Action:
    """One unit of effect inside a step."""

    step: int
    kind: str  # "write" | "read" | "other"
    text: str  # what was run/asked, whitespace-normalised
    tool: str  # base tool name
    targets: set[str] = field(default_factory=set)  # paths / URLs written (kind == "write")
    noun: str | None = None  # resource of a service tool (create_event → "event")


def _tokens(name: str) -> list[str]:
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", name)
    return [t for t in re.split(r"[^A-Za-z0-9]+", spaced.lower()) if t]


def _singular(word: str) -> str:
    if word.endswith("ies") and len(word) > 4:
        return word[:-3] + "y"
    if word.endswith("s") and not word.endswith("ss") and len(word) > 3:
        return word[:-1]
    return word


def resource_noun(tool_name: str) -> tuple[str | None, str | None]:
    """``(verb_class, noun)`` of a service tool name: ``calendar_create_event`` → ``("write", "calendar_event")``.

    ``verb_class`` is ``"write"`` / ``"read"`` for the first token that is a known verb, else None.
    """
    toks = _tokens(base_tool_name(tool_name))
    for i, t in enumerate(toks):
        cls = "write" if t in WRITE_VERBS else "read" if t in READ_VERBS else None
        if cls:
            rest = [_singular(x) for x in toks[:i] + toks[i + 1 :]]
            return cls, "_".join(rest) or None
    return None, None


def is_write_tool(step: ToolStep) -> bool:
    """A dedicated file-editing tool (not in ``view`` mode) or a service tool with a write verb."""
    name = step.base_name
    if name in PLAN_TOOLS:
        return False
    if name in FILE_WRITE_TOOLS:
        args = step.arguments if isinstance(step.arguments, dict) else {}
        return str(args.get("command", "")).lower() not in ("view", "read")
    return not step.is_shell and resource_noun(name)[0] == "write"


def _file_targets(args: Any) -> set[str]:
    out: set[str] = set()
    if isinstance(args, dict):
        for key in _PATH_KEYS:
            v = args.get(key)
            if isinstance(v, str) and v.strip():
                out.add(v.strip())
        for key in ("input", "patch", "content"):
            v = args.get(key)
            if isinstance(v, str):
                out.update(_PATCH_FILE_RE.findall(v))
    elif isinstance(args, str):
        out.update(_PATCH_FILE_RE.findall(args))
    return out


def _shell_action(step: int, tool: str, cmd: str) -> Action:
    words = cmd.split()
    head = posixpath.basename(words[0]) if words else ""
    targets = {t for t in _REDIRECT_RE.findall(cmd) if t not in ("/dev/null", "/dev/stdout", "/dev/stderr")}
    args = [w for w in words[1:] if not w.startswith("-")]
    if head == "tee" or (head == "touch" or head == "mkdir" or head == "rm"):
        targets.update(args)
    elif (head == "sed" and any(w.startswith("-i") for w in words[1:]) and args) or (head in ("cp", "mv", "install", "ln") and len(args) >= 2):
        targets.add(args[-1])
    elif head == "curl" and _CURL_WRITE_RE.search(" " + cmd + " "):
        targets.update(w for w in words[1:] if url_like(w))
        targets = targets or {"(http)"}
    elif head in ("sqlite3", "duckdb") and args and _SQL_WRITE_RE.search(cmd):
        targets.add(args[0])
    for m in _PY_WRITE_RE.finditer(cmd):
        targets.add(m.group(1) or m.group(2))
    targets = {t.strip("'\"") for t in targets if t.strip("'\"")}
    noun = None
    if head == "git":
        sub = _git_sub(words)
        noun = "git" if sub in GIT_WRITES or sub in GIT_READS else None
        if sub in GIT_WRITES:
            return Action(step=step, kind="write", text=" ".join(words), tool=tool, targets=targets, noun="git")
    reads = READ_VERBS | {"head", "tail", "less", "diff", "stat", "wc"}
    kind = "write" if targets else "read" if head in reads or noun == "git" or head == "curl" else "other"
    return Action(step=step, kind=kind, text=" ".join(words), tool=tool, targets=targets, noun=noun)


def step_actions(step: ToolStep) -> list[Action]:
    """Split one step into actions (docs/metrics.md, "write action")."""
    tool = step.base_name
    if step.is_shell:
        cmd = step.command or ""
        parts = [p for p in _SPLIT_RE.split(cmd) if p.strip()] or [cmd]
        return [_shell_action(step.index, tool, p) for p in parts]
    text = " ".join(step.args_text.split())
    if tool in PLAN_TOOLS:
        return [Action(step=step.index, kind="other", text=text, tool=tool)]
    verb, noun = resource_noun(tool)
    if is_write_tool(step):
        targets = _file_targets(step.arguments)
        return [Action(step=step.index, kind="write", text=text, tool=tool, targets=targets,
                       noun=None if tool in FILE_WRITE_TOOLS else noun)]
    kind = "read" if verb == "read" or tool in ("read", "read_file", "view", "cat", "ls", "glob", "grep") else "other"
    return [Action(step=step.index, kind=kind, text=text, tool=tool, noun=noun if verb == "read" else None)]
