"""What the bwrap view binds and hides, checked on the command line it builds (no sandbox runs):
:func:`tool_dirs` binds each tool directory itself and nothing above it, hidden paths are masked
only where the view shows them (a tool inside a mask is bound again on top), ``/opt``, ``/var`` and
``/sys`` are not bound, ``ro_binds`` is a list of absolute, existing paths, and the session's
:func:`project_paths` covers the run, every store, every task and the cache."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from openforge.cli._opts import parse_options
from openforge.core.errors import ConfigError
from openforge.launchers import _bwrap
from openforge.runner.project_paths import project_paths


def _mk(*paths: Path) -> None:
    for p in paths:
        p.mkdir(parents=True, exist_ok=True)


@pytest.fixture
def readme_home(tmp_path, monkeypatch):
    """A fake home with the README's checkout: ``proj/.venv`` made from a base install, tools on PATH."""
    home = tmp_path / "home" / "u"
    proj, base = home / "proj", home / ".pyenv" / "versions" / "3.11.7"
    venv = proj / ".venv"
    _mk(venv / "bin", base / "bin", proj / "runs" / "r1", home / ".local" / "bin", home / ".local" / "share",
        home / ".cargo" / "bin", home / ".pyenv" / "shims", home / "bin")
    (base / "bin" / "python3.11").write_text("")
    (venv / "bin" / "python").symlink_to(base / "bin" / "python3.11")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setattr(sys, "prefix", str(venv))
    monkeypatch.setattr(sys, "base_prefix", str(home / ".pyenv" / "versions" / "3.11.7"))
    monkeypatch.setattr(sys, "executable", str(venv / "bin" / "python"))
    path = [home / ".local" / "bin", home / ".cargo" / "bin", home / ".pyenv" / "shims", home, "bin", "", "/usr/bin"]
    monkeypatch.setenv("PATH", os.pathsep.join(map(str, path)))
    site = venv / "lib" / "python3.11" / "site-packages"
    _mk(site)
    monkeypatch.setattr(_bwrap.sysconfig, "get_paths", lambda: {"purelib": str(site), "platlib": str(site)})
    return home, proj, venv, base, site


def test_tool_dirs_bind_each_tool_itself_never_the_checkout_or_the_home(readme_home):
    home, proj, venv, base, _ = readme_home
    dirs = _bwrap.tool_dirs()
    assert str(venv) in dirs and str(base) in dirs
    assert str(home / ".local" / "bin") in dirs and str(home / ".cargo" / "bin") in dirs
    for above in (proj, home, home / ".local", home / ".cargo", home / ".pyenv", home.parent):
        assert str(above) not in dirs, above
    assert str(home / ".pyenv" / "shims") not in dirs  # its scripts run pyenv from a root that is not bound
    assert not any(not os.path.isabs(d) for d in dirs)  # "bin" (relative) and "" are no tools
    assert not any(d == "/usr/bin" or d.startswith("/usr/") for d in dirs)  # system dirs: bound as such


def test_tool_dirs_bind_editable_installs_narrowly(readme_home, tmp_path):
    """A setuptools editable finder's mapped package, and the package dirs of a ``.pth`` path line:
    never the checkouts around them."""
    _, _, _, _, site = readme_home
    other, flat = tmp_path / "other", tmp_path / "flat"
    _mk(other / "src" / "pkg", other / "runs", flat / "lib2", flat / "runs", flat / "docs")
    (flat / "lib2" / "__init__.py").write_text("")
    (site / "__editable___pkg_0_1_finder.py").write_text(f"MAPPING = {{'pkg': {str(other / 'src' / 'pkg')!r}}}\n")
    (site / "flat.pth").write_text(f"{flat}\nimport os\n")
    dirs = _bwrap.tool_dirs()
    assert str(other / "src" / "pkg") in dirs and str(flat / "lib2") in dirs
    for outside in (other, other / "src", other / "runs", flat, flat / "runs", flat / "docs"):
        assert str(outside) not in dirs, outside


