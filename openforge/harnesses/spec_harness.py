"""The harness class a spec file declares: :class:`SpecHarness` and :func:`spec_harness_class`.

Owns: turning a :class:`~openforge.harnesses.spec.HarnessSpec` into a
:class:`~openforge.harnesses.cli.CliHarness` subclass (one class per spec file, cached by its path
and content), the spec's install (npm ``--prefix`` or a venv, pinned, into the harness cache under
the spec's name), finding its executable, filling its templates from the rollout context, and reading
its final answer. ``harness.name=path/to/spec.yaml`` reaches it through
:func:`openforge.plugins.harness_class`.

The class gets a module of its own (``openforge_spec_<hash>``, whose ``__file__`` is the spec file),
so the run's content hash counts the spec and the files beside it, as it does a Python harness's.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import types
from pathlib import Path
from typing import Any, ClassVar

from ..core.errors import ConfigError, HarnessError, HarnessNotInstalled
from ..harness import RolloutContext
from . import installer
from .cli import CliHarness, last_json_event
from .spec import FinalJsonl, HarnessSpec, load_spec, render

__all__ = ["SpecHarness", "spec_harness_class"]

_CLASSES: dict[tuple[str, str], type[SpecHarness]] = {}


def _dig(obj: Any, dotted: str) -> Any:
    for key in dotted.split("."):
        if not isinstance(obj, dict) or key not in obj:
            return None
        obj = obj[key]
    return obj


class SpecHarness(CliHarness):
    """A CLI harness run exactly as its spec says. Options: ``wire_api`` (one of the spec's
    ``wires``), and the :class:`CliHarness` ones (``binary``, ``extra_args``, ``env``)."""

    spec: ClassVar[HarnessSpec]

    def __init__(self, *, wire_api: str | None = None, **kw: Any):
        super().__init__(**kw)
        spec = type(self).spec
        wire = wire_api or spec.wire
        if wire not in spec.wires:
            raise ConfigError(f"{spec.name}: wire_api must be one of {', '.join(spec.wires)} (its spec's "
                              f"wires), not {wire!r}")
        self.wire_api = wire  # type: ignore[misc]

    # -- install and lookup ----------------------------------------------------------------------
    def _install_root(self) -> Path:
        return installer.cache_dir() / self.name

    def _cached_executable(self) -> Path | None:
        inst = self.spec.install
        if inst is None:
            return None
        root = self._install_root()
        exe = root / "node_modules" / ".bin" / inst.executable if inst.npm else root / "venv" / "bin" / inst.executable
        return exe if exe.exists() else None

    def resolve_executable(self) -> str:
        local = self.spec.local_executable()
        if local is not None and not self.binary and not os.environ.get(self.bin_env_var):
            if local.is_file() and os.access(local, os.X_OK):
                return str(local)
            raise HarnessNotInstalled(f"{self.name}: executable {local} (from {self.spec.spec_path}) is not an "
                                      f"executable file")
        for source, path in (("binary=", self.binary), (f"${self.bin_env_var}", os.environ.get(self.bin_env_var)),
                             ("cache", self._cached_executable()),
                             ("PATH", shutil.which(self.executable) if self.executable else None)):
            if path and Path(path).is_file() and os.access(path, os.X_OK):
                return str(path)
            if path and source in ("binary=", f"${self.bin_env_var}"):  # what the user named: never passed over
                raise HarnessNotInstalled(f"{self.name}: {source} points to {path}, which is not an executable file")
        raise HarnessNotInstalled(f"{self.name} CLI `{self.executable}` not found (looked in ${self.bin_env_var}, "
                                  f"{self._install_root()} and PATH); install it with: {self.install_hint}")

    def node_path_dirs(self) -> list[str]:
        inst = self.spec.install
        if inst is None or not inst.npm:
            return []
        sysv = installer.system_node_version()
        if sysv is not None and sysv >= inst.min_node_tuple:
            return []
        nb = installer.node_bin_dir()
        if (nb / "node").exists():
            return [str(nb)]
        raise HarnessNotInstalled(f"{self.name} needs Node.js >= {inst.min_node}; run `forge harness install node`")

    def ro_paths(self) -> list[str]:
        """The install (the cache folder, or the executable's folder), the Node it needs, the
        interpreter when a template runs ``{python}``, and the spec's ``paths``."""
        out: list[str] = []
        try:
            exe = Path(self.resolve_executable()).resolve()
            cache = installer.cache_dir().resolve()
            out.append(str(cache / self.name if exe.is_relative_to(cache) else exe.parent))
            out += [str(Path(d).parent.parent) for d in self.node_path_dirs()]
        except HarnessNotInstalled:
            pass
        if any("{python" in arg for arg in self.spec.command):
            out += sorted({sys.prefix, sys.base_prefix})
        out += [str(self.spec.resolve(p)) for p in self.spec.paths]
        return list(dict.fromkeys(out))

    def check_installed(self) -> None:
        self.resolve_executable()
        self.node_path_dirs()
        missing = [p for p in self.spec.paths if not self.spec.resolve(p).exists()]
        if missing:
            raise HarnessNotInstalled(f"{self.name}: paths of its spec do not exist: {', '.join(missing)}")

    def install(self, *, force: bool = False) -> str:
        inst = self.spec.install
        if inst is None:
            self.check_installed()
            return f"{self.name}: nothing to install ({self.location()})"
        if not force and self._cached_executable() and self.version() == inst.version:
            return f"{inst.requirement} already installed at {self._cached_executable()}"
        return _install(self.name, self.spec, self._install_root())

    def version(self) -> str | None:
        """The declared version (what notes and the matrix are keyed by)."""
        return self.spec.version

    def location(self) -> str:
        return f"{self.resolve_executable()} (spec {self.spec.spec_path or '(inline)'})"

    # -- the run ------------------------------------------------------------------------------------
    def values(self, ctx: RolloutContext, exe: str) -> dict[str, str]:
        base = {"messages": ctx.anthropic_base_url, "gemini": ctx.gemini_base_url}.get(self.wire_api,
                                                                                      ctx.openai_base_url)
        return {"exe": exe, "python": sys.executable, "spec_dir": str(self.spec.spec_dir),
                "instruction": ctx.instruction, "model": ctx.model, "api_key": ctx.api_key, "base_url": base,
                "openai_base_url": ctx.openai_base_url, "anthropic_base_url": ctx.anthropic_base_url,
                "gemini_base_url": ctx.gemini_base_url, "home": str(ctx.home), "workdir": str(ctx.workdir), "rollout_id": ctx.rollout_id,
                "wire": self.wire_api, "wire_name": self.spec.wire_names.get(self.wire_api, self.wire_api)}

    def config_files(self, ctx: RolloutContext) -> dict[str, str]:
        values = self.values(ctx, "")
        return {rel: render(text, values) for rel, text in self.spec.files.items()}

    def environment(self, ctx: RolloutContext) -> dict[str, str]:
        values = self.values(ctx, "")
        return {key: render(text, values) for key, text in self.spec.env.items()}

    def command(self, ctx: RolloutContext, exe: str) -> list[str]:
        values = self.values(ctx, exe)
        argv: list[str] = []
        extra_at = None
        for arg in self.spec.command:
            if arg == "{extra_args}":
                extra_at = len(argv)
                continue
            if extra_at is None and "{instruction" in arg:
                extra_at = len(argv)
            argv.append(render(arg, values))
        at = len(argv) if extra_at is None else extra_at
        return [*argv[:at], *self.extra_args, *argv[at:]]

    def final_text(self, stdout: str) -> str | None:
        final = self.spec.final
        if final == "stdout":
            return stdout.strip() or None
        if isinstance(final, FinalJsonl):
            def pick(ev: dict[str, Any]) -> Any:
                if all(_dig(ev, k) == v for k, v in final.where.items()):
                    value = _dig(ev, final.jsonl)
                    return None if value is None else str(value)
                return None

            return last_json_event(stdout, pick)
        return super().final_text(stdout)


def _install(name: str, spec: HarnessSpec, root: Path) -> str:
    inst = spec.install
    assert inst is not None
    root.mkdir(parents=True, exist_ok=True)
    if inst.npm:
        npm = shutil.which("npm")
        if not npm:
            raise HarnessNotInstalled("npm is not on PATH (install Node.js and npm, e.g. `apt-get install npm`)")
        env = dict(os.environ)
        sysv = installer.system_node_version()
        if sysv is None or sysv < inst.min_node_tuple:
            env["PATH"] = os.pathsep.join([str(installer.install("node")).split(" at ", 1)[-1], env.get("PATH", "")])
        with tempfile.TemporaryDirectory() as cwd:
            _run([npm, "install", "--silent", "--no-fund", "--no-audit", "--prefix", str(root), inst.requirement],
                 cwd=Path(cwd), env=env, what=f"npm install {inst.requirement}")
        exe = root / "node_modules" / ".bin" / inst.executable
    else:
        venv = root / "venv"
        if not (venv / "bin" / "python").exists():
            _run([sys.executable, "-m", "venv", str(venv)], cwd=root, what=f"create a venv at {venv}")
        _run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check",
              inst.requirement], cwd=root, what=f"pip install {inst.requirement}")
        exe = venv / "bin" / inst.executable
    if not exe.exists():
        raise HarnessError(f"{inst.requirement} installed, but its executable {inst.executable} is missing ({exe})")
    return f"{inst.requirement} installed at {exe}"


