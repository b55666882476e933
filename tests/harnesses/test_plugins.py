"""The one registry (openforge.plugins): built-ins load lazily, entry points and direct references
resolve, one shadowing rule for every kind, class lookups vs instances, unknown names listed, and a
plugin whose dependency is missing names the pip extra that installs it."""

from __future__ import annotations

import re
import subprocess
import sys
import warnings
from importlib import metadata
from pathlib import Path

import pytest

from openforge import plugins
from openforge.core.errors import ConfigError, PluginNotFound, PluginUnavailable
from openforge.plugins import (
    BACKENDS,
    ENVIRONMENTS,
    HARNESSES,
    LAUNCHERS,
    RECIPES,
    PluginShadowWarning,
    Registry,
    harness_class,
    make_environment,
)

ALL = [HARNESSES, ENVIRONMENTS, LAUNCHERS, BACKENDS, RECIPES]


def _fake_entry_points(monkeypatch, group: str, *eps: tuple[str, str]) -> None:
    found = [metadata.EntryPoint(name=n, value=v, group=group) for n, v in eps]
    monkeypatch.setattr(metadata, "entry_points", lambda group=None, **kw: [e for e in found if e.group == group])


def test_builtin_names_listed_for_every_kind():
    assert {"react", "codex", "claude-code", "openclaw", "zeroclaw", "pi", "browser-use", "computer-use"} <= set(HARNESSES.names())
    assert {"claw", "browser", "desktop"} <= set(ENVIRONMENTS.names())
    assert {"local", "kubernetes"} <= set(LAUNCHERS.names())
    assert {"scripted", "transformers", "vllm", "openai"} <= set(BACKENDS.names())
    assert {"claw-grpo", "claw-sft", "gui-grpo"} <= set(RECIPES.names())
    assert all(reg.origin(n) == "built-in" for reg in ALL for n in reg.names())


def test_unknown_name_is_a_lookup_error_listing_known():
    with pytest.raises(PluginNotFound) as ei:
        harness_class("no-such-harness")
    msg = str(ei.value)
    assert "unknown harness 'no-such-harness'" in msg and "react" in msg and "openforge.harnesses" in msg
    assert isinstance(ei.value, LookupError) and isinstance(ei.value, ConfigError)
    with pytest.raises(PluginNotFound, match="did you mean react"):
        harness_class("reactt")
    with pytest.raises(PluginNotFound, match=r"claw.*or a path to a task directory"):
        make_environment("no-such-env")


def test_class_and_instance_lookups_are_distinct():
    from openforge.envs.claw import ClawEnvironment
    from openforge.harnesses.react import ReactHarness
    from openforge.launchers.local import LocalLauncher

    assert plugins.harness_class("react") is ReactHarness and isinstance(plugins.make_harness("react"), ReactHarness)
    assert plugins.environment_class("claw") is ClawEnvironment
    assert isinstance(plugins.make_environment("claw"), ClawEnvironment)
    assert plugins.launcher_class("local") is LocalLauncher
    assert isinstance(plugins.make_launcher("local", isolation="none"), LocalLauncher)
    for old in ("get_harness", "get_environment", "get_launcher", "get_backend", "get_recipe"):
        assert not hasattr(plugins, old)  # one name per verb: no get_* meaning a class here, an instance there


def test_a_registered_object_of_the_wrong_kind_is_refused():
    reg_name = "test-not-a-harness"
    HARNESSES.register(reg_name, dict)
    try:
        with pytest.raises(ConfigError, match=r"not a subclass of openforge.harness.Harness"):
            harness_class(reg_name)
    finally:
        HARNESSES.unregister(reg_name)


def test_register_decorator_direct_ref_and_normalisation():
    reg = Registry("thing", "openforge.test-nothing")

    @reg.register("My_Thing")
    class Thing:
        pass

    assert reg.get("my-thing") is Thing and "my_thing" in reg
    assert reg.get("collections:OrderedDict").__name__ == "OrderedDict"
    assert reg.create("collections:Counter", "aab")["a"] == 2
    reg.register("broken", "openforge.no_such_module:X")
    with pytest.raises(PluginUnavailable, match="could not be loaded") as ei:
        reg.get("broken")
    assert ei.value.install is None  # the plugin's own module is missing: no extra installs that


def test_entry_point_group_is_scanned(monkeypatch):
    _fake_entry_points(monkeypatch, "openforge.test-group", ("ext-agent", "collections:deque"))
    reg = Registry("thing", "openforge.test-group")
    assert "ext-agent" in reg.names()
    assert reg.get("ext-agent").__name__ == "deque" and reg.origin("ext-agent") == "entry point"


@pytest.mark.parametrize("reg", ALL, ids=lambda r: r.kind)
def test_an_entry_point_never_shadows_a_builtin(monkeypatch, reg):
    """The shadowing rule, for every kind: a plugin claiming a built-in's name is skipped with a
    warning that names its reference; the built-in keeps the name."""
    fresh = Registry(reg.kind, reg.group, reg._builtins)
    name = fresh.names()[0]
    before = fresh.get(name)
    _fake_entry_points(monkeypatch, reg.group, (name, "collections:OrderedDict"), ("extra-one", "collections:deque"))
    fresh = Registry(reg.kind, reg.group, reg._builtins)
    with pytest.warns(PluginShadowWarning, match=f"{reg.kind} '{name}'.*'collections:OrderedDict'.*taken by the built-in"):
        names = fresh.names()
    assert "extra-one" in names and fresh.origin(name) == "built-in"
    assert fresh.get(name) == before and fresh.get("collections:OrderedDict").__name__ == "OrderedDict"


