"""Read a run directory (training run or ``forge eval`` output) for analysis.

Owns: :class:`RunData` and :func:`load_run`. The layout read (docs/metrics.md, "Run directory")::

    RUN_DIR/
      config.yaml              resolved config (optional)
      metrics.jsonl            one JSON object per training step (optional)
      eval.json                a ``forge eval`` summary (optional)
      trajectories/            *.json (one trajectory each), *.jsonl, *.parquet or a store *.db,
                               at any depth; a parent folder named ``step_12`` / ``step-12`` /
                               ``step12`` gives the trajectories' training step
      trajectories.jsonl | trajectories.db | trajectories.parquet   (alternatives)

A trajectory's step is ``metadata["step"]`` when set, else the nearest ``step_N`` folder or a
``step_N`` / ``stepN`` prefix of the file name, else (one store, e.g. ``openforge.run``'s
``trajectories.db``) it is inferred from ``metrics.jsonl`` by :func:`infer_steps`. Missing parts are fine; a directory with none
of them, or an unreadable file, is an error naming the path.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..core.errors import StoreError
from ..core.trajectory import Trajectory

__all__ = ["RunData", "infer_steps", "load_run", "trajectory_step"]

_STEP_RE = re.compile(r"^step[_-]?(\d+)", re.IGNORECASE)
_TRAJ_SUFFIXES = (".json", ".jsonl", ".parquet", ".db", ".sqlite")


@dataclass
class RunData:
    """Everything analysis needs from one run directory."""

    path: Path
    name: str
    config: dict[str, Any] = field(default_factory=dict)
    metrics: list[dict[str, Any]] = field(default_factory=list)
    trajectories: list[Trajectory] = field(default_factory=list)
    eval: dict[str, Any] | None = None

    @property
    def steps(self) -> list[int]:
        return sorted({trajectory_step(t) for t in self.trajectories if trajectory_step(t) is not None})

    @property
    def policy_trajectories(self) -> list[Trajectory]:
        """The trajectories of the policy: without SFT teacher rollouts (``metadata["phase"] == "sft"``)."""
        return [t for t in self.trajectories if (t.metadata or {}).get("phase") != "sft"]

    def at_step(self, step: int) -> list[Trajectory]:
        return [t for t in self.trajectories if trajectory_step(t) == step]


def trajectory_step(traj: Trajectory) -> int | None:
    v = (traj.metadata or {}).get("step")
    return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _step_from_path(path: Path, root: Path) -> int | None:
    for part in [path.stem, *[p.name for p in path.relative_to(root).parents]]:
        m = _STEP_RE.match(part)
        if m:
            return int(m.group(1))
    return None


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    rows = []
    lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            if lineno == len(lines):
                continue  # a torn last line of a run still being written
            raise StoreError(f"{path}:{lineno}: not JSON ({e.msg})") from None
        if isinstance(row, dict):
            rows.append(row)
    return rows


def _trajectory_files(root: Path) -> list[Path]:
    files: list[Path] = []
    tdir = root / "trajectories"
    if tdir.is_dir():
        files += sorted(p for p in tdir.rglob("*") if p.is_file() and p.suffix in _TRAJ_SUFFIXES)
    for name in ("trajectories.jsonl", "trajectories.db", "trajectories.parquet", "trajectory.json"):
        if (root / name).is_file():
            files.append(root / name)
    if not files and not (root / "metrics.jsonl").is_file() and not (root / "eval.json").is_file():
        # a bare folder of trajectory files (e.g. one step's trajectories/step_0003)
        files = sorted(p for p in root.iterdir() if p.is_file() and p.suffix in (".json", ".jsonl", ".parquet"))
    return files


def infer_steps(trajs: list[Trajectory], metrics: list[dict[str, Any]]) -> list[Trajectory]:
    """Give chronologically ordered trajectories of one store the training step they belong to.

    Steps run one after another, so a store read in finishing order splits into consecutive
    blocks: step ``s`` owns as many trajectories as its ``metrics.jsonl`` line counts in
    ``statuses`` (every attempt, retries included). Trajectories before the first block (e.g. SFT
    teacher rollouts) get no step. If the counts do not add up, nothing is assigned.
    """
    blocks = [(int(m["step"]), sum(int(v) for v in m["statuses"].values())) for m in metrics
              if isinstance(m.get("statuses"), dict) and isinstance(m.get("step"), int) and m.get("phase") != "sft"]
    total = sum(n for _, n in blocks)
    if not blocks or total > len(trajs):
        return trajs
    sft = any(m.get("phase") == "sft" for m in metrics)
    out = [t.model_copy(update={"metadata": {**t.metadata, "phase": "sft"}}) if sft else t
           for t in trajs[: len(trajs) - total]]
    i = len(out)
    for step, n in blocks:
        for t in trajs[i : i + n]:
            out.append(t.model_copy(update={"metadata": {**t.metadata, "step": step}}))
        i += n
    return out


def load_run(path: str | Path) -> RunData:
    """Load a run directory (or a single trajectory file/store) into :class:`RunData`."""
    from ..store import load_trajectories

    root = Path(path)
    if root.is_file():  # a lone trajectory file or store
        return RunData(path=root, name=root.stem, trajectories=load_trajectories(root))
    if not root.is_dir():
        raise StoreError(f"{root}: no such run directory")
    run = RunData(path=root, name=root.name)
    cfg = root / "config.yaml"
    if cfg.is_file():
        import yaml

        try:
            run.config = yaml.safe_load(cfg.read_text()) or {}
        except yaml.YAMLError as e:
            raise StoreError(f"{cfg}: not YAML ({e})") from None
    if (root / "metrics.jsonl").is_file():
        run.metrics = _read_jsonl(root / "metrics.jsonl")
    if (root / "eval.json").is_file():
        try:
            run.eval = json.loads((root / "eval.json").read_text())
        except json.JSONDecodeError as e:
            raise StoreError(f"{root / 'eval.json'}: not JSON ({e.msg})") from None
    seen: set[str] = set()
    files = _trajectory_files(root)
    for f in files:
        try:
            trajs = load_trajectories(f)
        except StoreError as e:
            raise StoreError(f"cannot read trajectories: {e}") from None
        step = _step_from_path(f, root)
        for t in trajs:
            if t.rollout_id in seen:
                continue
            seen.add(t.rollout_id)
            if step is not None and trajectory_step(t) is None:
                t = t.model_copy(update={"metadata": {**t.metadata, "step": step}})
            run.trajectories.append(t)
    if len(files) == 1 and run.metrics and not any(trajectory_step(t) is not None for t in run.trajectories):
        run.trajectories = infer_steps(run.trajectories, run.metrics)
    if not (run.config or run.metrics or run.eval or run.trajectories):
        raise StoreError(
            f"{root}: not a run directory (expected config.yaml, metrics.jsonl, eval.json or trajectories/)"
        )
    return run
