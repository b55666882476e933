"""The generated claw streams: a ``train`` and a ``heldout`` stream of task instances drawn from the
same seeded generators (:mod:`openforge.envs.claw.gen_families`), disjoint by construction.

Owns: :class:`GenOptions` (``env.options.generated`` of the claw environment: ``train`` and
``heldout`` instance counts, ``seed``, ``families``), :func:`stream` and :func:`streams`.

Disjointness has two layers: every name/value pool is cut into a train part and a held-out part
(:func:`~openforge.envs.claw.gen_families.pools`), so a training instance cannot contain a held-out
value whatever the seeds; and each instance has a canonical key (family + every drawn value), the
train stream skipping any key of the held-out stream. Ids are ``gen-<family>-<digest of the key>``:
the same instance has the same id in every run. A stream is a pure function of (stream, count, seed,
families): the same options give the same tasks in every process.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from ...core.errors import ConfigError
from .gen_families import FAMILIES, Draft, Pools, pools
from .spec import ClawSpec

__all__ = ["GenOptions", "GenSpec", "stream", "streams"]

#: consecutive duplicate draws after which a family counts as exhausted for a stream
_MAX_TRIES = 200


@dataclass(frozen=True)
class GenOptions:
    """How many instances each stream has, the seed, and which families (default: all)."""

    train: int = 64
    heldout: int = 20
    seed: int = 0
    families: tuple[str, ...] = field(default_factory=lambda: tuple(FAMILIES))

    @classmethod
    def parse(cls, value: object) -> GenOptions:
        """From ``env.options.generated`` (a mapping; ``True`` for the defaults), with errors in its terms."""
        if value is True:
            return cls()
        if not isinstance(value, Mapping):
            raise ConfigError(f"env.options.generated must be a mapping (train, heldout, seed, families), got {value!r}")
        unknown = sorted(set(value) - {"train", "heldout", "seed", "families"})
        if unknown:
            raise ConfigError(f"env.options.generated: unknown key(s) {unknown}; known: train, heldout, seed, families")
        fams = tuple(value.get("families") or FAMILIES)
        bad = [f for f in fams if f not in FAMILIES]
        if bad:
            raise ConfigError(f"env.options.generated.families: unknown {bad}; known: {sorted(FAMILIES)}")
        opts = cls(train=value.get("train", cls.train), heldout=value.get("heldout", cls.heldout),
                   seed=value.get("seed", cls.seed), families=fams)
        for k in ("train", "heldout", "seed"):
            v = getattr(opts, k)
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise ConfigError(f"env.options.generated.{k} must be a whole number ≥ 0, got {v!r}")
        return opts


@dataclass(frozen=True)
class GenSpec:
    """A generated instance: its spec (id and split set, scored with partial credit) and canonical key."""

    spec: ClawSpec
    key: tuple[str, ...]


def _id(family: str, key: tuple[str, ...]) -> str:
    return f"gen-{family}-{hashlib.sha256(repr(key).encode()).hexdigest()[:10]}"


def stream(name: str, n: int, *, seed: int = 0, families: Sequence[str] | None = None,
           exclude: frozenset[tuple[str, ...]] = frozenset()) -> list[GenSpec]:
    """``n`` distinct instances of stream ``name`` (``train``/``heldout``), families in turn, none whose
    key is in ``exclude``."""
    fams = list(families or FAMILIES)
    rng = random.Random(f"claw-gen:{name}:{seed}")
    pool = pools(name)
    seen: set[tuple[str, ...]] = set()
    out: list[GenSpec] = []
    for i in range(n):
        family = fams[i % len(fams)]
        draft = _draw(family, rng, pool, seen | exclude, name)
        seen.add(draft.key)
        spec = replace(draft.spec, id=_id(family, draft.key), split=name)
        out.append(GenSpec(spec, draft.key))
    return out


def _draw(family: str, rng: random.Random, pool: Pools, taken: set[tuple[str, ...]], name: str) -> Draft:
    for _ in range(_MAX_TRIES):
        draft = FAMILIES[family](rng, pool)
        if draft.key not in taken:
            return draft
    raise ConfigError(f"generated claw family {family!r} has no new {name} instance after {_MAX_TRIES} draws: "
                      "ask for fewer instances (env.options.generated) or more families")


def streams(opts: GenOptions) -> tuple[list[GenSpec], list[GenSpec]]:
    """(train, heldout) for ``opts``: the train stream skips every held-out key."""
    heldout = stream("heldout", opts.heldout, seed=opts.seed, families=opts.families)
    train = stream("train", opts.train, seed=opts.seed, families=opts.families,
                   exclude=frozenset(g.key for g in heldout))
    return train, heldout
