"""The generated claw streams: held-out instances never reach the train stream, a seed fixes the
streams, reference solutions pass their own checks in real sandboxes, and partial credit never turns
into a success (a do-nothing or degenerate agent scores no success and bounded reward)."""

from __future__ import annotations

import asyncio
import json
import random

import pytest

from openforge.envs.claw import ClawEnvironment
from openforge.envs.claw.credit import PARTIAL_CAP, partial_credit
from openforge.envs.claw.gen_families import FAMILIES, pools
from openforge.envs.claw.generated import GenOptions, stream, streams
from openforge.errors import ConfigError
from openforge.launchers.base import SandboxSpec
from openforge.launchers.local import LocalLauncher


def _values(p) -> set[str]:
    return {v for f in p.__dataclass_fields__ for v in getattr(p, f)}


def test_pools_are_disjoint_and_nonempty():
    train, held = pools("train"), pools("heldout")
    for f in train.__dataclass_fields__:
        assert getattr(train, f) and getattr(held, f), f
        assert not set(getattr(train, f)) & set(getattr(held, f)), f


def _drawn(key: tuple[str, ...]) -> set[str]:
    """The pool values an instance key holds (file names without their suffix, JSON leaves)."""
    out: set[str] = set()
    for v in key:
        if v.startswith("{"):
            stack = [json.loads(v)]
            while stack:
                x = stack.pop()
                stack += list(x.values()) if isinstance(x, dict) else []
                out |= {x} if isinstance(x, str) else set()
        else:
            out.add(v.removesuffix(".txt").removesuffix(".sh").removesuffix("_old"))
    return out


@pytest.mark.parametrize("seed", range(12))
def test_train_stream_never_holds_a_heldout_instance(seed):
    """Property over seeds: no train key equals a held-out key of any seed, no train instance shows a
    held-out-only value (in its instruction, files or setup), and no two instances share an id."""
    rng = random.Random(seed)
    train = stream("train", 120, seed=seed)
    held = {g.key for s in {seed, rng.randrange(10_000), rng.randrange(10_000)} for g in stream("heldout", 40, seed=s)}
    assert not {g.key for g in train} & held
    only_held = _values(pools("heldout"))
    for g in train:
        leaked = _drawn(g.key) & only_held
        assert not leaked, (g.spec.id, leaked)
    tr, ho = streams(GenOptions(train=120, heldout=40, seed=seed))
    ids = [g.spec.id for g in (*tr, *ho)]
    assert len(set(ids)) == len(ids) and {g.spec.split for g in tr} == {"train"} and {g.spec.split for g in ho} == {"heldout"}


def test_the_exclusion_holds_even_for_a_shared_key():
    """The key exclusion is a second layer: a key handed in as held-out is skipped by the train stream."""
    first = stream("train", 9, seed=3)
    again = stream("train", 9, seed=3, exclude=frozenset({first[0].key}))
    assert first[0].key not in {g.key for g in again} and len(again) == 9


def test_a_seed_fixes_the_streams():
    a = streams(GenOptions(train=40, heldout=20, seed=7))
    b = streams(GenOptions(train=40, heldout=20, seed=7))
    c = streams(GenOptions(train=40, heldout=20, seed=8))

    def flat(s):
        return [(g.spec.id, g.spec.instruction, g.spec.files, g.spec.setup, g.spec.solution, g.spec.services)
                for part in s for g in part]

    assert flat(a) == flat(b) and flat(a) != flat(c)
    assert {g.spec.category for g in a[0]} == set(FAMILIES)  # every family in turn


def test_instances_vary_within_a_family():
    train = [g for g in stream("train", 90, seed=0) if g.spec.category == "files-create"]
    assert len({g.spec.instruction.split()[0] for g in train}) >= 2  # phrasings
    assert len({g.key for g in train}) == len(train) == 10


def test_options_are_checked_in_their_own_terms():
    for bad, word in [({"trian": 3}, "unknown key"), ({"families": ["nope"]}, "families"),
                      ({"train": -1}, "whole number"), ("yes", "mapping")]:
        with pytest.raises(ConfigError, match=word):
            GenOptions.parse(bad)
    with pytest.raises(ConfigError, match="fewer instances"):
        stream("heldout", 400, families=["issues-close"])
    env = ClawEnvironment(generated={"train": 18, "heldout": 9, "families": ["files-create", "git-tag"]})
    assert len(env.tasks("train")) == 18 and len(env.tasks("heldout")) == 9 and not env.tasks("eval")
    assert {t.category for t in env.tasks()} == {"files-create", "git-tag"}