def test_tool_dirs_read_the_finder_setuptools_writes(readme_home, tmp_path):
    """setuptools writes the finder's mapping annotated (``MAPPING: dict[str, str] = {...}``)."""
    site = readme_home[4]
    pkg = tmp_path / "other" / "src" / "pkg"
    _mk(pkg)
    (site / "__editable___pkg_0_1_finder.py").write_text(f"MAPPING: dict[str, str] = {{'pkg': {str(pkg)!r}}}\n")
    assert str(pkg) in _bwrap.tool_dirs()


@pytest.mark.parametrize("form", ["pth", "finder"])
def test_an_editable_install_holding_environment_code_is_not_bound(readme_home, tmp_path, form):
    """The user's project installed editable, its environment's module hidden: the package is not
    bound at all (never bound whole with the module masked: its other modules hold answers too);
    another editable install stays; a bind the user names still shows it, the module masked."""
    site = readme_home[4]
    src, lib = tmp_path / "proj" / "src", tmp_path / "lib"
    _mk(src / "myproj", lib / "helper")
    for init in (src / "myproj" / "__init__.py", lib / "helper" / "__init__.py"):
        init.write_text("")
    (src / "myproj" / "env.py").write_text('ANSWER = "42"\n')
    (src / "myproj" / "answers.py").write_text('ANSWER = "42"\n')
    if form == "pth":
        (site / "__editable__.myproj-0.1.pth").write_text(f"{src}\n")
    else:
        (site / "__editable___myproj_0_1_finder.py").write_text(
            f"MAPPING: dict[str, str] = {{'myproj': {str(src / 'myproj')!r}}}\n")
    (site / "helper.pth").write_text(f"{lib}\n")
    hidden = [str(src / "myproj" / "env.py")]
    assert _bwrap.unshown_projects(hidden) == {str(src / "myproj")}
    assert _bwrap.unshown_projects([str(src)]) == {str(src / "myproj")}  # inside a hidden folder: not bound on top
    argv = _bwrap._view([], hidden, [])
    binds = [dst for _, dst in _pairs(argv, "--ro-bind")]
    assert not any(b.startswith(str(src)) for b in binds), binds
    assert str(lib / "helper") in binds
    assert str(src / "myproj" / "env.py") not in argv  # nothing names it: not in the view at all
    argv = _bwrap._view([str(src / "myproj")], hidden, [])
    assert (str(src / "myproj"), str(src / "myproj")) in _pairs(argv, "--ro-bind")
    assert ("/dev/null", str(src / "myproj" / "env.py")) in _pairs(argv, "--ro-bind")


def _pairs(argv: list[str], flag: str) -> list[tuple[str, str]]:
    return [(argv[i + 1], argv[i + 2]) for i, a in enumerate(argv) if a == flag]


def _tmpfs(argv: list[str]) -> list[str]:
    return [argv[i + 1] for i, a in enumerate(argv) if a == "--tmpfs"]


def test_view_binds_no_opt_var_or_sys(monkeypatch):
    monkeypatch.setattr(_bwrap, "tool_dirs", lambda: [])
    argv = _bwrap._view([], [], [])
    binds = [dst for _, dst in _pairs(argv, "--ro-bind")]
    for d in ("/opt", "/var", "/sys"):
        assert not any(b == d or b.startswith(d + "/") for b in binds), (d, binds)
    assert "/var/tmp" in _tmpfs(argv)  # /var is an empty skeleton with its scratch dir


def test_hidden_paths_are_masked_only_where_the_view_shows_them(tmp_path, monkeypatch):
    tool, project = tmp_path / "tools", tmp_path / "project"
    _mk(tool / "runs" / "r1", tool / "pkg", project / "tasks" / "t1")
    monkeypatch.setattr(_bwrap, "tool_dirs", lambda: [str(tool)])
    argv = _bwrap._view([], [str(tool / "runs"), str(project / "tasks" / "t1"), str(tmp_path / "absent")], [])
    # inside a bound dir: masked; elsewhere: not in the view, and no mount names it in mountinfo
    assert _tmpfs(argv).count(str(tool / "runs")) == 1
    assert str(project / "tasks" / "t1") not in argv and str(tmp_path / "absent") not in argv


