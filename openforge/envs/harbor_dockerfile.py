"""A Harbor task's ``environment/Dockerfile``, read for what the local launcher can honour without a
container runtime.

Owns: :func:`parse_dockerfile` (-> :class:`Recipe`: the base image, the final ``WORKDIR``, ``ENV``, and
the ordered ``COPY``/``ADD`` and ``RUN`` steps, or :class:`Unsupported` naming the line and why) and
:func:`host_bases` (the base images that stand for this host).

What runs locally: ``FROM`` a base that is this host (the driver's Python for ``python:X.Y``, the host's
OS for ``debian:12`` / ``ubuntu:24.04``, or an image the user declares equivalent), ``WORKDIR``
(every one inside the final one), ``ENV``/``ARG`` (values; ``$VAR`` and ``${VAR}`` expanded),
``COPY``/``ADD`` of the build context into the workdir, and ``RUN`` (run once at setup, in the sandbox).
Instructions that do not shape the starting state (``CMD``, ``ENTRYPOINT``, ``LABEL``, ``EXPOSE``,
``USER``, ``VOLUME``, ``HEALTHCHECK``, ``STOPSIGNAL``, ``MAINTAINER``) are ignored. Anything else — a
base the host lacks, a second stage, ``COPY --from``, a destination outside the workdir, ``ADD`` of a
URL or an archive, a ``RUN`` that installs system packages, heredocs, ``SHELL``, ``ONBUILD`` — is
:class:`Unsupported`.
"""

from __future__ import annotations

import json
import os
import posixpath
import re
import shlex
import sys
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

__all__ = ["CopyStep", "Recipe", "RunStep", "Unsupported", "host_bases", "parse_dockerfile"]

_IGNORED = {"CMD", "ENTRYPOINT", "LABEL", "EXPOSE", "USER", "VOLUME", "HEALTHCHECK", "STOPSIGNAL", "MAINTAINER"}
#: A RUN that calls one of these installs system packages into the image: the host lacks them.
_PACKAGE_MANAGERS = ("apt-get", "apt", "apk", "yum", "dnf", "microdnf", "zypper", "pacman", "conda", "mamba",
                     "add-apt-repository")
_ARCHIVE = (".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tar.xz", ".txz")


class Unsupported(ValueError):
    """What the local launcher cannot honour: ``line`` (1-based) and ``instruction`` say where, ``why`` why."""

    def __init__(self, line: int, instruction: str, why: str):
        self.line, self.instruction, self.why = line, instruction, why
        super().__init__(f"environment/Dockerfile:{line} `{instruction[:120]}`: {why}")

    def __reduce__(self) -> tuple:  # crosses processes (workers) with its fields
        return type(self), (self.line, self.instruction, self.why)


@dataclass(frozen=True)
class CopyStep:
    """Copy ``sources`` (paths or globs in the build context) to ``dest`` (absolute, inside the workdir)."""

    sources: tuple[str, ...]
    dest: str
    dest_is_dir: bool


@dataclass(frozen=True)
class RunStep:
    """Run ``argv`` in ``cwd`` (absolute, inside the workdir) with ``env`` (the ENV/ARG values so far)."""

    argv: tuple[str, ...]
    cwd: str
    env: tuple[tuple[str, str], ...]


@dataclass
class Recipe:
    base: str
    workdir: str = "/app"
    env: dict[str, str] = field(default_factory=dict)
    steps: list[CopyStep | RunStep] = field(default_factory=list)


def _logical_lines(text: str) -> list[tuple[int, str]]:
    """(first line number, instruction) with continuations joined and comments dropped."""
    out: list[tuple[int, str]] = []
    buf, start = "", 0
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.rstrip()
        if not buf and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if buf and line.lstrip().startswith("#"):
            continue
        if not buf:
            start = n
        if line.endswith("\\"):
            buf += line[:-1] + " "
            continue
        out.append((start, (buf + line).strip()))
        buf = ""
    if buf.strip():
        out.append((start, buf.strip()))
    return out


_VAR = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}|([A-Za-z_][A-Za-z0-9_]*))")


