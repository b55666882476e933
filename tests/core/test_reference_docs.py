"""The docs site's reference pages are the code's: the CLI page from the typer app, the config page from
the pydantic models (every key with its default and a meaning), the API page from ``openforge.__all__``
(:mod:`openforge.devtools.refdocs`). A stale page fails here: ``python -m openforge.devtools.refdocs --write``."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from openforge.devtools import refdocs

ROOT = Path(__file__).resolve().parents[2]


def test_generated_pages_are_current():
    assert refdocs.stale() == [], "stale reference pages: python -m openforge.devtools.refdocs --write"


def test_every_config_key_has_a_meaning():
    assert refdocs.undocumented_keys() == [], (
        "config keys without a meaning: give the Field a description= where the key is defined (openforge/config/)")


def test_config_page_lists_every_key_with_its_default():
    from openforge.config import RunConfig

    page = refdocs.config_page()
    defaults = RunConfig().model_dump(mode="json")
    for k in refdocs.config_keys():
        row = next((ln for ln in page.splitlines() if ln.startswith(f"| `{k['key']}` |")), None)
        assert row is not None, f"{k['key']} is missing from the config page"
        value = defaults
        for part in k["key"].split("."):
            value = value.get(part) if isinstance(value, dict) else None
        if k["nested"] is None and isinstance(value, (int, float, str, bool)):
            assert re.search(rf"`{re.escape(k['default'])}`", row) and str(value).lower() in row.lower(), row


def test_cli_page_has_every_command_and_option():
    import typer.main

    from openforge.cli.main import app

    page = refdocs.cli_page()
    root = typer.main.get_command(app)
    for path, cmd, _ctx in refdocs._commands(root, ["forge"]):
        assert f"`{' '.join(path)}`" in page, path
        for p in getattr(cmd, "params", []):
            if not getattr(p, "hidden", False) and p.opts and p.opts[0].startswith("-"):
                assert p.opts[-1] in page, (path, p.opts)


def test_api_page_names_every_public_name():
    import openforge

    page = refdocs.api_page()
    for name in set(openforge.__all__) - refdocs.SKIP_API:
        assert re.search(rf"^::: [\w.]+\.{name}$", page, re.M), name


def test_check_exits_1_on_a_stale_page(tmp_path, monkeypatch):
    for rel, make in refdocs.PAGES.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(make())
    monkeypatch.setattr(refdocs, "ROOT", tmp_path)
    assert refdocs.main(["--check"]) == 0
    cfg = tmp_path / "docs/reference/config.md"
    cfg.write_text(cfg.read_text().replace("rollouts per task (GRPO group)", "rollouts per task"))
    assert refdocs.main(["--check"]) == 1


@pytest.mark.parametrize("rel", sorted(refdocs.PAGES))
def test_generated_pages_are_in_the_site_nav(rel):
    assert rel.removeprefix("docs/") in (ROOT / "mkdocs.yml").read_text()