def _run(argv: list[str], *, cwd: Path, env: dict[str, str] | None = None, what: str) -> None:
    res = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=1800)
    if res.returncode != 0:
        raise HarnessError(f"failed to {what} (exit {res.returncode}): {(res.stderr or res.stdout).strip()[-1500:]}")


def spec_harness_class(path: str | Path) -> type[SpecHarness]:
    """The harness class declared by the spec file at ``path`` (one per file and content)."""
    p = Path(path).expanduser().resolve()
    if not p.is_file():
        raise ConfigError(f"harness spec {path}: no such file")
    digest = hashlib.sha256(p.read_bytes()).hexdigest()[:16]
    key = (str(p), digest)
    if key in _CLASSES:
        return _CLASSES[key]
    spec = load_spec(p)
    return _make_class(spec, f"openforge_spec_{digest}", str(p), key)


#: Built-in harnesses declared by a spec file in ``openforge/harnesses/specs/``.
SPECS_DIR = Path(__file__).resolve().parent / "specs"


def builtin_spec_class(name: str) -> type[SpecHarness]:
    """The class of built-in harness ``name``, declared by ``specs/<name>.yaml``."""
    cls = spec_harness_class(SPECS_DIR / f"{name}.yaml")
    inst = cls.spec.install
    if inst is not None:  # installed by name, like every built-in
        cls.install_hint = f"forge harness install {name}  ({'npm' if inst.npm else 'pip'} install {inst.requirement})"
    return cls


def _make_class(spec: HarnessSpec, module_name: str, file: str, key: tuple[str, str]) -> type[SpecHarness]:
    module = sys.modules.get(module_name)
    if module is None:
        module = types.ModuleType(module_name, f"harness spec {file}")
        module.__file__ = file
        module.__package__ = ""
        sys.modules[module_name] = module
    inst = spec.install
    hint = (f"forge harness install {file}  ({'npm install' if inst.npm else 'pip install'} {inst.requirement})"
            if inst else f"make {spec.executable} executable (spec {file})")
    attrs = {"spec": spec, "name": spec.name, "wire_api": spec.wire, "__module__": module_name,
             "wire_apis": tuple(spec.wires) if len(spec.wires) > 1 else (),
             "executable": inst.executable if inst else Path(spec.executable or "").name,
             "install_hint": hint, "agent_files": (), "__doc__": spec.description or f"harness spec {file}"}
    cls = type(f"SpecHarness_{spec.name.replace('-', '_').replace('.', '_')}", (SpecHarness,), attrs)
    setattr(module, cls.__name__, cls)
    _CLASSES[key] = cls
    return cls
