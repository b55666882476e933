"""Build openforge's sdist and wheel the way an index would, and check what the wheel carries.

Used by ``scripts/wheel-check.sh`` (the CI step that installs the wheel into a fresh venv and runs
``forge`` from it) and by ``tests/core/test_distribution.py``. No network: the PEP 517 hooks of the
running interpreter's setuptools are called in-process.

    python scripts/wheel_check.py build OUT_DIR      # sdist from the checkout, the wheel from the sdist
    python scripts/wheel_check.py contents WHEEL     # every package file of the checkout is in the wheel

The wheel is built from the unpacked sdist (as ``pip install SDIST`` would), so a file the sdist drops
is missing from the wheel too and the contents check sees it. "Every package file" is every file under
``openforge/`` that git tracks (or would track: untracked, not ignored): the templates, recipes, task
folders, service apps and scripts the code loads by path next to itself. A new kind of data file that
``[tool.setuptools.package-data]`` does not match is caught here, not by a user.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "openforge"


def source_files(root: Path = ROOT) -> list[str]:
    """The checkout's files (tracked, or untracked and not ignored), relative to ``root``."""
    try:
        out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=root,
                             capture_output=True, check=True).stdout.decode()
    except (OSError, subprocess.CalledProcessError):  # not a git checkout (an unpacked sdist): all files
        return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()
                      and "__pycache__" not in p.parts and not p.name.endswith(".pyc"))
    return sorted(f for f in out.split("\0") if f and (root / f).is_file())


def package_files(root: Path = ROOT) -> list[str]:
    """The files under ``openforge/`` that a wheel must carry (bytecode excluded)."""
    return [f for f in source_files(root) if f.startswith(PACKAGE + "/") and not f.endswith(".pyc")]


def _hook(src: Path, name: str, out: Path) -> Path:
    """Call the PEP 517 hook ``name`` of setuptools on the project in ``src`` (in a child process, so
    setuptools' global state and cwd stay out of the caller)."""
    code = (f"import setuptools.build_meta as b; print(b.{name}({str(out)!r}))")
    res = subprocess.run([sys.executable, "-c", code], cwd=src, capture_output=True, text=True,
                         env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
    if res.returncode != 0:
        raise RuntimeError(f"{name} failed in {src}:\n{res.stderr[-3000:]}")
    return out / res.stdout.strip().splitlines()[-1]


def build(out: Path, root: Path = ROOT) -> tuple[Path, Path]:
    """``(sdist, wheel)`` in ``out``: the sdist from a copy of the checkout's files (no build litter in
    the checkout), the wheel from the unpacked sdist."""
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="openforge-wheel-") as tmp:
        src = Path(tmp) / "src"
        for f in source_files(root):
            dst = src / f
            dst.parent.mkdir(parents=True, exist_ok=True)
            dst.write_bytes((root / f).read_bytes())
            dst.chmod((root / f).stat().st_mode & 0o777)
        sdist = _hook(src, "build_sdist", out)
        with tarfile.open(sdist) as tar:
            tar.extractall(Path(tmp) / "unpacked", filter="data")
        (unpacked,) = (Path(tmp) / "unpacked").iterdir()
        wheel = _hook(unpacked, "build_wheel", out)
    return sdist, wheel


def missing_from_wheel(wheel: Path, root: Path = ROOT) -> list[str]:
    """The package files of the checkout that the wheel lacks."""
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
    return [f for f in package_files(root) if f not in names]


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "build":
        sdist, wheel = build(Path(argv[1]).resolve())
        print(sdist)
        print(wheel)
        return 0
    if len(argv) == 2 and argv[0] == "contents":
        missing = missing_from_wheel(Path(argv[1]))
        if missing:
            print(f"error: the wheel lacks {len(missing)} package file(s) the code ships (add their pattern to "
                  f"[tool.setuptools.package-data] in pyproject.toml):", *missing, sep="\n  ", file=sys.stderr)
            return 1
        print(f"wheel carries all {len(package_files())} package files")
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
