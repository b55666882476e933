"""Cache keys hold the content of what shapes a cached result (:mod:`openforge.runner.content_hash`), not
openforge's fixed ``__version__``: a changed harness prompt, renderer, outcome rule, plug-in harness or
task verifier measures the held-out point again (and trains the warm-start again); a change elsewhere
(the command line, the trainer for a ``before`` point) keeps the cached one."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from rich.console import Console

from openforge.envs.claw import ClawEnvironment
from openforge.envs.taskdir import TaskDirEnvironment
from openforge.recipes import load_recipe_config
from openforge.runner import content_hash, heldout_eval
from openforge.runner.heldout_eval import before_key, heldout_before
from openforge.runner.teacher import warm_start_key

CLAW = ClawEnvironment()
CLAW_TASKS = CLAW.tasks("train")[:2]


def _cfg(tmp_path: Path, *overrides: str):
    return load_recipe_config("claw-grpo", overrides=[f"cache_dir={tmp_path / 'cache'}", *overrides])


def _taskdir(root: Path) -> Path:
    d = root / "tasks" / "hello"
    d.mkdir(parents=True)
    (d / "task.toml").write_text('id = "hello"\nsplit = "heldout"\n')
    (d / "instruction.md").write_text("Create hello.txt.")
    (d / "verify.py").write_text('import json, os\nprint(json.dumps({"reward": float(os.path.exists("hello.txt"))}))\n')
    return root / "tasks"


@pytest.fixture(scope="module")
def package_copies(tmp_path_factory):
    """Copies of the openforge package, each with one file changed (``None``: unchanged)."""
    root = tmp_path_factory.mktemp("pkgs")

    def copy(name: str, rel: str | None) -> Path:
        dest = root / name.replace("/", "_") / "openforge"
        if dest.is_dir():
            return dest
        shutil.copytree(content_hash.OPENFORGE_ROOT, dest, ignore=shutil.ignore_patterns("__pycache__"))
        if rel:
            with (dest / rel).open("a") as f:
                f.write("\n# changed\n")
        return dest

    return copy


@pytest.fixture
def keys(monkeypatch, tmp_path, package_copies):
    """The before and warm-start keys of one run, with openforge's code read from a changed copy."""

    def of(changed: str | None) -> tuple[str, str]:
        monkeypatch.setattr(content_hash, "OPENFORGE_ROOT", package_copies(changed or "same", changed))
        cfg = _cfg(tmp_path)
        return (before_key(cfg, CLAW_TASKS, backend="B", env=CLAW), warm_start_key(cfg, CLAW, CLAW_TASKS))

    return of


# the module that shapes a point → whether it shapes the before point, the warm-start
SHAPING = {
    "harnesses/react.py": (True, True),  # the harness's prompt
    "proxy/render.py": (True, True),  # the chat template rendering
    "proxy/templates/hermes.jinja": (True, True),
    "core/outcome.py": (True, True),  # outcome rules
    "runner/rollout.py": (True, True),  # how a rollout runs
    "envs/claw/credit.py": (True, True),  # the environment's checks and partial credit
    "train/sft.py": (False, True),  # the SFT steps: the warm-start's, not the untrained model's
    "runner/teacher.py": (False, True),  # a file inside a folder excluded for one scope only
    "runner/task_cursor.py": (False, False),  # the GRPO step's own: which tasks come next
    "cli/export.py": (False, False),  # unrelated: the command line
    "devtools/archmap.py": (False, False),
}


@pytest.mark.parametrize("rel", list(SHAPING))
def test_a_changed_module_changes_the_keys_it_shapes_and_no_other(keys, rel):
    base_before, base_warm = keys(None)
    before, warm = keys(rel)
    assert (before != base_before, warm != base_warm) == SHAPING[rel]


def test_openforges_own_classes_are_counted_only_by_scope():
    """A built-in harness or environment adds nothing to the key beyond its scope's code: a change to the
    command line does not come back in through ``Harness``'s module being in the package's top folder."""
    from openforge.environment import Environment
    from openforge.harness import Harness
    from openforge.plugins import environment_class, harness_class

    nothing = content_hash.path_digest([])
    assert content_hash.classes_digest([harness_class(n) for n in ("react", "pi", "codex")], Harness) == nothing
    assert content_hash.classes_digest([environment_class("claw"), TaskDirEnvironment], Environment) == nothing


def test_a_plugin_harness_is_keyed_by_its_package_prompt_files_included(tmp_path, monkeypatch):
    pkg = tmp_path / "plug" / "cachekey_harness"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(
        "from pathlib import Path\nfrom openforge.harnesses.react import ReactHarness\n\n"
        "class MyHarness(ReactHarness):\n    prompt = (Path(__file__).parent / 'prompt.md').read_text()\n")
    (pkg / "prompt.md").write_text("Be brief.")
    monkeypatch.syspath_prepend(str(tmp_path / "plug"))
    monkeypatch.delitem(sys.modules, "cachekey_harness", raising=False)
    cfg = _cfg(tmp_path, "harness.name=cachekey_harness:MyHarness")

    def key() -> str:
        return before_key(cfg, CLAW_TASKS, backend="B", env=CLAW)

    first = key()
    (pkg / "prompt.md").write_text("Be thorough.")  # the harness's prompt file
    assert key() != first