def test_a_tool_inside_a_masked_dir_is_bound_again_on_top(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    _mk(cache / "harnesses" / "pi", cache / "sft" / "k")
    monkeypatch.setattr(_bwrap, "tool_dirs", lambda: [])
    # the cache bound by a user and hidden by the session; the harness install inside it bound as a tool
    argv = _bwrap._view([str(cache), str(cache / "harnesses" / "pi")], [str(cache)], [])
    mask = next(i for i, a in enumerate(argv) if a == "--tmpfs" and argv[i + 1] == str(cache))
    rebinds = [i for i, a in enumerate(argv) if a == "--ro-bind" and argv[i + 2] == str(cache / "harnesses" / "pi")]
    assert rebinds and max(rebinds) > mask, argv


def test_ro_binds_string_is_one_path_never_its_characters(tmp_path):
    tools = tmp_path / "tools"
    _mk(tools, tmp_path / "more")
    opts = parse_options([f"ro_binds={tools}"], "--launcher-opt", typed=False)  # how `forge rollout` passes it
    assert _bwrap.ro_bind_list(opts["ro_binds"]) == [str(tools)]
    assert _bwrap.ro_bind_list(f"{tools},{tmp_path / 'more'}") == [str(tools), str(tmp_path / "more")]
    assert _bwrap.ro_bind_list([str(tools), tools]) == [str(tools)]
    assert _bwrap.ro_bind_list(None) == [] and _bwrap.ro_bind_list(()) == []


@pytest.mark.parametrize("bad, says", [("relative/dir", "not an absolute path"), ("/no/such/dir-xyz", "does not exist"),
                                       ("/", "whole file system"), ([3], "not a path")])
def test_ro_binds_bad_entries_are_a_config_error(bad, says):
    with pytest.raises(ConfigError, match=says):
        _bwrap.ro_bind_list(bad)


def test_local_launcher_takes_ro_binds_as_a_string(tmp_path):
    from openforge.launchers.local import LocalLauncher

    tools = tmp_path / "tools"
    _mk(tools)
    la = LocalLauncher(base_dir=tmp_path / "sbx", isolation="none", ro_binds=str(tools))
    assert la.ro_binds == [str(tools)]
    with pytest.raises(ConfigError, match="ro_binds"):
        LocalLauncher(base_dir=tmp_path / "sbx", isolation="none", ro_binds="opt/tools")


class _Env:
    """Two task folders under one root (the shape of a task-dir environment)."""

    def __init__(self, root: Path):
        self.root = root

    def tasks(self, split=None):
        return ["a", "b"]

    def hidden_paths(self, task):
        return [str(self.root / task)]

    def source_paths(self):
        return []


def test_project_paths_cover_run_stores_every_task_and_the_cache(tmp_path):
    runs, tasks, cache = tmp_path / "runs", tmp_path / "tasks", tmp_path / "cache"
    _mk(runs / "r1", runs / "old", runs / "notes", tasks / "a", tasks / "b", cache)
    (runs / "old" / "trajectories.db").write_text("")
    out = project_paths(store=runs / "r1" / "trajectories.db", environment=_Env(tasks), extra=[cache])  # type: ignore[arg-type]
    for p in (runs / "r1" / "trajectories.db", runs / "r1", runs / "old", tasks / "a", tasks / "b", tasks, cache):
        assert str(p) in out, p
    assert str(runs / "notes") not in out and str(tmp_path) not in out


class _OneFolderEnv(_Env):
    """Every task hides the same folder (the built-in environments' checks)."""

    def hidden_paths(self, task):
        return [str(self.root)]


def test_one_folder_hidden_by_every_task_is_not_a_task_root(tmp_path):
    pkg = tmp_path / "pkg"
    _mk(pkg / "envs", pkg / "launchers")
    assert project_paths(store=None, environment=_OneFolderEnv(pkg / "envs")) == [str(pkg / "envs")]  # type: ignore[arg-type]