def _expand(value: str, env: dict[str, str]) -> str:
    def sub(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(3)
        if name in env:
            return env[name]
        if name == "PATH":
            return os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin")
        return m.group(2) or ""

    return _VAR.sub(sub, value)


def _pairs(rest: str, line: int, instr: str) -> list[tuple[str, str]]:
    """``ENV A=1 B="two"`` or the legacy ``ENV A one two``."""
    try:
        words = shlex.split(rest)
    except ValueError as e:
        raise Unsupported(line, instr, f"cannot read it: {e}") from None
    if words and "=" not in words[0]:
        return [(words[0], rest.split(None, 1)[1] if len(words) > 1 else "")]
    out = []
    for w in words:
        if "=" not in w:
            raise Unsupported(line, instr, f"{w!r} is not NAME=VALUE")
        k, v = w.split("=", 1)
        out.append((k, v))
    return out


@lru_cache(maxsize=1)
def _os_release() -> dict[str, str]:
    try:
        text = Path("/etc/os-release").read_text()
    except OSError:
        return {}
    return {k: v.strip().strip('"') for k, _, v in (ln.partition("=") for ln in text.splitlines()) if k}


def host_bases(extra: tuple[str, ...] = ()) -> tuple[re.Pattern[str], ...]:
    """Patterns of the base images that stand for this host: ``python:X.Y[.Z][-variant]`` for the
    driver's Python X.Y (it is put first on ``PATH`` for Harbor tasks), the host OS's own image
    (``ID:VERSION_ID`` and ``ID:VERSION_CODENAME``, e.g. ``debian:12``, ``debian:bookworm-slim``), and
    ``extra`` (exact names the user declares equivalent)."""
    v = f"{sys.version_info.major}\\.{sys.version_info.minor}"
    pats = [rf"python:{v}(\.\d+)?(-[a-z0-9.-]+)?"]
    osr = _os_release()
    for tag in (osr.get("VERSION_ID"), osr.get("VERSION_CODENAME")):
        if osr.get("ID") and tag:
            pats.append(rf"{re.escape(osr['ID'])}:{re.escape(tag)}(-slim)?")
    pats += [re.escape(_canonical(e)) for e in extra]
    return tuple(re.compile(p) for p in pats)


def _canonical(image: str) -> str:
    """``docker.io/library/python:3.11@sha256:...`` → ``python:3.11`` (the name the patterns match)."""
    image = image.split("@", 1)[0]
    for prefix in ("docker.io/library/", "index.docker.io/library/", "library/"):
        if image.startswith(prefix):
            image = image[len(prefix):]
    return image if ":" in image.rsplit("/", 1)[-1] else image + ":latest"


def _inside(path: str, workdir: str) -> bool:
    return path == workdir or path.startswith(workdir.rstrip("/") + "/")


@dataclass
class _State:
    base: str | None = None
    cur: str = "/"
    env: dict[str, str] = field(default_factory=dict)
    args: dict[str, str] = field(default_factory=dict)
    workdirs: list[tuple[int, str, str]] = field(default_factory=list)  # (line, instruction, path)
    raw: list[tuple[int, str, str, str]] = field(default_factory=list)  # (line, instruction, kind, payload)


def parse_dockerfile(text: str, bases: tuple[re.Pattern[str], ...]) -> Recipe:
    """Read a Dockerfile into a :class:`Recipe`; :class:`Unsupported` at the first line that cannot
    be honoured without a container runtime (see the module docstring)."""
    st = _State()
    steps: list[tuple[int, str, CopyStep | RunStep]] = []
    for n, instr in _logical_lines(text):
        word, _, rest = instr.partition(" ")
        kw, rest = word.upper(), rest.strip()
        if kw.startswith("#"):
            continue
        if "<<" in rest and kw in ("RUN", "COPY", "ADD"):
            raise Unsupported(n, instr, "heredocs are not supported; put the script in the build context")
        if kw == "FROM":
            _from(st, n, instr, rest, bases)
        elif st.base is None and kw != "ARG":
            raise Unsupported(n, instr, "comes before FROM")
        elif kw == "WORKDIR":
            st.cur = posixpath.normpath(posixpath.join(st.cur, _expand(rest, {**st.args, **st.env})))
            st.workdirs.append((n, instr, st.cur))
        elif kw in ("ENV", "ARG"):
            for k, v in (_pairs(rest, n, instr) if kw == "ENV" or "=" in rest else [(rest, "")]):
                val = _expand(v, {**st.args, **st.env})
                (st.env if kw == "ENV" else st.args)[k] = val
        elif kw in ("COPY", "ADD"):
            steps.append((n, instr, _copy(kw, rest, n, instr, st)))
        elif kw == "RUN":
            steps.append((n, instr, _run(rest, n, instr, st)))
        elif kw in _IGNORED:
            continue
        else:
            raise Unsupported(n, instr, f"{kw} cannot be honoured without a container runtime")
    if st.base is None:
        raise Unsupported(1, "(no FROM)", "the Dockerfile names no base image")
    workdir = st.cur if st.cur != "/" else "/app"
    for n, instr, path in st.workdirs:
        if not _inside(path, workdir):
            raise Unsupported(n, instr, f"the task works in {workdir}; a WORKDIR outside it ({path}) needs a "
                              "container's own file system")
    out: list[CopyStep | RunStep] = []
    for n, instr, step in steps:
        if isinstance(step, RunStep) and step.cwd == "/":  # a RUN before any WORKDIR: run it in the workdir
            step = RunStep(step.argv, workdir, step.env)
        out.append(step)
        where = step.dest if isinstance(step, CopyStep) else step.cwd
        if not _inside(where, workdir):
            raise Unsupported(n, instr, f"writes to {where}, outside the task's workdir {workdir}: locally only "
                              "the workdir is the task's own (the host's system directories are read-only)")
    return Recipe(base=st.base, workdir=workdir, env=dict(st.env), steps=out)


def _from(st: _State, n: int, instr: str, rest: str, bases: tuple[re.Pattern[str], ...]) -> None:
    if st.base is not None:
        raise Unsupported(n, instr, "a second FROM (a multi-stage build) needs a container runtime")
    words = [w for w in rest.split() if not w.startswith("--")]
    if not words:
        raise Unsupported(n, instr, "FROM names no image")
    image = _canonical(_expand(words[0], st.args))
    if not any(p.fullmatch(image) for p in bases):
        raise Unsupported(n, instr, f"base image {image} is not this host: the local launcher runs tasks on the "
                          f"host's own tools (python:{sys.version_info.major}.{sys.version_info.minor}* = the "
                          "driver's Python, or the host OS's own image); declare an equivalent image with the "
                          "environment option host_bases, or build the image and run on Kubernetes")
    st.base = image


def _copy(kw: str, rest: str, n: int, instr: str, st: _State) -> CopyStep:
    try:
        words = shlex.split(rest) if not rest.startswith("[") else json.loads(rest)
    except ValueError as e:
        raise Unsupported(n, instr, f"cannot read it: {e}") from None
    flags = [w for w in words if w.startswith("--")]
    if any(f.startswith("--from") for f in flags):
        raise Unsupported(n, instr, "COPY --from copies out of another image")
    paths = [_expand(w, {**st.args, **st.env}) for w in words if not w.startswith("--")]
    if len(paths) < 2:
        raise Unsupported(n, instr, f"{kw} needs a source and a destination")
    *srcs, dest = paths
    for s in srcs:
        if kw == "ADD" and (re.match(r"^[a-z]+://", s) or s.startswith("git@")):
            raise Unsupported(n, instr, "ADD of a URL downloads at build time")
        if kw == "ADD" and s.endswith(_ARCHIVE):
            raise Unsupported(n, instr, "ADD of an archive unpacks it; unpack it in the build context or use RUN tar")
        if posixpath.isabs(s) or posixpath.normpath(s).startswith(".."):
            raise Unsupported(n, instr, f"source {s} is outside the build context")
    dest_is_dir = dest.endswith("/") or len(srcs) > 1 or dest in (".", "./")
    full = posixpath.normpath(posixpath.join(st.cur, dest))
    return CopyStep(tuple(srcs), full, dest_is_dir)


def _run(rest: str, n: int, instr: str, st: _State) -> RunStep:
    flags = []
    while rest.startswith("--"):
        flag, _, rest = rest.partition(" ")
        flags.append(flag)
        rest = rest.strip()
    if flags:
        raise Unsupported(n, instr, f"RUN {' '.join(flags)} needs BuildKit")
    if rest.startswith("["):
        try:
            argv = json.loads(rest)
        except ValueError as e:
            raise Unsupported(n, instr, f"cannot read its exec form: {e}") from None
        if not (isinstance(argv, list) and argv and all(isinstance(a, str) for a in argv)):
            raise Unsupported(n, instr, "its exec form must be a list of strings")
    else:
        argv = ["sh", "-c", rest]
    text = " ".join(argv)
    for pm in _PACKAGE_MANAGERS:
        if re.search(rf"(^|[\s;&|(`]){re.escape(pm)}(\s|$)", text):
            raise Unsupported(n, instr, f"it installs system packages ({pm}), which the host does not have: install "
                              "them on the host and drop the line, or build the image and run on Kubernetes")
    return RunStep(tuple(argv), st.cur, tuple({**st.args, **st.env}.items()))
