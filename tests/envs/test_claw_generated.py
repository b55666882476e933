"""The generated claw streams: held-out instances never reach the train stream, a seed fixes the
streams, reference solutions pass their own checks in real sandboxes, and partial credit pays for
progress only and never turns into a success (a do-nothing or degenerate agent scores 0)."""

from __future__ import annotations

import asyncio
import json
import random
import re

import pytest

from openforge.core.errors import ConfigError
from openforge.envs.claw import SPECS, ClawEnvironment
from openforge.envs.claw.credit import PARTIAL_CAP, Kind, partial_credit
from openforge.envs.claw.gen_families import FAMILIES, pools
from openforge.envs.claw.generated import GenOptions, stream, streams
from openforge.envs.claw.spec import Check, ClawSpec, exists, file_is, gone, intact, matches, sh
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


V, E, F, K = Kind.VALUE, Kind.EFFECT, Kind.FORMAT, Kind.INTACT  # K: kept intact


def test_partial_credit_is_never_a_success():
    kinds = {"a": V, "b": E, "kept": K}
    assert partial_credit({"a": True, "b": True, "kept": True}, kinds).reward == 1.0
    assert partial_credit({"a": False, "b": False, "kept": True}, kinds).reward == 0.0  # guard alone: nothing
    r = partial_credit({"a": True, "b": False, "kept": True}, kinds)
    assert r.reward == PARTIAL_CAP / 2 and r.rewards == {"a": 1.0, "b": 0.0, "kept": 1.0}


def test_partial_credit_pays_for_progress_only():
    """A passing format probe earns nothing; a failing guard takes progress credit away."""
    kinds = {"written": F, "value": V, "kept": K}
    assert partial_credit({"written": True, "value": False, "kept": True}, kinds).reward == 0.0
    two = {"written": F, "host": V, "port": V, "kept": K}
    assert partial_credit({"written": True, "host": True, "port": False, "kept": True}, two).reward == PARTIAL_CAP / 2
    r = partial_credit({"written": False, "host": True, "port": False, "kept": True}, two)
    assert r.reward == 0.0 and "guard written failed" in r.detail
    assert partial_credit({"written": True, "host": True, "port": False, "kept": False}, two).reward == 0.0


def test_partial_credit_refuses_untyped_or_guard_only_checks():
    with pytest.raises(ValueError, match="kind for every check"):
        partial_credit({"a": True, "b": False}, {"a": V})
    with pytest.raises(ValueError, match="progress check"):
        partial_credit({"a": True, "b": False}, {"a": F, "b": K})
    with pytest.raises(TypeError, match="Kind"):
        partial_credit({"a": True}, {"a": "value"})  # type: ignore[dict-item]


def test_a_format_probe_cannot_be_progress():
    """The kind belongs to the check: format helpers build guards, intact() makes a guard, an exit code
    alone needs its kind said, and a spec of guards only (or of bare functions) is refused."""
    assert exists("x").kind is F and matches("x", "[0-9]+").kind is F
    assert intact(file_is("x", "1")).kind is K and intact(exists("x")).kind is K
    assert file_is("x", "1").kind is V and sh("cat x", "1").kind is V and gone("x").kind is E
    with pytest.raises(ValueError, match="exit code"):
        sh("test -f x")
    with pytest.raises(ValueError, match="only guards"):
        ClawSpec("t", "files", "do it", [], {"exists": exists("x"), "kept": intact(file_is("y", "1"))})

    async def bare(ctx):
        return True

    with pytest.raises(TypeError, match="kind"):
        ClawSpec("t", "files", "do it", [], {"ok": bare})


def test_every_claw_check_is_typed():
    """Every hand-written and generated spec types its checks and has a progress check; the generated
    ones (and only they) are scored with partial credit."""
    gen = ClawEnvironment(generated=True)
    for spec in (*SPECS.values(), *gen._specs.values()):
        assert all(isinstance(c, Check) for c in spec.checks.values()), spec.id
        assert any(c.kind.progress for c in spec.checks.values()), spec.id
    assert not any(s.partial for s in SPECS.values()) and all(s.partial for s in gen._specs.values())


def test_only_every_check_passing_is_a_success():
    """What the held-out table counts (status ``success``: reward ≥ the runs' threshold, 1.0) is never
    reached by partial credit: the best partial score is a policy failure that still trains."""
    from openforge.core.outcome import OutcomeFacts, classify_outcome

    best_partial = partial_credit({"a": True, "b": True, "c": True, "kept": True, "d": False},
                                  {"a": V, "b": V, "c": V, "kept": K, "d": V})
    assert classify_outcome(OutcomeFacts(reward=best_partial.reward)).status.value == "policy_failure"
    full = partial_credit({"a": True, "kept": True}, {"a": V, "kept": K})
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
    doing nothing and degenerate policies score 0 (tests/envs/test_claw_junk.py runs more junk on more
    instances)."""
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
        problems += [f"{task.id}: degenerate got {b.reward} ({b.detail})" for b in bad if b.reward != 0.0]
    assert len(tasks) == 2 * len(FAMILIES)
    assert not problems, "\n".join(problems)


def _progress_only(task) -> list[str]:
    """Half of each two-step family's task done (from its reference solution), nothing broken."""
    ref = ENV.reference_solution(task)
    out = {"json-extract": [*ref, "f=$(ls address.txt endpoint.txt target.txt 2>/dev/null); sed -i 's/:.*/:1/' $f"],
           "files-append": [*ref, "for f in *.txt; do sed -i '$d' \"$f\"; done"],  # the list (the decoy is .md)
           "shell-chmod": [ref[0].split(" && ")[0]],
           "notes-create": [re.sub(r'"body": "[^"]*"', '"body": "x"', ref[0])]}
    return out[task.category]


@pytest.mark.slow
async def test_progress_earns_partial_credit_and_a_broken_guard_takes_it(launcher):
    """Real progress still shapes the gradient: one of two progress checks passed earns half the cap
    (the right host with a wrong port, the first of two lines, the chmod without the run, the note's
    title without its body), and the same progress with the input file changed earns 0."""
    picks = {}
    for t in ENV.tasks():
        if t.category in ("json-extract", "files-append", "shell-chmod", "notes-create"):
            picks.setdefault(t.category, t)
    assert len(picks) == 4
    for fam, task in picks.items():
        got = await _run(launcher, task, _progress_only(task))
        assert got.reward == PARTIAL_CAP / 2, (fam, got)
    task = picks["json-extract"]
    broken = await _run(launcher, task, [*_progress_only(task), "echo x >> config.json"])
    assert broken.reward == 0.0 and "guard kept failed" in broken.detail, broken
