"""Reading one Harbor task directory (``task.toml`` + ``instruction.md`` + ``environment/`` + ``tests/`` +
``solution/``) into a :class:`Task`, without the ``harbor`` package.

Owns: :func:`is_harbor_task_dir`, :func:`load_harbor_task`, :class:`HarborSpec` (what the Harbor runner
reads back from ``task.metadata["harbor"]``: :func:`harbor_spec`).

``task.toml`` follows Harbor's schema (``[metadata]``, ``[agent]``, ``[verifier]``, ``[environment]``,
``[solution]``): unknown keys are ignored (the schema grows), a known key of the wrong type is an error
naming the file, the key and what it should be. What maps where:

* ``[agent].timeout_sec`` → ``timeout_s`` (600 when unset); ``[verifier].timeout_sec`` → the verifier's
  budget (600); ``[environment].build_timeout_sec`` → ``setup_timeout_s`` (600);
* ``[environment]`` ``cpus`` / ``memory_mb`` / ``storage_mb`` → ``resources`` (``cpu``, ``memory_mb``,
  ``disk_mb``); ``docker_image`` → ``image``; ``gpus > 0`` is refused locally;
* ``[verifier].env`` (verifier only), ``[environment].env`` (everything; ``${VAR}`` and
  ``${VAR:-default}`` read from the driver's environment), ``[solution].env`` (the oracle);
* ``allow_internet`` / ``network_mode``: recorded; openforge's sandboxes have no internet either way
  (``no-network`` is guaranteed, ``public`` is not granted: docs/harbor.md);
* ``[agent].user`` / ``[verifier].user``: recorded; locally everything runs as the sandbox's one
  unprivileged user, on Kubernetes as the image's user.
* ``[metadata]`` ``split`` (``train`` | ``eval`` | ``heldout``, default ``train``) and ``category``.
"""

from __future__ import annotations

import os
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

from ..core.errors import ConfigError
from ..core.task import Resources, Task
from .harbor_dockerfile import Unsupported, parse_dockerfile

__all__ = ["HarborSpec", "harbor_spec", "is_harbor_task_dir", "load_harbor_task"]

_NUM = (int, float)
#: (section, key) -> (accepted types, what to write)
_TYPES: dict[tuple[str, str], tuple[tuple[type, ...], str]] = {
    ("agent", "timeout_sec"): (_NUM, "a number of seconds"),
    ("agent", "user"): ((str, int), "a user name or uid"),
    ("verifier", "timeout_sec"): (_NUM, "a number of seconds"),
    ("verifier", "user"): ((str, int), "a user name or uid"),
    ("verifier", "env"): ((dict,), "a table of strings"),
    ("solution", "env"): ((dict,), "a table of strings"),
    ("environment", "env"): ((dict,), "a table of strings"),
    ("environment", "build_timeout_sec"): (_NUM, "a number of seconds"),
    ("environment", "docker_image"): ((str,), "an image name"),
    ("environment", "cpus"): (_NUM, "a number of CPUs"),
    ("environment", "memory_mb"): ((int,), "an integer (MB)"),
    ("environment", "storage_mb"): ((int,), "an integer (MB)"),
    ("environment", "gpus"): ((int,), "an integer"),
    ("environment", "allow_internet"): ((bool,), "true or false"),
    ("environment", "network_mode"): ((str,), '"public", "no-network" or "allowlist"'),
    ("environment", "workdir"): ((str,), "an absolute path"),
    ("metadata", "split"): ((str,), '"train", "eval" or "heldout"'),
    ("metadata", "category"): ((str,), "a string"),
}
_SECTIONS = ("agent", "verifier", "environment", "solution", "metadata")
_TEMPLATE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
_CANARY = re.compile(r"\A\s*<!--.*?-->\s*", re.S)


@dataclass
class HarborSpec:
    """What the Harbor runner needs of a task (kept as ``task.metadata["harbor"]``)."""

    task_dir: str
    workdir: str = "/app"
    env: dict[str, str] = field(default_factory=dict)  # Dockerfile ENV + [environment].env
    verifier_env: dict[str, str] = field(default_factory=dict)
    solution_env: dict[str, str] = field(default_factory=dict)
    steps: list[dict[str, Any]] = field(default_factory=list)  # COPY/RUN steps, in order
    verify_timeout_s: float = 600.0
    allow_internet: bool = True
    users: dict[str, str] = field(default_factory=dict)
    #: Why the local launcher cannot run it (``None``: it can), with the Dockerfile line.
    local_refusal: str | None = None
    has_solution: bool = False


def harbor_spec(task: Task) -> HarborSpec:
    return HarborSpec(**task.metadata["harbor"])


def is_harbor_task_dir(path: Path) -> bool:
    """A Harbor task: ``task.toml`` + ``instruction.md``, with ``tests/`` or ``environment/``, and no
    openforge verifier (``verify.py`` / ``verify.sh``)."""
    return ((path / "task.toml").is_file() and (path / "instruction.md").is_file()
            and ((path / "tests").is_dir() or (path / "environment").is_dir())
            and not (path / "verify.py").exists() and not (path / "verify.sh").exists())


