"""Reading one task directory (``task.toml`` + files) into a :class:`Task`; every problem reported at once.

Owns: :func:`load_task_dir`, :data:`TASK_TOML_KEYS` (every top-level key of ``task.toml``, documented
in docs/task-format.md) and :func:`taskdir_extras` (what the task-dir runner reads back from a task:
its services, ``exit_code_reward`` and the subgoal → sub-score links).

Keys :class:`Task` does not have (``services``, ``exit_code_reward``, subgoals given as tables) are
kept under ``task.metadata["taskdir"]``; the reference ``solution.sh`` is kept whole (one script,
not one command per line) under ``task.metadata["solution"]``.
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any

from pydantic import ValidationError

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

from ..core.errors import ConfigError
from ..core.task import Task
from .services import ServiceSpec

__all__ = ["TASK_TOML_KEYS", "load_task_dir", "taskdir_extras"]

#: Every top-level key of task.toml and what it is (kept in step with docs/task-format.md).
TASK_TOML_KEYS = {
    "id": "task id (default: the directory name)",
    "split": "train | eval",
    "category": "free-form group for reports",
    "timeout_s": "wall-clock budget of the agent (harness run)",
    "setup_timeout_s": "budget of the services' start + setup/ copy + setup.sh",
    "verify_timeout_s": "budget of the verifier",
    "image": "container image (kubernetes launcher)",
    "required_tools": "tools the task needs (tool-coverage metric)",
    "subgoals": "steps of the plan: strings, or {text, score} tables naming the verifier sub-score that measures one",
    "resources": "[resources] cpu, memory_mb, max_processes, max_open_files",
    "services": "[[services]] name, command, ready, ready_timeout_s",
    "exit_code_reward": "score by the verifier's exit status when it prints no result line",
    "verify_on_host": "run the verifier on the host (as the driver) on a copy of the workdir, not in a sandbox",
    "verify_oom": 'whose failure an out-of-memory kill of the verifier is: "env" (default) or "agent"',
    "environment": "environment name recorded on trajectories (default: the folder's name)",
    "faults": "[[faults]] kind, ...: faults injected on every episode (openforge.faults, docs/guides/faults.md)",
    "metadata": "[metadata]: anything else, free-form",
}
_SUBGOAL_KEYS = {"text", "score"}
#: ``verify_oom``: who an out-of-memory death of the verifier blames (``taskdir.blame_oom``)
VERIFY_OOM = ("env", "agent")


def _problems_of_keys(meta: dict[str, Any], toml: Path) -> list[str]:
    out = []
    for k in meta:
        if k not in TASK_TOML_KEYS:
            close = difflib.get_close_matches(k, TASK_TOML_KEYS, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            out.append(f"{toml}: unknown key {k!r} in task.toml{hint}; custom data goes under [metadata]")
    md = meta.get("metadata")
    if isinstance(md, dict) and "services" in md:
        out.append(f"{toml}: [metadata] services is not read; declare each service as a top-level "
                   "[[services]] table (name, command, ready)")
    return out


def _subgoals(raw: Any, toml: Path, problems: list[str]) -> tuple[list[str], dict[str, str]]:
    """Subgoal texts, and {text: sub-score name} for those that name one."""
    if raw is None:
        return [], {}
    if not isinstance(raw, list):
        problems.append(f"{toml}: subgoals must be a list of strings or {{text, score}} tables")
        return [], {}
    texts, links = [], {}
    for i, s in enumerate(raw):
        if isinstance(s, str):
            texts.append(s)
        elif isinstance(s, dict) and isinstance(s.get("text"), str) and not set(s) - _SUBGOAL_KEYS \
                and isinstance(s.get("score", ""), str):
            texts.append(s["text"])
            if s.get("score"):
                links[s["text"]] = s["score"]
        else:
            problems.append(f"{toml}: subgoals[{i}] must be a string or a table {{text = \"...\", score = "
                            f"\"<verifier sub-score>\"}}, got {s!r}")
    return texts, links


def load_task_dir(path: Path, environment: str = "taskdir") -> Task:
    """Read one task directory into a :class:`Task`; every problem reported at once."""
    problems: list[str] = []
    meta: dict[str, Any] = {}
    toml = path / "task.toml"
    if not toml.is_file():
        problems.append(f"{toml}: missing (every task directory needs a task.toml)")
    else:
        try:
            meta = tomllib.loads(toml.read_text())
        except tomllib.TOMLDecodeError as e:
            problems.append(f"{toml}: not valid TOML: {e}")
    instr = path / "instruction.md"
    if not instr.is_file():
        problems.append(f"{instr}: missing (the instruction the agent is given)")
    if not (path / "verify.py").is_file() and not (path / "verify.sh").is_file():
        problems.append(f"{path}: needs a verify.py or verify.sh")
    problems += _problems_of_keys(meta, toml)
    services = []
    raw_services = meta.pop("services", [])
    if not isinstance(raw_services, list):
        problems.append(f"{toml}: services must be [[services]] tables")
        raw_services = []
    for raw in raw_services:
        try:
            services.append(ServiceSpec.parse(raw, str(toml)))
        except ConfigError as e:
            problems += e.problems
    names = [s.name.upper() for s in services]
    problems += [f"{toml}: two services named {n!r}" for n in sorted({n for n in names if names.count(n) > 1})]
    exit_code_reward = meta.pop("exit_code_reward", False)
    if not isinstance(exit_code_reward, bool):
        problems.append(f"{toml}: exit_code_reward must be true or false")
    verify_on_host = meta.pop("verify_on_host", False)
    if not isinstance(verify_on_host, bool):
        problems.append(f"{toml}: verify_on_host must be true or false")
    verify_oom = meta.pop("verify_oom", "env")
    if verify_oom not in VERIFY_OOM:
        problems.append(f"{toml}: verify_oom must be one of {', '.join(map(repr, VERIFY_OOM))}, got {verify_oom!r}")
    subgoals, links = _subgoals(meta.pop("subgoals", None), toml, problems)
    if problems:
        raise ConfigError(problems)
    meta.setdefault("id", path.name)
    meta.setdefault("environment", environment)
    metadata = dict(meta.pop("metadata", {}))
    metadata["task_dir"] = str(path.resolve())
    metadata["taskdir"] = {"services": [s.__dict__ for s in services], "exit_code_reward": exit_code_reward,
                           "subgoal_scores": links, "verify_on_host": verify_on_host, "verify_oom": verify_oom}
    if "faults" in meta:  # [[faults]]: checked here, injected by openforge.faults
        from ..faults.spec import parse_faults

        metadata["faults"] = [f.model_dump() for f in parse_faults(meta.pop("faults"), f"{toml}: faults")]
    sol = path / "solution.sh"
    if sol.is_file():
        metadata["solution"] = [sol.read_text()]
    try:
        return Task(instruction=instr.read_text().strip(), metadata=metadata, subgoals=tuple(subgoals), **meta)
    except ValidationError as e:
        raise ConfigError([f"{toml}: {'.'.join(map(str, err['loc']))}: {err['msg']}" for err in e.errors()]) from e


def taskdir_extras(task: Task) -> tuple[list[ServiceSpec], bool, dict[str, str]]:
    """(services, exit_code_reward, {subgoal text: sub-score}) of a task read by :func:`load_task_dir`."""
    extra = task.metadata.get("taskdir") or {}
    services = [ServiceSpec(**s) for s in extra.get("services") or []]
    return services, bool(extra.get("exit_code_reward")), dict(extra.get("subgoal_scores") or {})
