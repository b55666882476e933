"""Writing a directory so that nobody ever sees it half-written: one helper for checkpoints, exported
models, converted models and cached warm-starts.

Owns: :func:`atomic_dir` (build a directory under a staging name next to its final one, then rename it
into place in one step; a failure leaves the final name untouched and no staging dir behind),
:func:`staging_dir` / :func:`publish_dir` (the same two steps for a caller that builds across
functions), :func:`atomic_files` (files merged into an existing directory, each by rename, weights
last, so a reader that checks for the weights never sees them before the rest), :func:`remove_dir`
(renamed away first, so never half-deleted under its name) and the fsync helpers.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

__all__ = ["atomic_dir", "atomic_files", "fsync_path", "fsync_tree", "publish_dir", "remove_dir", "staging_dir"]


def fsync_path(path: Path) -> None:
    """Flush ``path`` (a file, or a directory's entries) to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_tree(root: Path) -> None:
    """Flush every file under ``root``, then ``root``'s own entries."""
    for f in root.rglob("*"):
        if f.is_file():
            fsync_path(f)
    fsync_path(root)


def remove_dir(path: Path) -> None:
    """Rename ``path`` out of the way, then delete it: a crash never leaves it half-deleted under its name."""
    trash = path.with_name(f".{path.name}.trash")
    shutil.rmtree(trash, ignore_errors=True)
    os.replace(path, trash)
    shutil.rmtree(trash)


def staging_dir(final: Path, suffix: str = ".tmp") -> Path:
    """A fresh, empty ``.NAME{suffix}`` next to ``final`` (one left by a crash is removed first)."""
    tmp = final.parent / f".{final.name}{suffix}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    return tmp


def publish_dir(tmp: Path, final: Path, *, replace: bool = False, durable: bool = True) -> Path:
    """Rename the finished ``tmp`` to ``final`` in one step. An existing empty ``final`` is removed; a
    non-empty one is replaced with ``replace=True`` (renamed away, then deleted) and is otherwise a
    :class:`FileExistsError`. ``durable``: the files, then the rename, are fsynced."""
    if durable:
        fsync_tree(tmp)
    if final.exists():
        if final.is_dir() and not any(final.iterdir()):
            final.rmdir()
        elif replace:
            remove_dir(final)
        else:
            raise FileExistsError(f"{final} exists and is not empty")
    os.replace(tmp, final)
    if durable:
        fsync_path(final.parent)
    return final


@contextlib.contextmanager
def atomic_dir(final: Path, *, replace: bool = False, suffix: str = ".tmp", durable: bool = True) -> Iterator[Path]:
    """``with atomic_dir(out) as tmp: write into tmp`` — ``out`` appears, complete, when the block ends;
    if it raises, ``out`` is as it was and ``tmp`` is gone."""
    final = Path(final)
    tmp = staging_dir(final, suffix)
    try:
        yield tmp
        publish_dir(tmp, final, replace=replace, durable=durable)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


@contextlib.contextmanager
def atomic_files(target: Path, *, last: str = ".safetensors") -> Iterator[Path]:
    """``with atomic_files(d) as tmp: write files into tmp`` — each is then renamed into ``d`` (created
    if needed, other files kept), those ending in ``last`` after the rest; a failure renames nothing."""
    target = Path(target)
    target.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=f".{target.name}.tmp-") as tmp:
        yield Path(tmp)
        for f in sorted(Path(tmp).iterdir(), key=lambda f: f.name.endswith(last)):
            os.replace(f, target / f.name)