def _check_types(meta: dict[str, Any], toml: Path) -> list[str]:
    problems = []
    for sec in _SECTIONS:
        if sec in meta and not isinstance(meta[sec], dict):
            problems.append(f"{toml}: [{sec}] must be a table")
    for (sec, key), (types, what) in _TYPES.items():
        table = meta.get(sec)
        if not isinstance(table, dict) or key not in table:
            continue
        v = table[key]
        if not isinstance(v, types) or (isinstance(v, bool) and bool not in types) or (isinstance(v, dict) and not all(isinstance(x, (str, int, float)) for x in v.values())):
            problems.append(f"{toml}: [{sec}] {key} must be {what}, got {v!r}")
    split = (meta.get("metadata") or {}).get("split") if isinstance(meta.get("metadata"), dict) else None
    if isinstance(split, str) and split not in ("train", "eval", "heldout"):
        problems.append(f"{toml}: [metadata] split must be \"train\", \"eval\" or \"heldout\", got {split!r}")
    if meta.get("steps"):
        problems.append(f"{toml}: multi-step tasks ([[steps]]) are not supported")
    return problems


def _template(env: dict[str, Any]) -> dict[str, str]:
    """``[environment].env``: ``${VAR}`` / ``${VAR:-default}`` read from the driver's environment."""
    def sub(m: re.Match[str]) -> str:
        return os.environ.get(m.group(1), m.group(2) or "")

    return {str(k): _TEMPLATE.sub(sub, str(v)) for k, v in env.items()}


def _recipe(path: Path, env_cfg: dict[str, Any], bases: tuple[re.Pattern[str], ...], spec: HarborSpec) -> None:
    """Fill ``spec`` from ``environment/``: the steps the local launcher runs, or why it cannot."""
    envdir = path / "environment"
    compose = [p.name for p in (envdir.glob("docker-compose*.y*ml") if envdir.is_dir() else [])] + \
        [p.name for p in (envdir.glob("compose*.y*ml") if envdir.is_dir() else [])]
    dockerfile = envdir / "Dockerfile"
    if env_cfg.get("gpus", 0):
        spec.local_refusal = f"[environment] gpus = {env_cfg['gpus']}: the local launcher gives no GPUs"
    elif compose:
        spec.local_refusal = f"environment/{compose[0]}: compose services need a container runtime"
    elif not dockerfile.is_file():
        image = env_cfg.get("docker_image")
        if image:  # a prebuilt image and no Dockerfile: its base is the image itself
            try:
                parse_dockerfile(f"FROM {image}\n", bases)
            except Unsupported as e:
                spec.local_refusal = f"[environment] docker_image = {image!r}: {e.why}"
        return
    else:
        try:
            recipe = parse_dockerfile(dockerfile.read_text(), bases)
        except Unsupported as e:
            spec.local_refusal = str(e)
            return
        spec.workdir = recipe.workdir
        spec.env = {**recipe.env, **spec.env}
        spec.steps = [{"kind": "copy", **asdict(s)} if hasattr(s, "sources") else {"kind": "run", **asdict(s)}
                      for s in recipe.steps]
    if isinstance(env_cfg.get("workdir"), str):
        spec.workdir = env_cfg["workdir"]


def load_harbor_task(path: Path, environment: str, bases: tuple[re.Pattern[str], ...]) -> Task:
    """Read one Harbor task directory into a :class:`Task`; every problem reported at once."""
    toml = path / "task.toml"
    try:
        meta = tomllib.loads(toml.read_text())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise ConfigError(f"{toml}: not valid TOML: {e}") from None
    problems = _check_types(meta, toml)
    if not (path / "tests" / "test.sh").is_file():
        problems.append(f"{path}: needs tests/test.sh (the verifier, which writes /logs/verifier/reward.txt or "
                        "reward.json)")
    if problems:
        raise ConfigError(problems)
    agent, verifier = meta.get("agent") or {}, meta.get("verifier") or {}
    env_cfg, sol, md = meta.get("environment") or {}, meta.get("solution") or {}, dict(meta.get("metadata") or {})
    network = env_cfg.get("network_mode")
    spec = HarborSpec(
        task_dir=str(path.resolve()), env=_template(env_cfg.get("env") or {}),
        verifier_env={str(k): str(v) for k, v in (verifier.get("env") or {}).items()},
        solution_env={str(k): str(v) for k, v in (sol.get("env") or {}).items()},
        verify_timeout_s=float(verifier.get("timeout_sec", 600.0)),
        allow_internet=bool(env_cfg.get("allow_internet", True)) and network not in ("no-network",),
        users={k: str(v) for k, v in (("agent", agent.get("user")), ("verifier", verifier.get("user"))) if v is not None},
        has_solution=(path / "solution" / "solve.sh").is_file())
    _recipe(path, env_cfg, bases, spec)
    if not spec.workdir.startswith("/"):
        raise ConfigError(f"{toml}: [environment] workdir must be an absolute path, got {spec.workdir!r}")
    instruction = _CANARY.sub("", (path / "instruction.md").read_text()).strip()
    res = Resources(cpu=float(env_cfg.get("cpus", 2.0)), memory_mb=int(env_cfg.get("memory_mb", 2048)),
                    disk_mb=int(env_cfg.get("storage_mb", 4096)))
    return Task(id=path.name, instruction=instruction, environment=environment,
                split=md.pop("split", "train"), category=md.pop("category", "general"), resources=res,
                timeout_s=float(agent.get("timeout_sec") or 600.0),
                setup_timeout_s=float(env_cfg.get("build_timeout_sec", 600.0)),
                verify_timeout_s=spec.verify_timeout_s + 60.0,  # + copying the workdir and /tests in
                image=env_cfg.get("docker_image"),
                metadata={**md, "task_dir": spec.task_dir, "harbor": asdict(spec)})
