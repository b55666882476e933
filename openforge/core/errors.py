"""The openforge exception tree. A failed rollout is data (a status on its trajectory), not a crash;
these exceptions are for callers' mistakes and for infrastructure the framework cannot work around.

Each class also derives from the stdlib exception that says what kind of failure it is (second
column), so ``except ValueError`` / ``except TimeoutError`` code written without openforge in mind
still catches it; and each survives ``pickle`` with its fields (``status``, ``code``, ``problems``,
...), so it crosses process boundaries (a token worker, a Ray / veRL worker) intact::

    ForgeError                              root: every error openforge raises on purpose
    ├── ConfigError            ValueError   bad config / CLI input (all problems listed at once)
    │   ├── PluginNotFound     LookupError  no harness / environment / launcher / back-end / recipe by that name
    │   └── PluginUnavailable  ImportError  a plugin whose module or dependency cannot be imported (+ the pip extra)
    ├── StoreError             RuntimeError unusable store / export file, or data a store refuses
    │   ├── StoreLocked        TimeoutError another process held the store's lock past the timeout
    │   ├── StoreForeign                    a SQLite database that is not an openforge store
    │   └── StoreCorrupt                    not a database at all, or a damaged one
    ├── BackendError           RuntimeError the policy back-end failed or timed out (→ infra_error)
    │   └── BackendTimeout     TimeoutError
    ├── HarnessError           RuntimeError harness not installed, crashed, misconfigured (→ harness_error)
    │   └── HarnessNotInstalled
    ├── EnvError               RuntimeError environment setup or verifier failed (→ env_error); alias EnvironmentError_
    ├── SandboxError           RuntimeError launcher could not provision / a pod was lost (→ infra_error)
    │   ├── SandboxFileNotFound FileNotFoundError  ``Sandbox.read_file`` of a file that is not there (a
    │   │                                   verifier that lets it escape scores the rollout 0: policy_failure)
    │   └── SandboxFileRefused              ``Sandbox.read_file`` of a file the driver will not read: a FIFO,
    │                                       socket, device, directory or symlink, or one over the size cap
    │                                       (the agent's doing: policy_failure, reward 0, like a missing file)
    ├── AgentOutputError       ValueError   a verifier found the agent's output unusable (→ policy_failure, reward 0)
    └── ProxyError             RuntimeError wire-level problem, carries an HTTP status and the API's error shape
        └── ContextOverflow    ValueError   a prompt longer than the policy's context (a 400)
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "AgentOutputError",
    "BackendContextOverflow",
    "BackendError",
    "BackendTimeout",
    "ConfigError",
    "ContextOverflow",
    "EnvError",
    "EnvironmentError_",
    "ForgeError",
    "HarnessError",
    "HarnessNotInstalled",
    "PicklableError",
    "PluginNotFound",
    "PluginUnavailable",
    "ProxyError",
    "SandboxError",
    "SandboxFileNotFound",
    "SandboxFileRefused",
    "StoreCorrupt",
    "StoreError",
    "StoreForeign",
    "StoreLocked",
    "TrainingStopped",
]


def _rebuild(cls: type[BaseException], args: tuple[Any, ...], state: dict[str, Any]) -> BaseException:
    """Unpickle an error without calling its ``__init__`` (whose signature need not match ``args``)."""
    base: type = cls
    while base.__module__ != "builtins":  # the builtin class whose ``__new__`` lays the object out
        base = base.__base__
    err = base.__new__(cls, *args)
    err.args = args
    err.__dict__.update(state)
    return err


class PicklableError(Exception):
    """Pickles as its class, ``args`` and attributes, whatever its ``__init__`` takes.

    The default (``cls(*args)``) breaks as soon as ``__init__`` takes other parameters than the
    message: ``ContextOverflow`` could not be unpickled at all (its ``n_tokens`` / ``limit`` are
    required) and ``ConfigError`` came back as "invalid configuration: - invalid configuration: ..."."""

    def __reduce__(self) -> tuple[Any, ...]:
        return _rebuild, (type(self), self.args, dict(self.__dict__))


class ForgeError(PicklableError):
    """Base class of every error openforge raises on purpose."""


class ConfigError(ForgeError, ValueError):
    def __init__(self, problems: list[str] | str):
        self.problems = [problems] if isinstance(problems, str) else list(problems)
        super().__init__("invalid configuration:\n" + "\n".join(f"  - {p}" for p in self.problems))


class PluginNotFound(ConfigError, LookupError):
    """No plugin of that kind by that name; the message lists the known names."""


class PluginUnavailable(ConfigError, ImportError):
    """A plugin that cannot be imported. ``missing`` is the module that is not installed (``None``
    if the import failed otherwise); ``install`` the command that installs it, when known
    (``pip install 'openforge-rl[browser]'``)."""

    def __init__(self, problems: list[str] | str, *, missing: str | None = None, install: str | None = None):
        super().__init__(problems)
        self.missing = missing
        self.install = install


class StoreError(ForgeError, RuntimeError):
    pass


class StoreLocked(StoreError, TimeoutError):
    """Another process held the store's lock longer than the timeout (retry, or raise ``timeout_s``)."""


