"""Run configuration: pydantic models (``extra="forbid"``), YAML loading, ``key=value`` overrides.

Owns: :class:`RunConfig` and its sections, :func:`load_config` (YAML file or dict + preset + overrides →
validated config) and :func:`dump_config`; every name is importable from ``openforge.config``. A key's
meaning is its field's ``description=``, where the key is defined: the config reference
(``docs/reference/config.md``) is generated from them. ``key=value`` overrides are parsed and merged by
:mod:`openforge.util.overrides` (:func:`parse_overrides`, :func:`apply_overrides`, re-exported here).

- :mod:`~openforge.config.base`: ``Section``, the base of every section (unknown keys refused).
- :mod:`~openforge.config.parts`: what a run is made of: :class:`ModelConfig`, :class:`EnvConfig`,
  :class:`HarnessConfig` (one harness or a weighted mix, per-harness options), :class:`LauncherConfig`.
- :mod:`~openforge.config.rollout`: :class:`RolloutConfig`, :class:`EvalConfig` and :class:`HeldoutConfig`.
- :mod:`~openforge.config.trainer`: :class:`TrainerConfig`, :class:`CPUTrainerConfig`, :class:`LoraConfig`,
  :class:`VerlConfig`, :class:`SFTConfig`, ``LossAgg``, ``SessionWeight``.
- :mod:`~openforge.config.run`: :class:`RunConfig` and the checks that span its sections.
- :mod:`~openforge.config.load`: :func:`load_config`, :func:`dump_config`, removed keys and error wording.

Every problem is reported at once: unknown keys, bad types, bad values and malformed overrides are
gathered into one :class:`~openforge.core.errors.ConfigError`, each named by its dotted key
(``rollout.group_size: Input should be greater than or equal to 2``), before anything starts.
"""

from __future__ import annotations

from ..util.overrides import apply_overrides, parse_overrides
from .load import REMOVED_KEYS, dump_config, load_config
from .parts import EnvConfig, HarnessConfig, LauncherConfig, ModelConfig
from .rollout import EvalConfig, HeldoutConfig, RolloutConfig
from .run import RunConfig
from .trainer import (
    CPUTrainerConfig,
    LoraConfig,
    LossAgg,
    SessionWeight,
    SFTConfig,
    TrainerConfig,
    VerlConfig,
)

__all__ = [
    "REMOVED_KEYS",
    "CPUTrainerConfig",
    "EnvConfig",
    "EvalConfig",
    "HarnessConfig",
    "HeldoutConfig",
    "LauncherConfig",
    "LoraConfig",
    "LossAgg",
    "ModelConfig",
    "RolloutConfig",
    "RunConfig",
    "SFTConfig",
    "SessionWeight",
    "TrainerConfig",
    "VerlConfig",
    "apply_overrides",
    "dump_config",
    "load_config",
    "parse_overrides",
]
