"""The openforge exception tree. A failed rollout is data (a status on its trajectory), not a crash;
these exceptions are for callers' mistakes and for infrastructure the framework cannot work around.

::

    ForgeError
    ├── ConfigError            bad config / CLI input (all problems listed at once)
    ├── StoreError             unusable store / export file, or data a store refuses
    │   ├── StoreLocked        another process held the store's lock past the timeout
    │   ├── StoreForeign       a SQLite database that is not an openforge store
    │   └── StoreCorrupt       not a database at all, or a damaged one
    ├── BackendError           the policy back-end failed or timed out (→ infra_error)
    │   └── BackendTimeout
    ├── HarnessError           harness not installed, crashed, misconfigured (→ harness_error)
    │   └── HarnessNotInstalled
    ├── EnvironmentError_      environment setup or verifier failed (→ env_error)
    ├── SandboxError           launcher could not provision / a pod was lost (→ infra_error)
    └── ProxyError             wire-level problem, carries an HTTP status and the API's error shape
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "BackendError",
    "BackendTimeout",
    "ConfigError",
    "EnvironmentError_",
    "ForgeError",
    "HarnessError",
    "HarnessNotInstalled",
    "ProxyError",
    "SandboxError",
    "StoreCorrupt",
    "StoreError",
    "StoreForeign",
    "StoreLocked",
]


class ForgeError(Exception):
    """Base class of every error openforge raises on purpose."""


class ConfigError(ForgeError):
    def __init__(self, problems: list[str] | str):
        self.problems = [problems] if isinstance(problems, str) else list(problems)
        super().__init__("invalid configuration:\n" + "\n".join(f"  - {p}" for p in self.problems))


class StoreError(ForgeError):
    pass


class StoreLocked(StoreError):
    """Another process held the store's lock longer than the timeout (retry, or raise ``timeout_s``)."""


class StoreForeign(StoreError):
    """The file is a SQLite database, but not an openforge store (wrong path?)."""


class StoreCorrupt(StoreError):
    """The file is not a database, or its database is damaged."""


class BackendError(ForgeError):
    pass


class BackendTimeout(BackendError):
    pass


class HarnessError(ForgeError):
    pass


class HarnessNotInstalled(HarnessError):
    pass


class EnvironmentError_(ForgeError):
    pass


class SandboxError(ForgeError):
    pass


class ProxyError(ForgeError):
    def __init__(self, message: str, status: int = 400, *, param: str | None = None, kind: str = "invalid_request_error",
                 details: dict[str, Any] | None = None, code: str | None = None):
        super().__init__(message)
        self.message = message
        self.status = status
        self.param = param
        self.kind = kind
        self.details = details  # machine-readable extras of the API's error shape (Anthropic ``error.details``)
        self.code = code  # OpenAI's machine-readable error code (e.g. context_length_exceeded)


class ContextOverflow(ProxyError):
    """A prompt that does not fit the policy's context (a 400 in the called API's terms). The proxy
    records it as a ``context_overflow`` call: the policy's own doing, trained as a failure."""

    def __init__(self, message: str, *, n_tokens: int, limit: int, **kw: Any):
        super().__init__(message, 400, **kw)
        self.n_tokens, self.limit = n_tokens, limit