class StoreForeign(StoreError):
    """The file is a SQLite database, but not an openforge store (wrong path?)."""


class StoreCorrupt(StoreError):
    """The file is not a database, or its database is damaged."""


class TrainingStopped(ForgeError, RuntimeError):
    """A training step asked to stop (Ctrl-C) returned between micro-batches: the micro-batch in
    flight was finished, its gradient dropped, no optimizer step taken for it."""


class BackendError(ForgeError, RuntimeError):
    pass


class BackendTimeout(BackendError, TimeoutError):
    pass


class BackendContextOverflow(BackendError, ValueError):
    """A back-end found that a prompt of ``n_tokens`` does not fit its context of ``limit`` tokens (e.g. a
    server whose context length was not known in advance refused it). The proxy records the call as a
    ``context_overflow``, exactly as when it refuses the prompt itself: the outcome rule's business (the
    policy's failure once it has generated anything), never a back-end failure (``infra_error``)."""

    def __init__(self, message: str, *, n_tokens: int, limit: int):
        super().__init__(message)
        self.n_tokens, self.limit = n_tokens, limit


class HarnessError(ForgeError, RuntimeError):
    pass


class HarnessNotInstalled(HarnessError):
    pass


class EnvError(ForgeError, RuntimeError):
    """The environment's setup or verifier failed (→ ``env_error``). Also importable as
    ``EnvironmentError_``, its old name (whose ``_`` showed in every message and traceback)."""


EnvironmentError_ = EnvError


class SandboxError(ForgeError, RuntimeError):
    pass


class SandboxFileNotFound(SandboxError, FileNotFoundError):
    """:meth:`Sandbox.read_file <openforge.launchers.base.Sandbox.read_file>` of a path where there is
    no file: the agent did not write it (or removed it). Also a ``FileNotFoundError``, so ``except
    FileNotFoundError`` in a verifier catches it. A verifier that lets it escape is not broken: the
    rollout is scored 0 as a ``policy_failure`` (trained), never an ``env_error``. ``path`` is the
    path as the verifier asked for it."""

    def __init__(self, message: str, path: str = ""):
        super().__init__(message)
        self.path = path


class SandboxFileRefused(SandboxError):
    """:meth:`Sandbox.read_file <openforge.launchers.base.Sandbox.read_file>` of a path where the agent
    left something the driver will not read: not a regular file (a FIFO, socket, device, directory, or
    a symbolic link anywhere on the path: links are never followed), a file larger than the read's
    ``max_bytes``, or one made unreadable. Like a missing file it is the agent's doing: a verifier that
    lets it escape scores the rollout 0 as a ``policy_failure``. ``path`` is the path as the verifier
    asked for it, ``why`` the reason."""

    def __init__(self, message: str, path: str = "", why: str = ""):
        super().__init__(message)
        self.path, self.why = path, why


class AgentOutputError(ForgeError, ValueError):
    """A verifier found the agent's output unusable (a wrong type in its JSON answer, a file too large
    or not a regular file, data the verifier could not load): the agent's failure, not the verifier's.
    A verifier that raises it (or a task directory's verifier that exits 3) scores the rollout 0 as a
    ``policy_failure`` (trained), never an ``env_error``; the message is its detail. Raise it only
    for what the agent left, never for the verifier's own bug: that must stay an ``env_error``."""


class ProxyError(ForgeError, RuntimeError):
    def __init__(self, message: str, status: int = 400, *, param: str | None = None, kind: str = "invalid_request_error",
                 details: dict[str, Any] | None = None, code: str | None = None):
        super().__init__(message)
        self.message = message
        self.status = status
        self.param = param
        self.kind = kind
        self.details = details  # machine-readable extras of the API's error shape (Anthropic ``error.details``)
        self.code = code  # OpenAI's machine-readable error code (e.g. context_length_exceeded)


class ContextOverflow(ProxyError, ValueError):
    """A prompt that does not fit the policy's context (a 400 in the called API's terms). The proxy
    records it as a ``context_overflow`` call: the policy's own doing, trained as a failure."""

    def __init__(self, message: str, *, n_tokens: int, limit: int, **kw: Any):
        super().__init__(message, 400, **kw)
        self.n_tokens, self.limit = n_tokens, limit
