"""ATIF (Agent Trajectory Interchange Format, Harbor RFC 0001): openforge trajectories out, ATIF trajectories in.

Owns: :func:`write_atif` (one ATIF-v1.7 document per trajectory, ``<rollout_id>.json`` in a folder) and the
package's seams: :func:`~openforge.atif.export.to_atif` (a trajectory as a document),
:func:`~openforge.atif.importer.from_atif` / :func:`~openforge.atif.importer.read_atif` (documents as
trajectories, for SFT), :mod:`~openforge.atif.conversation` (a rollout's calls read back as the agents'
conversations). Written from openforge's own data: nothing here imports ``harbor``. ``docs/atif.md`` says
where ATIF and openforge's trajectory JSON differ.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from pathlib import Path

from ..core.trajectory import Trajectory
from .export import ATIF_VERSION, harness_version, to_atif
from .importer import find_atif, from_atif, is_atif, iter_atif, read_atif

__all__ = ["ATIF_VERSION", "find_atif", "from_atif", "harness_version", "is_atif", "iter_atif", "read_atif",
           "to_atif", "write_atif"]


def _file_name(rollout_id: str) -> str:
    """A rollout id as a file name: path separators and other odd characters become ``_``."""
    return (re.sub(r"[^A-Za-z0-9._-]", "_", rollout_id).lstrip(".") or "trajectory") + ".json"


def write_atif(trajs: Iterable[Trajectory], out_dir: str | Path) -> list[Path]:
    """Write each trajectory as ``out_dir/<rollout_id>.json`` (an ATIF-v1.7 document); returns the paths.
    Two rollout ids that map to one file name get ``-2``, ``-3`` ... rather than overwrite each other."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    taken: set[str] = set()
    for t in trajs:
        name = _file_name(t.rollout_id)
        stem, n = name[:-5], 2
        while name in taken:
            name, n = f"{stem}-{n}.json", n + 1
        taken.add(name)
        path = out / name
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(to_atif(t), ensure_ascii=False), encoding="utf-8")
        tmp.replace(path)
        written.append(path)
    return written
