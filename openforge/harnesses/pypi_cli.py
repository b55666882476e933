"""The base for harnesses that are a PyPI command line installed into a venv of their own:
:class:`PypiCliHarness`.

Owns: the lookup of the venv's executable (``<cache>/<name>/venv/bin/<exe>``, see
:data:`~openforge.harnesses.versions.PYPI_EXECUTABLES`), no Node, and the read-only paths the
sandbox needs: the venv and the base interpreter its ``python`` links to (``home`` in
``pyvenv.cfg``).
"""

from __future__ import annotations

from pathlib import Path

from ..core.errors import HarnessNotInstalled
from .cli import CliHarness
from .versions import PYPI_PINS

__all__ = ["PypiCliHarness", "pypi_install_hint", "venv_base_prefix"]


def pypi_install_hint(name: str) -> str:
    return f"forge harness install {name}  (a venv with {PYPI_PINS[name]} in the cache)"


def venv_base_prefix(venv: Path) -> str | None:
    """The prefix of the interpreter a venv was made from (the parent of ``home`` in pyvenv.cfg)."""
    try:
        text = (venv / "pyvenv.cfg").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "home" and value.strip():
            return str(Path(value.strip()).resolve().parent)
    return None


class PypiCliHarness(CliHarness):
    """A CLI from PyPI (pinned in ``PYPI_PINS``), run from its own venv."""

    def node_path_dirs(self) -> list[str]:
        return []

    def venv(self) -> Path:
        """The venv the executable runs from (``bin/<exe>``'s parent's parent)."""
        return Path(self.resolve_executable()).parent.parent

    def ro_paths(self) -> list[str]:
        try:
            venv = self.venv()
        except HarnessNotInstalled:
            return []
        base = venv_base_prefix(venv)
        return sorted({str(venv), str(venv.resolve()), *([base] if base else [])})
