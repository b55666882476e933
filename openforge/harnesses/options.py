"""What options a harness takes, derived from its constructor, and the check of a config's options.

Owns: :func:`harness_options` (a harness class → its keyword options, read from the ``__init__``
signatures along its MRO: a constructor that takes ``**kw`` is taken to hand them to its base class,
as every built-in does; when no base class's constructor takes them the harness is open, and its
options are not checked) and :func:`option_problems` (every unknown or mistyped option of one harness,
in the caller's dotted config keys, e.g. ``harness.options.max_turns: not an option of pi; options:
binary, env, extra_args, wire_api``). Types are checked against the parameters' annotations with
pydantic; an annotation pydantic cannot check is not checked.

The harness class is found through the plugin registry, so third-party harnesses registered under
``openforge.harnesses`` are checked the same way.
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Mapping
from typing import Any

__all__ = ["harness_options", "option_problems"]


def _own_init(cls: type) -> Any:
    return cls.__dict__.get("__init__")


def harness_options(cls: type) -> dict[str, inspect.Parameter] | None:
    """Keyword options of harness class ``cls`` with their parameters (annotation resolved where it
    can be), or None when a constructor takes ``**kw`` that no base class accounts for (open)."""
    out: dict[str, inspect.Parameter] = {}
    for klass in cls.__mro__:
        init = _own_init(klass)
        if init is None:
            continue
        if klass is object:  # reached only through a ``**kw`` no base takes: the harness keeps them itself
            return None
        try:
            hints = typing.get_type_hints(init)
        except Exception:  # an annotation that does not resolve here: leave it unchecked
            hints = {}
        sig = inspect.signature(init)
        forwards = False
        for pname, p in list(sig.parameters.items())[1:]:  # drop self
            if p.kind is p.VAR_KEYWORD:
                forwards = True
            elif p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD) and pname not in out:
                out[pname] = p.replace(annotation=hints.get(pname, inspect.Parameter.empty))
        if not forwards:
            return out
    return None  # pragma: no cover - every MRO ends in object


def _type_problem(param: inspect.Parameter, value: Any) -> str | None:
    if param.annotation is inspect.Parameter.empty:
        return None
    from pydantic import TypeAdapter, ValidationError

    try:
        adapter: TypeAdapter[Any] = TypeAdapter(param.annotation)
    except Exception:  # not a type pydantic can check (e.g. os.PathLike)
        return None
    try:
        adapter.validate_python(value, strict=False)
    except ValidationError as e:
        return "; ".join(err["msg"] for err in e.errors())
    return None


def option_problems(harness: str, options: Mapping[str, Any], where: str, *, name_key: str | None = None) -> list[str]:
    """Every problem with ``options`` for the registered harness ``harness``, each prefixed with
    ``where`` (``harness.options``); an unknown harness is reported under ``name_key`` (default
    ``where``)."""
    from ..core.errors import ConfigError
    from ..plugins import harness_class

    try:
        cls = harness_class(harness)
    except ConfigError as e:
        return [f"{name_key or where}: {p}" for p in e.problems]
    known = harness_options(cls)
    if known is None:
        return []
    problems = []
    for key, value in options.items():
        param = known.get(key)
        if param is None:
            problems.append(f"{where}.{key}: not an option of {harness}; options: {', '.join(sorted(known)) or 'none'}")
        elif (why := _type_problem(param, value)) is not None:
            problems.append(f"{where}.{key}: {why} (got {value!r})")
    return problems
