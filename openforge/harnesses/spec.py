"""Harness spec files: a CLI harness declared in YAML or TOML instead of Python.

Owns: :class:`HarnessSpec` (the file's schema, checked with every problem in the file's own keys),
:func:`load_spec` (a ``.yaml`` / ``.yml`` / ``.toml`` path → a spec), :func:`is_spec_path` and the
template language of its strings: ``{name}`` fields from :data:`TEMPLATE_FIELDS`, with ``{name!j}``
for the value as a JSON string (also a valid TOML string). The harness class made from a spec is in
:mod:`openforge.harnesses.spec_harness`.

A spec, with every key::

    name: minichat                    # the harness name (trajectories, notes, the matrix)
    version: "0.3.1"                  # default: install.version
    description: one line
    install:                          # optional; `forge harness install FILE` installs it, pinned
      npm: "@scope/cli"               # or  pypi: "cli-package"
      version: "0.3.1"
      executable: cli                 # under node_modules/.bin (npm) or the venv's bin/ (pypi)
      min_node: "22.19"               # npm only: the Node.js its `engines` needs
    executable: ./cli.py              # without install: a path (relative to this file) or a name on PATH
    wires: [chat, responses]          # chat | responses | messages | gemini; the first is the default,
                                      # option wire_api picks another
    wire_names: {chat: openai-completions}   # the CLI's own spelling of each wire, as {wire_name}
    command: ["{exe}", "-p", "--model", "{model}", "{instruction}"]
    env: {CLI_API_KEY: "{api_key}", CLI_BASE_URL: "{base_url}"}
    files: {".cli/config.json": '{{"baseUrl": {base_url!j}}}'}   # written below the private HOME
    paths: [./prompts]                # host files the CLI reads, shown read-only in the sandbox
    final: last_line                  # | stdout | {jsonl: item.text, where: {item.type: agent_message}}
"""

from __future__ import annotations

import json
import string
from pathlib import Path
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from ..core.errors import ConfigError
from ..core.types import ServedAPI

__all__ = ["TEMPLATE_FIELDS", "WIRES", "FinalJsonl", "HarnessSpec", "InstallSpec", "is_spec_path", "load_spec",
           "render"]

#: The wire APIs a spec can name: every one the proxy serves.
WIRES: tuple[str, ...] = get_args(ServedAPI)
#: Every field a template may use.
TEMPLATE_FIELDS = {
    "exe": "the CLI's executable (absolute path)",
    "python": "the Python interpreter openforge runs under",
    "spec_dir": "the folder of the spec file",
    "instruction": "the task text",
    "model": "the policy's model name",
    "api_key": "the rollout's secret key",
    "base_url": "the proxy URL for the chosen wire (OpenAI …/v1, or the Anthropic / Gemini root)",
    "openai_base_url": "the proxy's OpenAI URL (…/v1)",
    "anthropic_base_url": "the proxy's Anthropic URL (no /v1)",
    "gemini_base_url": "the proxy's Gemini API root (no /v1beta: the SDKs add it), as GOOGLE_GEMINI_BASE_URL",
    "home": "the rollout's private HOME",
    "workdir": "the task's working directory",
    "rollout_id": "the rollout's id",
    "wire": "the chosen wire (chat, responses, messages, gemini)",
    "wire_name": "the chosen wire in the CLI's own spelling (wire_names)",
}
SPEC_SUFFIXES = (".yaml", ".yml", ".toml")


class _Formatter(string.Formatter):
    """``str.format`` with one more conversion: ``!j`` → the value as a JSON string literal."""

    def convert_field(self, value: Any, conversion: str | None) -> Any:
        if conversion == "j":
            return json.dumps(str(value))
        return super().convert_field(value, conversion)


_FMT = _Formatter()


def template_fields(text: str) -> list[str]:
    """The field names ``text`` uses; a malformed template raises ``ValueError``."""
    out = []
    for _, name, _, conversion in _FMT.parse(text):
        if name is None:
            continue
        if conversion not in (None, "j", "s", "r"):
            raise ValueError(f"unknown conversion !{conversion} (use !j for a JSON string)")
        out.append(name)
    return out


def render(text: str, values: dict[str, str]) -> str:
    """``text`` with its fields filled in from ``values``."""
    return _FMT.vformat(text, (), values)


def _check_template(text: str) -> str:
    try:
        names = template_fields(text)
    except ValueError as e:
        raise ValueError(f"bad template {text!r}: {e}") from None
    unknown = [n for n in names if n not in TEMPLATE_FIELDS]
    if unknown:
        raise ValueError(f"unknown template field {{{unknown[0]}}} in {text!r}; fields: {', '.join(TEMPLATE_FIELDS)}")
    return text


class InstallSpec(BaseModel):
    """How ``forge harness install`` gets the CLI: one npm or PyPI package at a pinned version."""

    model_config = ConfigDict(extra="forbid")
    npm: str | None = None
    pypi: str | None = None
    version: str = Field(min_length=1)
    executable: str = Field(min_length=1)
    min_node: str | None = None

    @model_validator(mode="after")
    def _one_source(self) -> InstallSpec:
        if (self.npm is None) == (self.pypi is None):
            raise ValueError("give exactly one of npm or pypi")
        if self.min_node is not None and self.npm is None:
            raise ValueError("min_node is for npm packages")
        return self

    @property
    def min_node_tuple(self) -> tuple[int, int]:
        if not self.min_node:
            return (0, 0)
        major, _, minor = self.min_node.partition(".")
        return int(major), int(minor or 0)

    @property
    def requirement(self) -> str:
        return f"{self.npm}@{self.version}" if self.npm else f"{self.pypi}=={self.version}"