def test_registering_a_taken_name_is_an_error_unless_replace():
    reg = Registry("thing", "openforge.test-nothing", {"builtin": "collections:deque"})
    with pytest.raises(ConfigError, match=r"'Builtin' is already registered \(built-in\); pass replace=True"):
        reg.register("Builtin", dict)
    reg.register("builtin", dict, replace=True)
    assert reg.get("builtin") is dict and reg.origin("builtin") == "registered"


def test_a_registered_name_wins_over_a_folder_of_that_name(tmp_path, monkeypatch):
    """`claw` is the built-in even with a ./claw folder around (warned); `./claw` is the folder."""
    from openforge.envs.claw import ClawEnvironment
    from openforge.envs.taskdir import TaskDirEnvironment

    task = tmp_path / "claw" / "t1"
    task.mkdir(parents=True)
    (task / "task.toml").write_text('id = "t1"\n')
    (task / "instruction.md").write_text("do it")
    (task / "verify.sh").write_text("exit 0")
    monkeypatch.chdir(tmp_path)
    with pytest.warns(PluginShadowWarning, match=r"write \./claw for the folder"):
        assert isinstance(make_environment("claw"), ClawEnvironment)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        env = make_environment("./claw")
        assert isinstance(env, TaskDirEnvironment) and [t.id for t in env.tasks()] == ["t1"]
        assert plugins.environment_class(tmp_path / "claw") is TaskDirEnvironment


def _plugin_pkg(tmp_path: Path, monkeypatch, modules: dict[str, str]) -> str:
    pkg = tmp_path / "of_test_plugin"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    for name, body in modules.items():
        (pkg / f"{name}.py").write_text(body)
    monkeypatch.syspath_prepend(str(tmp_path))
    return "of_test_plugin"


def test_missing_dependency_names_the_pip_extra(tmp_path, monkeypatch):
    """A built-in whose dependency is not installed: the error says which extra of pyproject installs it."""
    mod = _plugin_pkg(tmp_path, monkeypatch, {"uses_bu": "import browser_use\nclass H: pass\n",
                                              "gone": "import browser_use_not_installed_here\n"})
    monkeypatch.setitem(sys.modules, "browser_use", None)  # `import browser_use` → ModuleNotFoundError
    reg = Registry("harness", "openforge.test-nothing", {"bu": f"{mod}.uses_bu:H", "gone": f"{mod}.gone:X"})
    with pytest.raises(PluginUnavailable) as ei:
        reg.get("bu")
    e = ei.value
    assert e.missing == "browser_use" and e.install == "pip install 'openforge-rl[browser]'"
    assert "harness 'bu' needs the module `browser_use`" in str(e) and "pip install 'openforge-rl[browser]'" in str(e)
    assert isinstance(e, ImportError) and isinstance(e, ConfigError)
    with pytest.raises(PluginUnavailable, match=r"browser_use_not_installed_here.*install the package that provides"):
        reg.get("gone")  # a module no extra provides: said so, no invented command


def test_missing_dependency_at_construction_names_the_extra(monkeypatch):
    """The same hint when the module is imported lazily, while the plugin is being built (a back-end)."""
    monkeypatch.setitem(sys.modules, "torch", None)
    reg = Registry("backend", "openforge.test-nothing", {"needs-torch": lambda arg, **kw: __import__("torch")})
    with pytest.raises(PluginUnavailable) as ei:
        reg.create("needs-torch", "x")
    assert ei.value.install == "pip install 'openforge-rl[cpu]'" and ei.value.missing == "torch"


def test_extras_are_derived_from_pyproject():
    import tomllib

    from openforge.util.extras import DISTRIBUTION, _pyproject_extras, extra_for

    extras = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert ("kubernetes", "k8s") in {(r.split(">")[0].split("=")[0].split("[")[0], e)
                                     for r, e in _pyproject_extras(DISTRIBUTION)}  # the checkout's own file is found
    assert extra_for(DISTRIBUTION, "kubernetes") == "k8s" and extra_for(DISTRIBUTION, "PIL") == "desktop"
    assert extra_for(DISTRIBUTION, "anthropic") == "desktop"  # a user-facing extra before `dev`
    assert extra_for(DISTRIBUTION, "no_such_mod") is None
    for extra, reqs in extras.items():
        if extra == "dev":
            continue
        for req in reqs:
            name = re.split(r"[<>=!~\[; ]", req, maxsplit=1)[0]  # the distribution, without extras or pins
            assert extra_for(DISTRIBUTION, name.replace("-", "_")) is not None, (extra, name)


def test_backend_specs_go_through_the_registry(monkeypatch, tmp_path):
    """`parse_backend_spec` is the registry's make_backend: a plugin kind is a valid spec."""
    from openforge.proxy.backends import parse_backend_spec

    made = []
    BACKENDS.register("test-echo", lambda arg, **kw: made.append((arg, kw)) or "backend")
    try:
        assert parse_backend_spec("test-echo:some/arg", model="m") == "backend"
        assert made == [("some/arg", {"tokenizer": None, "model": "m", "api_key": None})]
    finally:
        BACKENDS.unregister("test-echo")
    with pytest.raises(PluginNotFound, match=r"unknown backend 'nope'.*scripted"):
        parse_backend_spec("nope:x")


def test_import_plugins_stays_light():
    code = "import sys, openforge.plugins; bad=[m for m in ('torch','transformers','openai','anthropic') if m in sys.modules]; print(bad)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_the_environment_base_class_does_not_look_up():
    """``openforge.environment`` (the base class that ``envs/taskdir.py`` imports) imports neither the
    registry nor the task-dir loader, not even inside a function: the old circle stays broken."""
    import ast

    tree = ast.parse((Path(plugins.__file__).parent / "environment.py").read_text())
    imported = {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert not {m for m in imported if "plugins" in m or "envs" in m}, imported
