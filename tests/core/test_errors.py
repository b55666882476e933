"""Every exception class in the package, found by walking its modules: it survives a pickle round
trip with its fields (an error crossing a process boundary keeps its status, code, problems...), and
it derives from the stdlib exception that says what kind of failure it is. A new error class that
breaks either fails here without anyone listing it."""

from __future__ import annotations

import importlib
import inspect
import pickle
import pkgutil
from typing import Any

import pytest

import openforge
from openforge.core import errors

# roots with no stdlib meaning of their own (every subclass has one)
NO_COBASE = {errors.PicklableError, errors.ForgeError}
GENERIC = {BaseException, Exception, object}


def _all_error_classes() -> list[type[BaseException]]:
    for info in pkgutil.walk_packages(openforge.__path__, "openforge."):
        importlib.import_module(info.name)  # a module that cannot be imported fails here, loudly
    seen: set[type] = set()
    todo = [BaseException]
    while todo:
        for sub in todo.pop().__subclasses__():
            if sub not in seen:
                seen.add(sub)
                todo.append(sub)
    return sorted((c for c in seen if c.__module__.split(".")[0] == "openforge"), key=lambda c: c.__qualname__)


CLASSES = _all_error_classes()


def _value(i: int, annotation: Any) -> Any:
    """A distinct value of the parameter's annotated type (so a field that is lost or swapped shows)."""
    text = str(annotation)
    if "list" in text:
        return [f"problem {i}", f"problem {i + 1}"]
    if "dict" in text:
        return {"field": i}
    if "int" in text:
        return 600 + i
    if "float" in text:
        return 0.5 + i
    return f"value {i}"


def _build(cls: type[BaseException]) -> BaseException:
    """An instance with every ``__init__`` parameter set (defaults overridden too)."""
    if not any("__init__" in vars(c) for c in cls.__mro__ if c.__module__.split(".")[0] == "openforge"):
        return cls("what went wrong")
    params = [p for p in inspect.signature(cls.__init__).parameters.values()
              if p.name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    hints = {p.name: p.annotation for p in params}
    pos = [_value(i, hints[p.name]) for i, p in enumerate(params) if p.kind is not p.KEYWORD_ONLY]
    kw = {p.name: _value(i, hints[p.name]) for i, p in enumerate(params) if p.kind is p.KEYWORD_ONLY}
    return cls(*pos, **kw)


def test_discovery_finds_the_package_errors():
    names = {c.__qualname__ for c in CLASSES}
    assert {"ProxyError", "ContextOverflow", "ConfigError", "StoreLocked", "PluginUnavailable", "RemoteError",
            "PromptTooLong", "SegmentValidationError", "ClientGone", "WorkerCrashed"} <= names


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__qualname__)
def test_error_pickles_with_its_fields(cls):
    err = _build(cls)
    for proto in (2, pickle.HIGHEST_PROTOCOL):
        back = pickle.loads(pickle.dumps(err, protocol=proto))
        assert type(back) is cls
        assert back.args == err.args and str(back) == str(err)
        assert vars(back) == vars(err)


def test_proxy_error_keeps_its_status_across_processes():
    """The proxy's errors keep status, kind, code and details; ContextOverflow (required keyword
    fields) could not be unpickled at all before, ConfigError came back with its message nested."""
    e = errors.ProxyError("backend timed out", 503, kind="api_error", code="timeout", details={"s": 30})
    back = pickle.loads(pickle.dumps(e))
    assert (back.status, back.kind, back.code, back.details, back.message) == (503, "api_error", "timeout", {"s": 30},
                                                                                "backend timed out")
    c = pickle.loads(pickle.dumps(errors.ContextOverflow("too long", n_tokens=9000, limit=8192, code="ctx")))
    assert (c.n_tokens, c.limit, c.status, c.code) == (9000, 8192, 400, "ctx")
    cfg = pickle.loads(pickle.dumps(errors.ConfigError(["a: bad", "b: worse"])))
    assert cfg.problems == ["a: bad", "b: worse"] and str(cfg).count("invalid configuration") == 1


@pytest.mark.parametrize("cls", [c for c in CLASSES if c not in NO_COBASE], ids=lambda c: c.__qualname__)
def test_error_has_a_stdlib_cobase(cls):
    stdlib = [b for b in cls.__mro__ if b.__module__ == "builtins" and b not in GENERIC]
    assert stdlib, f"{cls.__module__}.{cls.__qualname__} derives from no stdlib exception but Exception"


def test_cobases_say_what_kind_of_failure():
    assert issubclass(errors.ConfigError, ValueError) and issubclass(errors.PluginNotFound, LookupError)
    assert issubclass(errors.PluginUnavailable, ImportError)
    assert issubclass(errors.BackendTimeout, TimeoutError) and issubclass(errors.StoreLocked, TimeoutError)
    assert issubclass(errors.ContextOverflow, ValueError) and issubclass(errors.SandboxError, RuntimeError)
