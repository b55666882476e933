"""Which pip extra provides a missing module: the install hint of a plugin that cannot be imported.

Owns: :data:`DISTRIBUTION` (the name openforge installs as), :func:`extra_for`, :func:`install_hint` and
:func:`pip_install`. The extras are read from the distribution's own
metadata (``Requires-Dist: browser-use>=0.13; extra == "browser"``, generated from pyproject's
``[project.optional-dependencies]``) and, for an openforge imported from a source checkout (editable
or not installed), first from that checkout's ``pyproject.toml``. Nothing here is hard-coded per plugin: a new
extra in pyproject is found without touching this module.
"""

from __future__ import annotations

import re
from importlib import metadata
from pathlib import Path

__all__ = ["DISTRIBUTION", "extra_for", "install_hint", "pip_install"]

#: The distribution openforge is published and installed as (``pip install openforge-rl``); the import
#: package stays ``openforge`` and the command ``forge``. On the public index ``openforge`` is another project.
DISTRIBUTION = "openforge-rl"

# import names that differ from the name of the distribution that ships them
_DIST_OF_MODULE = {"PIL": "pillow", "yaml": "pyyaml", "zmq": "pyzmq", "google.protobuf": "protobuf",
                   "transfer_queue": "transferqueue", "cv2": "opencv-python", "sklearn": "scikit-learn"}
_NAME = re.compile(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)")
_EXTRA = re.compile(r"""extra\s*==\s*["']([^"']+)["']""")
_DEV_EXTRAS = ("dev", "test", "tests", "docs", "lint")


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _pyproject_extras(dist: str) -> list[tuple[str, str]]:
    """``(requirement, extra)`` pairs of the source checkout ``openforge`` is imported from."""
    if _norm(dist) != DISTRIBUTION:
        return []
    path = Path(__file__).resolve().parents[2] / "pyproject.toml"  # openforge/util/extras.py → the checkout
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib  # type: ignore[no-redef]
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, ValueError):
        return []
    if _norm(str(data.get("project", {}).get("name", ""))) != DISTRIBUTION:
        return []
    extras = data["project"].get("optional-dependencies", {})
    return [(req, extra) for extra, reqs in extras.items() for req in reqs]


def _requirements(dist: str) -> list[tuple[str, str]]:
    """``(requirement name, extra)`` for every requirement of ``dist`` that an extra brings in."""
    reqs = _pyproject_extras(dist)  # a source checkout's pyproject is newer than any installed metadata
    try:
        reqs += [(r, m.group(1)) for r in metadata.requires(dist) or [] if (m := _EXTRA.search(r))]
    except metadata.PackageNotFoundError:
        pass
    out = []
    for req, extra in reqs:
        m = _NAME.match(req)
        if m:
            out.append((_norm(m.group(1)), extra))
    return out


def extra_for(dist: str, module: str) -> str | None:
    """The extra of ``dist`` that installs the package providing ``module`` (``browser_use`` →
    ``browser``), preferring a user-facing extra over ``dev``; ``None`` if no extra does."""
    top = module.split(".")[0]
    wanted = {_norm(top), _norm(_DIST_OF_MODULE.get(module, _DIST_OF_MODULE.get(top, top)))}
    found = [extra for name, extra in _requirements(dist) if name in wanted]
    for extra in found:
        if extra not in _DEV_EXTRAS:
            return extra
    return found[0] if found else None


def install_hint(dist: str | None, module: str) -> str | None:
    """``pip install 'DIST[EXTRA]'`` for a missing ``module`` that an extra of ``dist`` provides."""
    if not dist:
        return None
    extra = extra_for(dist, module)
    return f"pip install '{dist}[{extra}]'" if extra else None


def pip_install(extra: str | None = None) -> str:
    """The command that installs openforge, or one of its extras: ``pip install 'openforge-rl[k8s]'``."""
    return f"pip install '{DISTRIBUTION}[{extra}]'" if extra else f"pip install {DISTRIBUTION}"
