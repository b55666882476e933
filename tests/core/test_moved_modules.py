"""The modules moved from the top of the package (into ``openforge.core``, ``openforge.util`` and
``openforge.runner``) still import under their old names, as the very module of the new name: one class
identity, one module state, and a patch through the old name reaches the code that runs."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path
from unittest import mock

import pytest

import openforge
from openforge import _MOVED

ROOT = Path(openforge.__file__).resolve().parents[1]


def test_the_table_names_every_moved_module_and_no_file_at_the_top():
    """Each old name is free at the top (no shim file) and its new name is a module."""
    for old, new in _MOVED.items():
        short = old.removeprefix("openforge.")
        assert not (ROOT / "openforge" / f"{short}.py").exists(), f"a file at the top shadows {old}"
        assert (ROOT / (new.replace(".", "/") + ".py")).is_file(), f"{old} → {new}: no such module"


@pytest.mark.parametrize("old", sorted(_MOVED))
def test_an_old_name_imports_as_the_new_module(old):
    new = importlib.import_module(_MOVED[old])
    assert importlib.import_module(old) is new
    assert sys.modules[old] is new
    assert new.__spec__.name == _MOVED[old] and new.__name__ == _MOVED[old]  # its own spec, not the alias's
    assert getattr(openforge, old.removeprefix("openforge.")) is new


def test_import_forms_give_the_same_objects():
    import openforge.trajectory as old_trajectory
    from openforge.task import Task

    import openforge.core.trajectory as core_trajectory
    from openforge.core.task import Task as NewTask
    from openforge.runner import rollout as new_rollout

    assert old_trajectory is core_trajectory
    assert Task is NewTask is openforge.Task
    assert importlib.import_module("openforge.rollout") is new_rollout
    from openforge.rollout import GroupRequest, RolloutRequest, run_groups, run_rollout

    assert (run_rollout, run_groups, RolloutRequest, GroupRequest) == (
        openforge.run_rollout, openforge.run_groups, openforge.RolloutRequest, openforge.GroupRequest)


def test_a_patch_through_the_old_name_reaches_the_real_module():
    from openforge.runner import heldout_eval

    with mock.patch("openforge.heldout_eval.before_key", return_value="patched"):
        assert heldout_eval.before_key() == "patched"
    assert heldout_eval.before_key is not None and heldout_eval.before_key.__module__ == "openforge.runner.heldout_eval"


def test_an_unknown_name_is_still_an_import_error():
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("openforge.no_such_module")
    with pytest.raises(AttributeError):
        _ = openforge.no_such_module


def test_python_m_on_an_old_name_runs_the_new_modules_code():
    """``python -m openforge.<old>`` runs the moved module's code (runpy asks the finder's loader for
    ``get_code``), with the new module's file as ``__file__``; in a fresh process, as ``-m`` runs."""
    probe = ("import runpy; g = runpy.run_module('openforge.task', run_name='__main__'); "
             "print(g['__name__'], g['__file__'], 'Task' in g)")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr
    name, file, has_task = out.stdout.split()
    assert name == "__main__" and file.endswith("openforge/core/task.py") and has_task == "True"
    out = subprocess.run([sys.executable, "-m", "openforge.task"], capture_output=True, text=True, cwd=ROOT,
                         timeout=120)
    assert out.returncode == 0, out.stderr


def test_openforge_run_stays_the_function_once_the_run_layer_is_imported():
    """The run layer's package is ``openforge.runner``, not ``openforge.run``: importing a submodule sets
    the package as an attribute of ``openforge``, which would hide the public ``openforge.run()``."""
    import openforge.runner.forge as forge

    assert openforge.run is forge.run and callable(openforge.run)
    assert openforge.runner.__name__ == "openforge.runner"
