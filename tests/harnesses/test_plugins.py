"""The plugin registries: built-ins load lazily, entry points and direct references resolve,
unknown names give a clear error."""

from __future__ import annotations

import subprocess
import sys

import pytest

from openforge.errors import ConfigError
from openforge.plugins import HARNESSES, Registry, get_harness


def test_builtin_harness_names_listed():
    names = HARNESSES.names()
    for n in ("react", "codex", "claude-code", "openclaw", "zeroclaw", "pi", "browser-use", "computer-use"):
        assert n in names


def test_unknown_name_is_a_config_error_listing_known():
    with pytest.raises(ConfigError) as ei:
        get_harness("no-such-harness")
    msg = str(ei.value)
    assert "unknown harness 'no-such-harness'" in msg and "react" in msg and "openforge.harnesses" in msg


def test_register_decorator_direct_ref_and_normalisation():
    reg = Registry("thing", "openforge.test-nothing")

    @reg.register("My_Thing")
    class Thing:
        pass

    assert reg.get("my-thing") is Thing and "my_thing" in reg
    assert reg.get("collections:OrderedDict").__name__ == "OrderedDict"
    assert reg.create("collections:Counter", "aab")["a"] == 2
    reg.register("broken", "openforge.no_such_module:X")
    with pytest.raises(ConfigError, match="could not be loaded"):
        reg.get("broken")


def test_entry_point_group_is_scanned(monkeypatch):
    from importlib import metadata

    ep = metadata.EntryPoint(name="ext-agent", value="collections:deque", group="openforge.test-group")

    def fake(group=None, **kw):
        return [ep] if group == "openforge.test-group" else []

    monkeypatch.setattr(metadata, "entry_points", fake)
    reg = Registry("thing", "openforge.test-group")
    assert "ext-agent" in reg.names()
    assert reg.get("ext-agent").__name__ == "deque"


def test_import_plugins_stays_light():
    code = "import sys, openforge.plugins; bad=[m for m in ('torch','transformers','openai','anthropic') if m in sys.modules]; print(bad)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
