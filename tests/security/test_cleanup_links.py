"""The cleanup of an agent-made tree (``_reaper.remove_tree``, run after every command on that command's
scratch directory, and on the whole rollout at close) never changes a file outside it. Its one write
besides unlinking is making an agent's ``000`` directory enterable (a normal-user driver owns it), and
the agent can swap that directory for a link between the failed open and the fix: the fix must land on
the directory it could not open, never on what a link names. The race is forced here by swapping at the
moment the open is refused."""

from __future__ import annotations

import os
import stat

import pytest

from openforge.launchers import _reaper


@pytest.fixture
def refused_once(monkeypatch):
    """``os.open`` in the reaper refuses the first open of the directory ``locked`` as a 000 directory
    would, after running ``on_refusal`` (the agent's move, made in the window)."""
    real_open = os.open
    state = {"refused": False, "on_refusal": lambda: None}

    def fake_open(path, flags, *args, **kw):
        if flags == _reaper._DIR and path == "locked" and not state["refused"]:
            state["refused"] = True
            state["on_refusal"]()
            raise PermissionError(13, "Permission denied", path)
        return real_open(path, flags, *args, **kw)

    monkeypatch.setattr(_reaper.os, "open", fake_open)
    return state


def test_a_link_swapped_in_after_a_refused_open_is_never_chmodded(tmp_path, refused_once):
    victim = tmp_path / "host-dir"  # a directory of the driver's, outside the tree
    victim.mkdir(mode=0o755)
    victim.chmod(0o755)
    tree = tmp_path / "rollout"
    (tree / "locked").mkdir(parents=True)

    def swap() -> None:
        (tree / "locked").rmdir()
        (tree / "locked").symlink_to(victim)

    refused_once["on_refusal"] = swap
    assert _reaper.remove_tree(str(tree))
    assert refused_once["refused"]
    assert stat.S_IMODE(victim.stat().st_mode) == 0o755  # by name, the chmod followed the link: 0o700
    assert victim.is_dir() and not tree.exists()


def test_a_directory_it_could_not_open_is_made_enterable_and_removed(tmp_path, refused_once):
    tree = tmp_path / "rollout"
    (tree / "locked" / "deeper").mkdir(parents=True)
    (tree / "locked" / "deeper" / "f").write_text("x")
    assert _reaper.remove_tree(str(tree))
    assert refused_once["refused"] and not tree.exists()
