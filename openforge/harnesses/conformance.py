"""``forge harness check``: the conformance probe of one harness, without a model.

Owns: :func:`check_harness` (one real rollout of the harness — registered name or spec file — on the
claw task ``files-create-hello`` in a local sandbox, its reference solution replayed by the scripted
policy: one shell tool call, then the final answer) and the checks read from that rollout:

==============  ============================================================================
wire            every call came in on the harness's wire
streaming       whether the harness streams (informational: both are fine)
tool call       the policy's shell call reached the harness, which ran it (the verifier passed)
final answer    the harness reported the policy's final text
exactness       ≥ 2 calls, each recorded token-exactly
splicing        the calls spliced into one trained segment (the history only grew)
==============  ============================================================================

The probe's trajectory gives the harness's :class:`~openforge.harnesses.notes.HarnessNotes`, which
:func:`check_harness` returns and ``forge harness check`` saves (the reference for drift).
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .notes import HarnessNotes, harness_version, observe

__all__ = ["FINAL", "CheckRow", "Conformance", "check_harness"]

#: The final answer the scripted policy gives.
FINAL = "Done: hello.txt written (openforge conformance probe)."
TASK = "files-create-hello"


@dataclass
class CheckRow:
    check: str
    ok: bool | None  # None: informational
    detail: str


@dataclass
class Conformance:
    harness: str
    version: str | None
    wire: str
    rows: list[CheckRow]
    notes: HarnessNotes | None
    trajectory: Any = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return all(r.ok is not False for r in self.rows)


def _rows(traj: Any, wire: str) -> list[CheckRow]:
    calls = traj.calls
    apis = sorted({c.api for c in calls})
    tool_calls = sum(len((c.response or {}).get("tool_calls") or []) for c in calls)
    final = str(traj.metadata.get("final_text") or "")
    exact = [c for c in calls if c.exact]
    streamed = [c for c in calls if c.was_streamed()]
    rows = [
        CheckRow("wire", bool(calls) and apis == [wire], f"{', '.join(apis) or 'no calls'} (declared {wire})"),
        CheckRow("streaming", None, f"{len(streamed)}/{len(calls)} calls streamed"),
        CheckRow("tool call", tool_calls >= 1 and traj.reward >= 1.0,
                 f"{tool_calls} tool call(s); task {'passed' if traj.reward >= 1.0 else 'failed'} "
                 f"({traj.status.value}{': ' + traj.error if traj.error else ''})"),
        CheckRow("final answer", FINAL in final, repr(final[-80:]) if final else "no final text"),
        CheckRow("exactness", len(calls) >= 2 and len(exact) == len(calls), f"{len(exact)}/{len(calls)} calls exact"),
        CheckRow("splicing", len(calls) >= 2 and len(traj.segments) == 1,
                 f"{len(calls)} calls → {len(traj.segments)} segment(s)"),
    ]
    return rows


def _options(name: str, options: dict[str, Any] | None, wire_api: str | None) -> dict[str, Any]:
    from ..core.errors import ConfigError
    from ..plugins import harness_class
    from .options import harness_options

    opts = dict(options or {})
    if wire_api is not None:
        cls = harness_class(name)
        known = harness_options(cls)
        if known is not None and "wire_api" not in known:
            raise ConfigError(f"{name} speaks only {cls.wire_api}: a wire can be chosen only for a harness that "
                              f"speaks several")
        opts["wire_api"] = wire_api
    return opts


async def check_harness(name: str, *, options: dict[str, Any] | None = None, wire_api: str | None = None,
                        budget_s: float = 300.0, launcher: str = "local", run_dir: Path | None = None) -> Conformance:
    """Run the conformance probe of harness ``name`` (a registered name or a spec file path) on
    ``wire_api`` (default: its default wire)."""
    from ..plugins import make_harness
    from ..proxy.backends.scripted import ScriptedBackend
    from ..runner.parts import reference_script
    from ..runner.session import RolloutSettings, Session, load_environment

    opts = _options(name, options, wire_api)
    make_harness(name, **opts).check_installed()  # not installed: say how, before a sandbox starts
    env = load_environment("claw")
    with tempfile.TemporaryDirectory(prefix="forge-check-") as tmp:
        out = Path(run_dir or tmp)
        env.use_run_dir(out)
        task = env.task(TASK)
        backend = ScriptedBackend(reference_script(env, [task], final=FINAL))
        session = Session.from_names(backend, environment=env, harness=name,
                                     harness_options=opts,
                                     launcher=launcher, close_backend=True,
                                     rollouts=RolloutSettings(budget_s=budget_s, progress=False))
        async with session:
            harness = session.harness()  # type: ignore[misc]  # the factory: set by from_names
            traj = await session.rollout(task)
    wire = harness.wire_api
    rows = _rows(traj, wire)
    if traj.harness_drift:
        rows.append(CheckRow("drift", None, f"{', '.join(traj.harness_drift.get('changed', {}))} differ from "
                                            f"{traj.harness_drift.get('reference')}"))
    checks = {r.check: r.ok for r in rows if r.ok is not None}
    version = harness_version(harness)
    notes = observe(traj, version=version, checks=checks) if traj.calls else None
    return Conformance(harness=harness.name, version=version, wire=wire, rows=rows, notes=notes, trajectory=traj)
