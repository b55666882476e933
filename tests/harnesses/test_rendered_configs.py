"""What every built-in CLI harness hands its process stays the same to the byte: its config files,
environment (the harness's own and the runtime's) and argv, rendered from one fixed rollout context
on each wire it speaks, against the snapshot in ``data/rendered_configs.json`` (the environment as a
mapping: a process's environment has no order that means anything).

A deliberate change of a harness's config rewrites the snapshot:
``OPENFORGE_REGEN_RENDERED=1 pytest tests/harnesses/test_rendered_configs.py`` (then review the diff)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from harness_helpers import config_ctx

from openforge.harnesses.cli import CliHarness
from openforge.plugins import HARNESSES, harness_class, make_harness

SNAPSHOT = Path(__file__).resolve().parent / "data" / "rendered_configs.json"
PKG = str(Path(__import__("openforge").__file__).resolve().parent.parent)


def _cases() -> list[tuple[str, str]]:
    out = []
    for name in HARNESSES.names():
        cls = harness_class(name)
        if issubclass(cls, CliHarness):
            out += [(name, wire) for wire in (cls.wire_apis or (cls.wire_api,))]
    return out


def _portable(value: Any) -> Any:
    """Machine paths (this interpreter, the checkout) as placeholders, so the snapshot is the same anywhere."""
    if isinstance(value, str):
        return value.replace(sys.executable, "<python>").replace(PKG, "<pkg>")
    if isinstance(value, dict):
        return {k: _portable(v) for k, v in value.items()}
    return [_portable(v) for v in value]


def rendered(name: str, wire: str) -> dict[str, Any]:
    cls = harness_class(name)
    h = make_harness(name, **({"wire_api": wire} if cls.wire_apis else {}))
    ctx = config_ctx(Path("/sbx"), 'write "hi" to out.txt')
    return _portable({"files": h.config_files(ctx), "env": {**h.runtime_env(), **h.environment(ctx)},
                      "argv": h.command(ctx, f"/x/{cls.executable or name}")})


@pytest.fixture(autouse=True)
def _no_browser_lookup(monkeypatch):
    """browser-use's argv names the Chromium it finds on this machine: a fixed one instead."""
    from openforge.harnesses.browser_use import BrowserUseHarness

    monkeypatch.setattr(BrowserUseHarness, "chromium_path", lambda self: "/x/chromium")


def test_the_snapshot_covers_every_cli_harness_and_wire():
    if os.environ.get("OPENFORGE_REGEN_RENDERED"):
        SNAPSHOT.write_text(json.dumps({f"{n}[{w}]": rendered(n, w) for n, w in _cases()}, indent=1) + "\n")
    assert sorted(json.loads(SNAPSHOT.read_text())) == sorted(f"{n}[{w}]" for n, w in _cases())


@pytest.mark.parametrize(("name", "wire"), _cases(), ids=[f"{n}[{w}]" for n, w in _cases()])
def test_rendered_config_is_unchanged(name, wire):
    want = json.loads(SNAPSHOT.read_text())[f"{name}[{wire}]"]
    assert rendered(name, wire) == want
