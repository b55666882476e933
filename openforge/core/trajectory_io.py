"""Trajectories as files: :func:`export_trajectories` (JSONL / Parquet) and :func:`load_export`
(a JSONL or Parquet export, or one ``trajectory.json``, back into :class:`Trajectory` objects);
:func:`openforge.store.load_trajectories` reads a store too and hands every other file to it.

Owns the file formats and what happens to a row that is not a valid trajectory: a bad store row (e.g.
written by an older version, or a non-finite reward) is handed to ``on_bad`` — by default a
:class:`StoreWarning` naming it — and skipped, so one bad row never breaks an export; a bad line of an
export file is an error naming the line.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ..util.extras import pip_install
from .errors import StoreError
from .finite import nonfinite_in_trajectory
from .trajectory import Trajectory

__all__ = ["StoreWarning", "export_trajectories", "is_store_file", "load_export", "warn_skipped"]

_SQLITE_MAGIC = b"SQLite format 3\x00"


def _parse_traj(data: str | bytes, where: str) -> Trajectory:
    try:
        traj = Trajectory.model_validate_json(data)
    except ValidationError as e:
        raise StoreError(f"{where}: not a valid trajectory (version 1): {e.error_count()} problem(s), first: "
                         f"{e.errors()[0]['loc']}: {e.errors()[0]['msg']}") from None
    bad = nonfinite_in_trajectory(traj)
    if bad is not None:
        raise StoreError(f"{where}: not a valid trajectory (version 1): {bad}")
    return traj


def warn_skipped(e: StoreError) -> None:
    """The default ``on_bad`` of exports: a warning naming the row that was left out."""
    warnings.warn(f"skipped {e}", StoreWarning, stacklevel=3)


class StoreWarning(UserWarning):
    """A stored row was left out of an export or a load because it is not a valid trajectory."""


# -------------------------------------------------------------------- export / load

def _arrow_schema() -> Any:
    import pyarrow as pa

    segment = pa.struct(
        [
            ("input_ids", pa.list_(pa.int32())),
            ("loss_mask", pa.list_(pa.int8())),
            ("logprobs", pa.list_(pa.float64())),
            ("call_indices", pa.list_(pa.int32())),
            ("break_reason", pa.string()),
            ("reward", pa.float64()),
        ]
    )
    return pa.schema(
        [
            ("version", pa.int32()),
            ("rollout_id", pa.string()),
            ("task_id", pa.string()),
            ("harness", pa.string()),
            ("environment", pa.string()),
            ("status", pa.string()),
            ("reward", pa.float64()),
            ("rewards", pa.string()),  # JSON
            ("calls", pa.string()),  # JSON list of ModelCall
            ("segments", pa.list_(segment)),
            ("metrics", pa.string()),  # JSON
            ("error", pa.string()),
            ("metadata", pa.string()),  # JSON
        ]
    )


def _import_pyarrow() -> Any:
    try:
        import pyarrow
        import pyarrow.parquet
    except ImportError:
        raise StoreError(f"Parquet needs pyarrow: {pip_install('parquet')}") from None
    return pyarrow


def export_trajectories(trajs: Iterable[Trajectory], out: str | Path, fmt: str | None = None, *,
                        on_bad: Callable[[StoreError], None] = warn_skipped) -> int:
    """Write trajectories to ``out`` as ``jsonl`` (one trajectory JSON per line) or ``parquet``.

    Returns the number written. The format defaults to the file suffix. A trajectory whose JSON could
    not be read back (a non-finite number) is handed to ``on_bad`` (default: a warning naming it) and
    left out; the rest are written.
    """
    trajs = _readable(trajs, on_bad)
    out = Path(out)
    fmt = (fmt or out.suffix.lstrip(".")).lower()
    out.parent.mkdir(parents=True, exist_ok=True)
    if fmt == "jsonl":
        n = 0
        tmp = out.with_name(out.name + ".tmp")
        with tmp.open("w", encoding="utf-8") as f:
            for t in trajs:
                f.write(t.to_json())
                f.write("\n")
                n += 1
        tmp.replace(out)
        return n
    if fmt == "parquet":
        pa = _import_pyarrow()
        rows = []
        for t in trajs:
            d = t.model_dump(mode="json")
            rows.append(
                {
                    **{k: d[k] for k in ("version", "rollout_id", "task_id", "harness", "environment", "status", "reward", "error")},
                    "rewards": json.dumps(d["rewards"]),
                    "calls": json.dumps(d["calls"]),
                    "segments": d["segments"],
                    "metrics": json.dumps(d["metrics"]),
                    "metadata": json.dumps(d["metadata"]),
                }
            )
        table = pa.Table.from_pylist(rows, schema=_arrow_schema())
        tmp = out.with_name(out.name + ".tmp")
        pa.parquet.write_table(table, tmp)
        tmp.replace(out)
        return len(rows)
    raise StoreError(f"unknown export format {fmt!r} (use jsonl or parquet)")


def _readable(trajs: Iterable[Trajectory], on_bad: Callable[[StoreError], None]) -> Iterator[Trajectory]:
    for t in trajs:
        bad = nonfinite_in_trajectory(t)
        if bad is None:
            yield t
        else:
            on_bad(StoreError(f"rollout {t.rollout_id}: {bad} (its JSON could not be read back)"))


def is_store_file(path: str | Path) -> bool:
    """Whether ``path`` is a SQLite file (a store); :class:`StoreError` when there is no such file."""
    path = Path(path)
    if not path.is_file():
        raise StoreError(f"{path}: no such file")
    with path.open("rb") as f:
        return f.read(16) == _SQLITE_MAGIC


def load_export(path: str | Path) -> list[Trajectory]:
    """Read trajectories from a ``.jsonl`` / ``.parquet`` export or one ``trajectory.json``; a bad
    line is an error naming the line."""
    path = Path(path)
    if is_store_file(path):
        raise StoreError(f"{path}: a store, not an export (read it with openforge.store.load_trajectories)")
    with path.open("rb") as f:
        head = f.read(16)
    if head[:4] == b"PAR1":
        pa = _import_pyarrow()
        try:
            table = pa.parquet.read_table(path)
        except Exception as e:
            raise StoreError(f"{path}: unreadable Parquet file: {e}") from None
        missing = {"rollout_id", "calls", "segments"} - set(table.column_names)
        if missing:
            raise StoreError(f"{path}: not an openforge trajectory export (missing columns {sorted(missing)})")
        out = []
        for row in table.to_pylist():
            data = {
                **row,
                "rewards": json.loads(row["rewards"] or "{}"),
                "calls": json.loads(row["calls"] or "[]"),
                "metrics": json.loads(row["metrics"] or "{}"),
                "metadata": json.loads(row["metadata"] or "{}"),
            }
            out.append(_parse_traj(json.dumps(data), f"{path}:{row['rollout_id']}"))
        return out
    text = path.read_text(encoding="utf-8", errors="replace")
    if text.lstrip().startswith("{"):
        try:  # a single trajectory.json (possibly pretty-printed)
            whole = json.loads(text)
        except json.JSONDecodeError:
            whole = None
        if isinstance(whole, dict):
            return [_parse_traj(text, str(path))]
    out = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            json.loads(line)
        except json.JSONDecodeError as e:
            raise StoreError(f"{path}:{lineno}: not JSON ({e.msg}); expected one trajectory per line") from None
        out.append(_parse_traj(line, f"{path}:{lineno}"))
    return out
