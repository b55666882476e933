"""Harness notes (what a harness version injects or rewrites) and drift against them.

Owns: :class:`HarnessNotes` (per harness × version × wire: the fingerprint of the system prompt the
harness sends first, its tool names, the request keys it sets, streaming, whether it compacts or
rewrites the history, strips reasoning, retries; plus the conformance checks that produced it),
:func:`observe` (a trajectory → notes), where notes live (:func:`save_notes`: the user's notes under
``<cache>/harness-notes/``; notes shipped with openforge in ``openforge/harnesses/notes/`` from a
conformance run), and :func:`drift` / :func:`check_drift`: on every rollout the first call's system
prompt fingerprint and tool names are compared with the notes of that harness version (else the
newest notes of another version: an upgrade), and a difference is the trajectory's
``harness_drift``. A harness with no notes is not compared.

The fingerprint is over the system text with the parts that change per rollout masked (header
lines, absolute paths, long hex runs, words with digits), so a task's date, working directory or
hash is not a drift; a changed sentence is.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import re
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field

if TYPE_CHECKING:
    from ..core.trajectory import Trajectory
    from ..core.types import ModelCall
    from ..harness import Harness

__all__ = ["HarnessNotes", "check_drift", "drift", "find_notes", "fingerprint", "harness_version", "notes_dirs",
           "observe", "save_notes", "shipped_dir", "system_text", "tool_names"]

#: what changes per rollout and is masked before fingerprinting: header lines a CLI puts in its prompt
#: (Claude Code's ``x-anthropic-billing-header: cc_version=2.1.197.c5e`` hashes the task), absolute
#: paths, long hex runs, and every word with a digit in it (dates, ids, versions)
_MASKS = [(re.compile(r"(?m)^x-[\w-]+:.*$"), "<header>"),
          (re.compile(r"(?<![\w/])/(?:[^\s\"'`<>|;,()\[\]{}]+)"), "<path>"),
          (re.compile(r"\b[0-9a-fA-F]{8,}\b"), "<hex>"), (re.compile(r"\w*\d\w*"), "0")]
#: request keys every wire has; the rest are what the harness chose to send
_BASE_KEYS = {"model", "messages", "input", "system", "instructions", "tools", "stream"}


class HarnessNotes(BaseModel):
    """What one harness version sends, from a conformance run (or a recorded rollout)."""

    harness: str
    version: str | None = None
    wire: str
    system_sha: str = ""
    system_chars: int = 0
    tools: list[str] = Field(default_factory=list)
    injected: list[str] = Field(default_factory=list)
    streaming: bool = False
    compaction: bool = False  # a later request carried fewer history items than the one before
    rewrites_history: bool = False  # a later request's system prompt or history did not extend the last one
    stripped_reasoning: bool = False
    retries: int = 0
    calls: int = 0
    checks: dict[str, bool | None] = Field(default_factory=dict)
    source: str = "conformance"
    recorded_at: str = ""

    def label(self) -> str:
        return f"{self.harness} {self.version or '(version unknown)'} on {self.wire} ({self.source} {self.recorded_at})"


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(_text(p.get("text", "") if isinstance(p, dict) else p) for p in content)
    return ""


def system_text(call: ModelCall) -> str:
    """The system prompt of a call in any wire: ``system`` / ``instructions`` and the leading
    system or developer messages."""
    req = call.request or {}
    gemini = req.get("systemInstruction") or req.get("system_instruction")  # the Gemini wire
    parts = [_text(req.get("system")), _text(req.get("instructions")),
             _text(gemini.get("parts")) if isinstance(gemini, dict) else _text(gemini)]
    for m in req.get("messages") or (req.get("input") if isinstance(req.get("input"), list) else []) or []:
        if not isinstance(m, dict) or m.get("role") not in ("system", "developer"):
            break
        parts.append(_text(m.get("content")))
    return "\n".join(p for p in parts if p)


def tool_names(call: ModelCall) -> list[str]:
    out = []
    for t in (call.request or {}).get("tools") or []:
        if isinstance(t, dict) and isinstance(t.get("functionDeclarations"), list):  # the Gemini wire
            out += [str(d.get("name") or "?") for d in t["functionDeclarations"] if isinstance(d, dict)]
        elif isinstance(t, dict):
            fn = t.get("function") if isinstance(t.get("function"), dict) else {}
            out.append(str(fn.get("name") or t.get("name") or t.get("type") or "?"))
    return sorted(out)


def fingerprint(text: str) -> str:
    for rx, repl in _MASKS:
        text = rx.sub(repl, text)
    return hashlib.sha256(" ".join(text.split()).encode()).hexdigest()[:16]


def _history(call: ModelCall) -> list[Any]:
    req = call.request or {}
    items = req.get("messages") if isinstance(req.get("messages"), list) else req.get("input")
    return items if isinstance(items, list) else []


def _stripped(call: ModelCall, after: ModelCall) -> bool:
    """``call`` reasoned and the next request no longer carries (the start of) that reasoning."""
    reasoning = str((call.response or {}).get("reasoning") or "").strip()
    if not (call.has_reasoning and reasoning):
        return False
    return json.dumps(reasoning[:40], ensure_ascii=False)[1:-1] not in json.dumps(after.request, ensure_ascii=False)


def observe(traj: Trajectory, *, version: str | None, checks: dict[str, bool | None] | None = None,
            source: str = "conformance") -> HarnessNotes | None:
    """Notes of ``traj``'s harness from its calls; None without calls."""
    calls = traj.calls
    if not calls:
        return None
    first = calls[0]
    system = system_text(first)
    pairs = list(itertools.pairwise(calls))
    compaction = any(len(_history(b)) < len(_history(a)) for a, b in pairs)
    rewritten = any(_history(b)[:len(_history(a))] != _history(a) or system_text(b) != system_text(a)
                    for a, b in pairs)
    stripped = any(_stripped(a, b) for a, b in pairs)
    bodies = [json.dumps(c.request, sort_keys=True) for c in calls]
    return HarnessNotes(
        harness=traj.harness or "?", version=version, wire=first.api, system_sha=fingerprint(system),
        system_chars=len(system), tools=tool_names(first),
        injected=sorted(k for k in (first.request or {}) if k not in _BASE_KEYS),
        streaming=first.was_streamed(), compaction=compaction, rewrites_history=rewritten,
        stripped_reasoning=stripped,
        retries=len(bodies) - len(set(bodies)), calls=len(calls), checks=dict(checks or {}), source=source,
        recorded_at=time.strftime("%Y-%m-%d", time.gmtime()))