def test_a_task_directorys_verifier_is_in_the_key(tmp_path):
    env = TaskDirEnvironment(_taskdir(tmp_path))
    cfg = _cfg(tmp_path, f"env.name={tmp_path / 'tasks'}")
    first = before_key(cfg, env.tasks(), backend="B", env=env)
    assert before_key(cfg, env.tasks(), backend="B", env=env) == first  # deterministic
    (tmp_path / "tasks" / "hello" / "verify.py").write_text('print(\'{"reward": 1.0}\')\n')
    assert before_key(cfg, env.tasks(), backend="B", env=env) != first


def test_a_fifo_in_a_task_directory_is_never_opened(tmp_path):
    import os
    import signal

    env = TaskDirEnvironment(_taskdir(tmp_path))
    os.mkfifo(tmp_path / "tasks" / "hello" / "answers.fifo")  # reading it would block the run's start forever

    class Hung(Exception):  # not an OSError: nothing on the way may swallow it
        pass

    def hung(*_):
        raise Hung("the key opened a FIFO")

    old = signal.signal(signal.SIGALRM, hung)
    signal.alarm(10)
    try:
        assert before_key(_cfg(tmp_path), env.tasks(), backend="B", env=env)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def test_every_field_of_a_task_is_in_the_key(tmp_path):
    cfg = _cfg(tmp_path)
    task = CLAW_TASKS[0]
    moved = task.model_copy(update={"metadata": {**task.metadata, "expected": "something else"}})
    assert before_key(cfg, [moved, *CLAW_TASKS[1:]], backend="B", env=CLAW) != \
        before_key(cfg, CLAW_TASKS, backend="B", env=CLAW)


def test_the_warm_starts_own_inputs_are_keyed_by_content(tmp_path):
    data = tmp_path / "sft.jsonl"
    data.write_text('{"input_ids": [1], "loss_mask": [1]}\n')
    model = tmp_path / "model"
    model.mkdir()
    (model / "model.safetensors").write_bytes(b"x")

    def key(*o: str) -> str:
        return warm_start_key(_cfg(tmp_path, *o), CLAW, CLAW_TASKS)

    with_data = key(f"sft.data={data}")
    local = key(f"model.name={model}")
    data.write_text('{"input_ids": [2], "loss_mask": [1]}\n')  # re-exported in place
    (model / "model.safetensors").write_bytes(b"yy")  # retrained in place
    assert key(f"sft.data={data}") != with_data and key(f"model.name={model}") != local


async def test_a_stale_cached_point_is_not_reused(monkeypatch, tmp_path):
    """A clean ``before`` is cached; the task's verifier changes; the next run measures again."""
    calls: list[str] = []

    async def run_point(forge, tasks, point, *, label, **_):
        calls.append(forge.run_dir.name)
        out = {"point": point, "label": label, "per_harness": {"react": {
            "successes": 1, "trials": 1, "infra_failures": 0, "outcomes": {"hello": [1]}}}}
        d = forge.run_dir / "heldout" / point
        d.mkdir(parents=True)
        (d / "heldout.json").write_text(json.dumps(out))
        return out

    monkeypatch.setattr(heldout_eval, "run_point", run_point)
    env = TaskDirEnvironment(_taskdir(tmp_path))

    async def run(name: str) -> dict:
        forge = SimpleNamespace(cfg=_cfg(tmp_path, f"env.name={tmp_path / 'tasks'}"), run_dir=tmp_path / name,
                                console=Console(quiet=True), backend=object(), env=env)
        return (await heldout_before(forge, env.tasks()))["before"]

    await run("one")
    assert (await run("two"))["label"] == "start, cached"  # the same thing: reused
    (tmp_path / "tasks" / "hello" / "verify.py").write_text('print(\'{"reward": 1.0}\')\n')  # another verdict
    assert (await run("three"))["label"] == "start"
    assert calls == ["one", "three"]


_KEY_SCRIPT = """
import sys
from openforge.envs.claw import ClawEnvironment
from openforge.runner.heldout_eval import before_key
from openforge.recipes import load_recipe_config
import openforge
assert openforge.__file__.startswith(sys.argv[1]), openforge.__file__
env = ClawEnvironment()
print(before_key(load_recipe_config("claw-grpo"), env.tasks("train")[:2], backend="B", env=env))
"""


def test_an_installed_copy_keys_by_its_own_content(tmp_path):
    """The whole path, as installed: a process importing a copy of openforge with one file changed."""
    import subprocess

    def key(name: str, rel: str | None) -> str:
        root = tmp_path / name
        shutil.copytree(content_hash.OPENFORGE_ROOT, root / "openforge", ignore=shutil.ignore_patterns("__pycache__"))
        if rel:
            with (root / "openforge" / rel).open("a") as f:
                f.write("\n# changed\n")
        out = subprocess.run([sys.executable, "-c", _KEY_SCRIPT, str(root)], capture_output=True, text=True, cwd=root,
                             env={**__import__("os").environ, "PYTHONPATH": str(root)}, timeout=300, check=True)
        return out.stdout.strip().splitlines()[-1]

    base = key("same", None)
    assert key("cli", "cli/main.py") == base  # the command line shapes no point
    assert key("render", "proxy/render.py") != base
