"""The one way openforge writes a directory: it appears complete or not at all (checkpoints, exported
models, converted models, cached warm-starts all go through :mod:`openforge.util.atomicdir`)."""

from __future__ import annotations

import os

import pytest

from openforge.util import atomicdir
from openforge.util.atomicdir import atomic_dir, atomic_files


def _names(d):
    return sorted(p.name for p in d.iterdir())


def test_the_directory_appears_complete_and_no_staging_is_left(tmp_path):
    out = tmp_path / "out"
    with atomic_dir(out) as tmp:
        (tmp / "a").write_text("1")
        assert not out.exists()  # nothing under the final name while it is being written
    assert (out / "a").read_text() == "1" and _names(tmp_path) == ["out"]


def test_a_failure_leaves_the_old_directory_and_no_staging(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "old").write_text("kept")
    with pytest.raises(RuntimeError), atomic_dir(out, replace=True) as tmp:
        (tmp / "new").write_text("half")
        raise RuntimeError("crash mid-write")
    assert _names(out) == ["old"] and _names(tmp_path) == ["out"]


def test_replacing_a_non_empty_directory_is_explicit(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "old").write_text("x")
    with pytest.raises(FileExistsError), atomic_dir(out) as tmp:
        (tmp / "new").write_text("y")
    assert _names(out) == ["old"] and _names(tmp_path) == ["out"]
    with atomic_dir(out, replace=True) as tmp:
        (tmp / "new").write_text("y")
    assert _names(out) == ["new"] and _names(tmp_path) == ["out"]  # the old one's trash is gone too
    (tmp_path / "empty").mkdir()
    with atomic_dir(tmp_path / "empty") as tmp:  # an empty directory is no one's work: replaced
        (tmp / "f").write_text("z")
    assert _names(tmp_path / "empty") == ["f"]


def test_a_staging_dir_left_by_a_crash_is_cleared(tmp_path):
    stale = tmp_path / ".out.tmp"
    stale.mkdir()
    (stale / "junk").write_text("from a crash")
    with atomic_dir(tmp_path / "out") as tmp:
        assert tmp == stale and _names(tmp) == []


def test_files_merge_in_with_the_weights_last(tmp_path, monkeypatch):
    target = tmp_path / "model"
    target.mkdir()
    (target / "tokenizer.json").write_text("{}")
    order = []
    real = os.replace
    monkeypatch.setattr(atomicdir.os, "replace", lambda a, b: (order.append(os.path.basename(b)), real(a, b)))
    with atomic_files(target) as tmp:
        (tmp / "model.safetensors").write_bytes(b"w")
        (tmp / "config.json").write_text("{}")
    assert order == ["config.json", "model.safetensors"]
    assert _names(target) == ["config.json", "model.safetensors", "tokenizer.json"] and _names(tmp_path) == ["model"]
    with pytest.raises(RuntimeError), atomic_files(target) as tmp:
        (tmp / "model.safetensors").write_bytes(b"half")
        raise RuntimeError("crash")
    assert (target / "model.safetensors").read_bytes() == b"w" and _names(tmp_path) == ["model"]


def test_the_sft_warm_start_cache_is_written_through_it(tmp_path):
    """The cache a later run trusts once it holds the weights: info first, the weights last, no litter."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("safetensors")
    from openforge.runner.teacher import _save_cache

    model = torch.nn.Linear(2, 2)
    _save_cache(tmp_path / "cache", model, {"key": "k"})
    assert _names(tmp_path / "cache") == ["info.json", "model.safetensors"] and _names(tmp_path) == ["cache"]