class FinalJsonl(BaseModel):
    """The final answer is field ``jsonl`` (a dotted path) of the last JSON line of stdout whose
    ``where`` fields (dotted paths) have the given values."""

    model_config = ConfigDict(extra="forbid")
    jsonl: str = Field(min_length=1)
    where: dict[str, Any] = Field(default_factory=dict)


class HarnessSpec(BaseModel):
    """A CLI harness declared in a file (see the module docstring)."""

    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    version: str | None = None
    description: str = ""
    install: InstallSpec | None = None
    executable: str | None = None
    wires: list[ServedAPI] = Field(min_length=1)
    wire_names: dict[str, str] = Field(default_factory=dict)
    command: list[str] = Field(min_length=1)
    env: dict[str, str] = Field(default_factory=dict)
    files: dict[str, str] = Field(default_factory=dict)
    paths: list[str] = Field(default_factory=list)
    final: Literal["last_line", "stdout"] | FinalJsonl = "last_line"
    #: the folder of the spec file (set by :func:`load_spec`)
    spec_dir: Path = Field(default=Path("."), exclude=True)
    spec_path: Path | None = Field(default=None, exclude=True)

    @field_validator("command", mode="before")
    @classmethod
    def _split_command(cls, v: Any) -> Any:
        if isinstance(v, str):
            import shlex

            return shlex.split(v)
        return v

    @field_validator("command")
    @classmethod
    def _templates(cls, v: list[str]) -> list[str]:
        for arg in v:
            if arg != "{extra_args}":  # where the harness's extra_args go, as a whole argument
                _check_template(arg)
        return v

    @field_validator("env", "files")
    @classmethod
    def _template_values(cls, v: dict[str, str]) -> dict[str, str]:
        for text in v.values():
            _check_template(text)
        return v

    @field_validator("files")
    @classmethod
    def _relative_files(cls, v: dict[str, str]) -> dict[str, str]:
        for rel in v:
            p = Path(rel)
            if p.is_absolute() or ".." in p.parts or not rel.strip():
                raise ValueError(f"{rel!r}: a file path relative to the private HOME, without '..'")
        return v

    @model_validator(mode="after")
    def _consistent(self) -> HarnessSpec:
        if self.install is None and not self.executable:
            raise ValueError("give install (an npm or pypi package) or executable (a path or a name on PATH)")
        if len(set(self.wires)) != len(self.wires):
            raise ValueError(f"wires: each at most once, got {self.wires}")
        extra = sorted(set(self.wire_names) - set(self.wires))
        if extra:
            raise ValueError(f"wire_names names wire(s) not in wires: {', '.join(extra)}")
        if self.version is None and self.install is not None:
            self.version = self.install.version
        return self

    @property
    def wire(self) -> str:
        return self.wires[0]

    def resolve(self, rel: str) -> Path:
        """A path of the spec (``executable``, ``paths``) as an absolute host path."""
        p = Path(rel).expanduser()
        return p if p.is_absolute() else (self.spec_dir / p).resolve()

    def local_executable(self) -> Path | None:
        """``executable`` as a file beside the spec, if it is written as a path (not a bare name)."""
        if not self.executable or ("/" not in self.executable and not self.executable.startswith((".", "~"))):
            return None
        return self.resolve(self.executable)


def is_spec_path(name: object) -> bool:
    """Whether a harness name is a spec file path (ends in .yaml / .yml / .toml)."""
    return isinstance(name, (str, Path)) and str(name).lower().endswith(SPEC_SUFFIXES)


def _problems(e: ValidationError, where: str) -> list[str]:
    out = []
    for err in e.errors():
        loc = ".".join(str(x) for x in err["loc"] if not str(x).startswith(("function-after", "literal[")))
        msg = err["msg"].removeprefix("Value error, ")
        out.append(f"{where}: {loc + ': ' if loc else ''}{msg}")
    return out


def parse_spec(data: Any, *, where: str, spec_dir: Path = Path("."), spec_path: Path | None = None) -> HarnessSpec:
    """A spec from already parsed data; every problem raised at once as a :class:`ConfigError`."""
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: a harness spec is a mapping (name, wires, command, …), not {type(data).__name__}")
    try:
        return HarnessSpec.model_validate({**data, "spec_dir": spec_dir, "spec_path": spec_path})
    except ValidationError as e:
        raise ConfigError(_problems(e, where)) from None


def load_spec(path: str | Path) -> HarnessSpec:
    """Read a harness spec file (YAML or TOML); a missing or malformed file is a :class:`ConfigError`."""
    p = Path(path).expanduser()
    if not p.is_file():
        raise ConfigError(f"harness spec {path}: no such file")
    text = p.read_text()
    try:
        if p.suffix.lower() == ".toml":
            import tomllib

            data = tomllib.loads(text)
        else:
            import yaml

            data = yaml.safe_load(text)
    except Exception as e:  # the parser's own message says where
        raise ConfigError(f"harness spec {path}: cannot parse it: {e}") from None
    return parse_spec(data, where=str(path), spec_dir=p.resolve().parent, spec_path=p.resolve())