def test_options_from_a_config_object_are_a_mapping():
    """veRL hands the options over as OmegaConf containers (DictConfig, ListConfig): they are mappings."""
    omegaconf = pytest.importorskip("omegaconf")
    got = GenOptions.parse(omegaconf.OmegaConf.create({"train": 8, "seed": 1, "families": ["git-tag", "json-extract"]}))
    assert (got.train, got.seed, got.families) == (8, 1, ("git-tag", "json-extract"))


def test_partial_credit_is_never_a_success():
    assert partial_credit({"a": True, "b": True, "kept": True}, ["a", "b"]).reward == 1.0
    assert partial_credit({"a": False, "b": False, "kept": True}, ["a", "b"]).reward == 0.0  # guard alone: nothing
    r = partial_credit({"a": True, "b": False, "kept": True}, ["a", "b"])
    assert 0 < r.reward <= PARTIAL_CAP < 1 and r.rewards == {"a": 1.0, "b": 0.0, "kept": 1.0}
    with pytest.raises(ValueError):
        partial_credit({"a": True}, ["z"])


def test_only_every_check_passing_is_a_success():
    """What the held-out table counts (status ``success``: reward ≥ the runs' threshold, 1.0) is never
    reached by partial credit: the best partial score is a policy failure that still trains."""
    from openforge.outcome import OutcomeFacts, classify_outcome

    best_partial = partial_credit({"a": True, "b": True, "c": True, "kept": False}, ["a", "b", "c"])
    assert classify_outcome(OutcomeFacts(reward=best_partial.reward)).status.value == "policy_failure"
    full = partial_credit({"a": True, "kept": True}, ["a"])
    assert classify_outcome(OutcomeFacts(reward=full.reward)).status.value == "success"


# -- real sandboxes ------------------------------------------------------------------------------

ENV = ClawEnvironment(generated={"train": 18, "heldout": 9, "seed": 11})


@pytest.fixture(scope="module")
def launcher(tmp_path_factory):
    launcher = LocalLauncher(base_dir=tmp_path_factory.mktemp("sbx"))
    yield launcher
    asyncio.run(launcher.aclose())


async def _run(launcher, task, commands):
    spec = SandboxSpec(rollout_id=f"gen-{task.id}-{len(commands)}", task=task, proxy_url="http://127.0.0.1:9",
                       api_key="k", hidden_paths=ENV.hidden_paths(task))
    sbx = await launcher.start(spec)
    try:
        await ENV.setup(task, sbx)
        env = ENV.harness_env(task, sbx)
        for cmd in commands:
            await sbx.exec(["sh", "-c", cmd], env=env, timeout_s=60)
        return await ENV.verify(task, sbx)
    finally:
        await ENV.teardown(task, sbx)
        await sbx.close()


#: degenerate policies: wipe the workdir; write a plausible guess into every likely answer file
DEGENERATE = ["rm -rf ./* ./.[!.]*",
              "for f in answer.txt count.txt result.txt host.txt port.txt region.txt user.txt; do echo 0 > $f; done"]


@pytest.mark.slow
async def test_reference_passes_and_degenerate_agents_get_no_success(launcher):
    """One instance of every family from each stream: the reference solution scores 1.0 (a success);
    doing nothing scores 0; degenerate policies never succeed and earn at most the partial cap."""
    tasks = {}
    for t in ENV.tasks():
        tasks.setdefault((t.category, t.split), t)
    sem = asyncio.Semaphore(4)

    async def all_of(task):
        async with sem:
            good = await _run(launcher, task, ENV.reference_solution(task))
            idle = await _run(launcher, task, [])
            bad = [await _run(launcher, task, [d]) for d in DEGENERATE]
        return task, good, idle, bad

    problems = []
    for task, good, idle, bad in await asyncio.gather(*(all_of(t) for t in tasks.values())):
        if good.reward != 1.0:
            problems.append(f"{task.id}: reference got {good.reward} ({good.detail})")
        if idle.reward != 0.0:
            problems.append(f"{task.id}: doing nothing got {idle.reward} ({idle.detail})")
        problems += [f"{task.id}: degenerate got {b.reward} ({b.detail})" for b in bad if b.reward > PARTIAL_CAP]
    assert len(tasks) == 2 * len(FAMILIES)
    assert not problems, "\n".join(problems)
