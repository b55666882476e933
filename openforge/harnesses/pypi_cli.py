"""The base for harnesses that are a PyPI command line installed into a venv of their own:
:class:`PypiCliHarness`.

Owns: the lookup of the venv's executable (``<cache>/<name>/venv/bin/<exe>``, see
:data:`~openforge.harnesses.versions.PYPI_EXECUTABLES`), no Node, the read-only paths the
sandbox needs (the venv and the base interpreter its ``python`` links to: ``home`` in
``pyvenv.cfg``), the environment of a CLI that reaches the proxy through LiteLLM
(:func:`litellm_env`), and a final answer read back from a file the CLI writes below the private
HOME (:attr:`PypiCliHarness.answer_file`).
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from ..core.errors import HarnessNotInstalled
from ..harness import HarnessResult, RolloutContext
from .cli import CliHarness
from .versions import PYPI_PINS

__all__ = ["PypiCliHarness", "litellm_env", "pypi_install_hint", "venv_base_prefix"]


def pypi_install_hint(name: str) -> str:
    return f"forge harness install {name}  (a venv with {PYPI_PINS[name]} in the cache)"


def litellm_env(ctx: RolloutContext) -> dict[str, str]:
    """The environment of a CLI that calls the proxy through LiteLLM's ``openai/`` provider: the
    rollout key, LiteLLM's price list from the package (no download of it), its telemetry off and a plain
    terminal."""
    return {"OPENAI_API_KEY": ctx.api_key, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_TELEMETRY": "False",
            "NO_COLOR": "1", "TERM": "dumb"}


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

    #: a file below the private HOME the CLI writes its answer to (read back after a run that ended)
    answer_file: ClassVar[str | None] = None

    def answer_from_file(self, raw: bytes, stdout_answer: str | None) -> str | None:
        """The final answer from :attr:`answer_file`'s bytes (``b""`` when unreadable) and the one
        read from stdout."""
        return stdout_answer

    async def run(self, ctx: RolloutContext) -> HarnessResult:
        out = await super().run(ctx)
        if out.status is None and self.answer_file:
            try:
                raw = await ctx.sandbox.read_file(ctx.home / self.answer_file)
            except (OSError, ValueError):
                raw = b""
            out.final_text = self.answer_from_file(raw, out.final_text)
        return out

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