# -- where notes live ------------------------------------------------------------------------------
def shipped_dir() -> Path:
    return Path(__file__).resolve().parent / "notes"


def user_dir() -> Path:
    from ..util.paths import cache_root

    return cache_root() / "harness-notes"


def notes_dirs() -> list[Path]:
    """Where notes are looked up, first wins: the user's (``forge harness check`` writes there), then
    openforge's shipped ones."""
    return [user_dir(), shipped_dir()]


def _file_name(harness: str, version: str | None, wire: str) -> str:
    safe = re.sub(r"[^A-Za-z0-9_.@+-]", "_", f"{harness}--{wire}--{version or 'unknown'}")
    return safe + ".json"


def save_notes(notes: HarnessNotes, folder: Path | None = None) -> Path:
    """Write ``notes`` (atomically) into ``folder`` (default: the user's notes folder)."""
    folder = folder or user_dir()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / _file_name(notes.harness, notes.version, notes.wire)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(notes.model_dump_json(indent=1) + "\n")
    tmp.replace(path)
    return path


_READ: dict[tuple[str, int], HarnessNotes | None] = {}


def _read(path: Path) -> HarnessNotes | None:
    try:
        key = (str(path), path.stat().st_mtime_ns)
    except OSError:
        return None
    if key not in _READ:
        try:
            _READ[key] = HarnessNotes.model_validate_json(path.read_text())
        except (OSError, ValueError):
            _READ[key] = None  # a broken notes file is no reference
    return _READ[key]


def all_notes(dirs: list[Path] | None = None) -> list[HarnessNotes]:
    """Every readable notes file, the user's first (a user's file shadows a shipped one)."""
    seen: dict[str, HarnessNotes] = {}
    for d in dirs or notes_dirs():
        for p in sorted(d.glob("*.json")) if d.is_dir() else []:
            n = _read(p)
            if n is not None:
                seen.setdefault(p.name, n)
    return list(seen.values())


def find_notes(harness: str, version: str | None, wire: str, dirs: list[Path] | None = None) -> HarnessNotes | None:
    """The notes of ``harness`` ``version`` on ``wire``; else the newest ones of another version."""
    dirs = dirs or notes_dirs()
    for d in dirs:
        exact = _read(d / _file_name(harness, version, wire))
        if exact is not None:
            return exact
    others = [n for n in all_notes(dirs) if n.harness == harness and n.wire == wire]
    return max(others, key=lambda n: n.recorded_at, default=None)


# -- drift -------------------------------------------------------------------------------------------
def drift(reference: HarnessNotes, traj: Trajectory, version: str | None) -> dict[str, Any] | None:
    """How the first call of ``traj`` differs from ``reference`` (None: as noted)."""
    if not traj.calls:
        return None
    first = traj.calls[0]
    changed: dict[str, Any] = {}
    sha = fingerprint(system_text(first))
    if sha != reference.system_sha:
        changed["system_prompt"] = {"noted": reference.system_sha, "seen": sha,
                                    "noted_chars": reference.system_chars, "seen_chars": len(system_text(first))}
    tools = tool_names(first)
    if tools != reference.tools:
        changed["tools"] = {"added": sorted(set(tools) - set(reference.tools)),
                            "removed": sorted(set(reference.tools) - set(tools))}
    if not changed:
        return None
    return {"reference": reference.label(), "noted_version": reference.version, "version": version,
            "changed": changed}


def harness_version(harness: Harness) -> str | None:
    """The version notes are keyed by: a CLI harness's installed/declared version, else None."""
    from .cli import CliHarness

    if isinstance(harness, CliHarness):
        try:
            return harness.version()
        except Exception:  # a version we cannot read is unknown, not a failed rollout
            return None
    return None


def check_drift(harness: Harness, traj: Trajectory) -> dict[str, Any] | None:
    """``harness_drift`` of one finished rollout: its first call against the harness's notes."""
    if not traj.calls:
        return None
    version = harness_version(harness)
    reference = find_notes(harness.name, version, traj.calls[0].api)
    return drift(reference, traj, version) if reference is not None else None
