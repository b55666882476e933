"""The distribution a user installs: named ``openforge-rl`` (``openforge`` on the public index is another
project), importing as ``openforge`` with the ``forge`` command, and a wheel that carries every package
file. ``scripts/wheel-check.sh`` (a CI phase of scripts/test.sh) installs that wheel into a fresh venv
and runs ``forge`` from it."""

from __future__ import annotations

import importlib.util
import sys
import zipfile
from pathlib import Path

import pytest
import tomllib

import openforge
from openforge.util.extras import DISTRIBUTION, pip_install

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def _wheel_check():
    spec = importlib.util.spec_from_file_location("wheel_check", ROOT / "scripts" / "wheel_check.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["wheel_check"] = mod
    spec.loader.exec_module(mod)
    return mod


def test_the_distribution_name_is_one_that_installs_openforge():
    assert PYPROJECT["name"] == DISTRIBUTION == "openforge-rl"
    assert PYPROJECT["version"] == openforge.__version__
    assert PYPROJECT["scripts"] == {"forge": "openforge.cli.main:main"}
    assert pip_install() == "pip install openforge-rl" and pip_install("k8s") == "pip install 'openforge-rl[k8s]'"


def test_no_install_hint_names_the_wrong_distribution():
    """Every `pip install` the code prints or the docs show names openforge-rl (the bare name installs
    somebody else's code). README.md and CHANGELOG.md are the lead's."""
    files = [p for top in ("openforge", "docs", "recipes", "examples", "scripts") for p in (ROOT / top).rglob("*")
             if p.suffix in (".py", ".md", ".sh", ".yaml")]
    bad = [f"{p.relative_to(ROOT)}:{i}" for p in files
           for i, line in enumerate(p.read_text().splitlines(), 1)
           if "pip install openforge " in line + " " or "pip install 'openforge[" in line
           or "pip install openforge;" in line]
    assert not bad, bad


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    return _wheel_check().build(tmp_path_factory.mktemp("dist"))


def test_the_wheel_and_sdist_are_openforge_rl_with_the_forge_command(built):
    sdist, wheel = built
    assert sdist.name == f"openforge_rl-{openforge.__version__}.tar.gz"
    assert wheel.name == f"openforge_rl-{openforge.__version__}-py3-none-any.whl"
    with zipfile.ZipFile(wheel) as z:
        info = f"openforge_rl-{openforge.__version__}.dist-info"
        meta = z.read(f"{info}/METADATA").decode()
        assert "\nName: openforge-rl\n" in meta
        assert "forge = openforge.cli.main:main" in z.read(f"{info}/entry_points.txt").decode()
        assert {n.split("/")[0] for n in z.namelist()} == {"openforge", info}  # no tests/, scripts/ at top


def test_the_wheel_carries_every_package_file(built):
    wc = _wheel_check()
    _, wheel = built
    files = wc.package_files()
    # what the code loads by path next to itself: the recipes and the chat / report templates
    assert {"openforge/recipes/claw_grpo/config.yaml", "openforge/proxy/templates/hermes.jinja",
            "openforge/analysis/templates/report.html.jinja"} <= set(files)
    assert wc.missing_from_wheel(wheel) == []


def test_the_contents_check_sees_a_dropped_file(built, tmp_path):
    """The check itself: a wheel without one of the recipe files is reported."""
    wc = _wheel_check()
    _, wheel = built
    thin = tmp_path / wheel.name
    drop = "openforge/recipes/claw_grpo/config.yaml"
    with zipfile.ZipFile(wheel) as src, zipfile.ZipFile(thin, "w") as dst:
        for item in src.infolist():
            if item.filename != drop:
                dst.writestr(item, src.read(item))
    assert wc.missing_from_wheel(thin) == [drop]
    assert wc.main(["contents", str(thin)]) == 1
