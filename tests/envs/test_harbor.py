"""Harbor task directories as an environment (openforge/envs/harbor*.py), on a folder of Harbor tasks
written for the tests (``harbor_fixtures``): the oracle solution scores 1, doing nothing 0, a test.sh that
writes no reward is ``env_error``, a base image the host lacks is refused before the run — in real
bubblewrap sandboxes and through ``forge env tasks`` / ``forge rollout``; and the agent cannot reach
``tests/``, ``solution/``, the reward directory or what the Dockerfile's RUN installed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from openforge.core.errors import ConfigError, EnvironmentError_
from openforge.envs.harbor import HarborEnvironment
from openforge.envs.harbor_dockerfile import Unsupported, host_bases, parse_dockerfile
from openforge.launchers.base import SandboxSpec
from openforge.launchers.local import LocalLauncher
from openforge.plugins import make_environment

from .harbor_fixtures import PY, make_harbor_folder

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return make_harbor_folder(tmp_path_factory.mktemp("harbor") / "dataset")


@pytest.fixture(scope="module")
def env(folder):
    return make_environment(str(folder))


def test_folder_is_detected_and_read(env):
    assert isinstance(env, HarborEnvironment)
    assert sorted(t.id for t in env.tasks()) == ["greet-wheel", "silent-verifier", "sum-files"]
    t = env.task("greet-wheel")
    assert t.instruction.startswith("Write the value") and "canary" not in t.instruction  # Harbor strips it
    assert (t.timeout_s, t.resources.cpu, t.resources.memory_mb, t.category) == (120.0, 1.0, 1024, "python")
    assert t.metadata["difficulty"] == "easy"
    spec = t.metadata["harbor"]
    assert spec["workdir"] == "/app" and spec["env"] == {"GREETING": "hello"} and not spec["allow_internet"]
    assert env.task("sum-files").metadata["harbor"]["workdir"] == "/work/project"


def test_unsupported_base_is_refused_before_the_run_naming_task_and_line(env):
    assert "cuda-base" not in [t.id for t in env.tasks()]
    with pytest.raises(ConfigError) as e:
        env.task("cuda-base")
    msg = str(e.value)
    assert "cuda-base" in msg and "Dockerfile:1" in msg and "FROM nvidia/cuda:12.4.0-devel-ubuntu22.04" in msg
    assert "host_bases" in msg and "Kubernetes" in msg


def test_task_toml_is_lenient_on_unknown_keys_strict_on_types(tmp_path):
    d = make_harbor_folder(tmp_path / "ds", unsupported=False, silent=False)
    toml = d / "sum-files" / "task.toml"
    toml.write_text(toml.read_text() + '[future]\nthing = 1\n[agent]\nbrand_new = "x"\n')
    assert "sum-files" in [t.id for t in HarborEnvironment(d).tasks()]
    toml.write_text('[agent]\ntimeout_sec = "ten"\n[environment]\nallow_internet = "no"\n')
    with pytest.raises(ConfigError) as e:
        HarborEnvironment(d)
    assert "[agent] timeout_sec must be a number of seconds, got 'ten'" in str(e.value)
    assert "[environment] allow_internet must be true or false" in str(e.value)


@pytest.mark.parametrize("dockerfile, why", [
    ("FROM ubuntu:99.04\n", "not this host"),
    (f"FROM {PY}\nRUN apt-get update && apt-get install -y curl\n", "system packages (apt-get)"),
    (f"FROM {PY} AS build\nFROM {PY}\n", "multi-stage"),
    (f"FROM {PY}\nWORKDIR /app\nCOPY x.txt /etc/x.txt\n", "outside the task's workdir"),
    (f"FROM {PY}\nCOPY --from=build /out /app\n", "another image"),
    (f"FROM {PY}\nADD https://example.com/x.tgz /app/\n", "URL"),
    (f"FROM {PY}\nSHELL [\"/bin/zsh\", \"-c\"]\n", "SHELL cannot be honoured"),
])
def test_dockerfile_lines_the_host_cannot_honour(dockerfile, why):
    with pytest.raises(Unsupported) as e:
        parse_dockerfile(dockerfile, host_bases())
    assert why in str(e.value) and "environment/Dockerfile:" in str(e.value)


def test_dockerfile_recipe():
    r = parse_dockerfile(f"FROM docker.io/library/{PY}@sha256:abc\nARG V=1\nWORKDIR /app\n"
                         "ENV A=x \\\n    PATH=/app/bin:$PATH\nCOPY src/ ./src/\nWORKDIR sub\nRUN make V=$V\n"
                         "WORKDIR /app\nCMD [\"x\"]\n", host_bases())
    assert r.workdir == "/app" and r.env["A"] == "x" and r.env["PATH"].startswith("/app/bin:")
    copy, run = r.steps
    assert copy.dest == "/app/src" and copy.dest_is_dir
    assert run.cwd == "/app/sub" and run.argv == ("sh", "-c", "make V=$V") and dict(run.env)["V"] == "1"
    assert parse_dockerfile("FROM myorg/base:1\n", host_bases(("myorg/base:1",))).base == "myorg/base:1"


async def _rollout(env, task, script, tmp_path, *, verify=True):
    launcher = LocalLauncher(base_dir=tmp_path / "sbx")
    sbx = await launcher.start(SandboxSpec(rollout_id=f"h-{task.id}", task=task, proxy_url="", api_key="k",
                                           hidden_paths=env.hidden_paths(task)))
    try:
        await env.setup(task, sbx)
        out = None
        if script is not None:
            out = await sbx.exec(["bash", "-c", script], env=env.harness_env(task, sbx), cwd=sbx.workdir, timeout_s=60)
        await sbx.end_agent()
        return (await env.verify(task, sbx) if verify else None), out
    finally:
        await env.teardown(task, sbx)
        await sbx.close()
        await launcher.aclose()


async def test_oracle_succeeds_nothing_scores_zero_no_reward_is_env_error(env, tmp_path):
    for tid in ("greet-wheel", "sum-files"):
        task = env.task(tid)
        good, out = await _rollout(env, task, env.reference_solution(task)[0], tmp_path)
        assert out.returncode == 0, out.stderr
        bad, _ = await _rollout(env, task, None, tmp_path)
        assert (good.reward, bad.reward) == (1.0, 0.0), (tid, good, bad)
    good, _ = await _rollout(env, env.task("sum-files"), env.reference_solution(env.task("sum-files"))[0], tmp_path)
    assert good.rewards == {"reward": 1.0, "correct": 1.0, "format": 1.0}  # reward.json: named rewards
    task = env.task("silent-verifier")
    with pytest.raises(EnvironmentError_, match="wrote no reward"):
        await _rollout(env, task, env.reference_solution(task)[0], tmp_path)


async def test_the_agent_sees_the_task_paths_but_none_of_the_hidden_files(env, tmp_path):
    task = env.task("greet-wheel")
    tdir = task.metadata["task_dir"]
    probe = (f"pwd; ls -A /solution | wc -l; test -e /tests && echo TESTS; ls {tdir}/tests 2>/dev/null | wc -l; "
             "test -e /logs/verifier && echo LOGS; ls /app; python3 -c 'import tinypkg; print(tinypkg.greet())'")
    _, out = await _rollout(env, task, probe, tmp_path, verify=False)
    lines = out.stdout.split()
    assert lines[:3] == ["/app", "0", "0"], out.stdout + out.stderr  # cwd /app; /solution empty; no tests
    assert "TESTS" not in lines and "LOGS" not in lines and "wheels" in lines and "hello" in lines


async def test_a_reward_the_agent_plants_never_counts(env, tmp_path):
    """The agent writes reward files wherever it can, and a sitecustomize.py into what RUN installed
    (which every python3 of test.sh would import): the verifier still finds no reward (env_error)."""
    task = env.task("silent-verifier")
    plant = ("mkdir -p /logs/verifier 2>/dev/null; echo 1 > /logs/verifier/reward.txt 2>/dev/null; "
             "echo 1 > reward.txt; mkdir -p logs/verifier && echo 1 > logs/verifier/reward.txt; "
             "for d in $(echo $PYTHONPATH | tr : ' '); do "
             "echo \"open('/logs/verifier/reward.txt','w').write('1')\" > $d/sitecustomize.py 2>/dev/null "
             "&& echo PLANTED; done; true")
    with pytest.raises(EnvironmentError_, match="wrote no reward"):
        _, out = await _rollout(env, task, plant, tmp_path)
    _, out = await _rollout(env, task, plant, tmp_path, verify=False)
    assert "PLANTED" not in out.stdout, "what RUN installed must be read-only for the agent"


def _forge(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-m", "openforge.cli.main", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=500)


def test_forge_env_tasks_and_images(folder, tmp_path):
    p = _forge("env", "tasks", str(folder), "--json", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert sorted(r["id"] for r in json.loads(p.stdout)) == ["greet-wheel", "silent-verifier", "sum-files"]
    p = _forge("env", "images", str(folder), "--registry", "reg.example/harbor", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert f"docker build -t reg.example/harbor/cuda-base:latest {folder}/cuda-base/environment" in p.stdout
    assert "docker push reg.example/harbor/greet-wheel:latest" in p.stdout


def test_forge_rollout_oracle_and_refusal(folder, tmp_path):
    out = tmp_path / "out"
    p = _forge("rollout", "--env", str(folder), "--task", "greet-wheel", "--reference", "-o", str(out), cwd=tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    traj = json.loads((out / "trajectory.json").read_text())
    assert traj["status"] == "success" and traj["reward"] == 1.0
    p = _forge("rollout", "--env", str(folder), "--task", "silent-verifier", "--reference", "-o", str(out / "s"),
               cwd=tmp_path)
    traj = json.loads((out / "s" / "trajectory.json").read_text())
    assert traj["status"] == "env_error" and "wrote no reward" in traj["error"]
    p = _forge("rollout", "--env", str(folder), "--task", "cuda-base", "--reference", "-o", str(out / "c"),
               cwd=tmp_path)
    assert p.returncode != 0 and not (out / "c" / "trajectory.json").exists()
    assert "cuda-base" in p.stdout + p.stderr and "nvidia/cuda" in p.stdout + p.stderr


def _wrapper(tmp_path: Path, test_sh: str, planted: dict[str, str]) -> tuple[subprocess.CompletedProcess, Path]:
    """harbor_verify.py on directories of the test (the paths the sandbox gives it are arguments)."""
    task, work, app, logs, tests = (tmp_path / n for n in ("task", "work", "app", "logs", "tests"))
    (task / "tests").mkdir(parents=True)
    (task / "tests" / "test.sh").write_text(test_sh)
    work.mkdir()
    (work / "answer.txt").write_text("42\n")
    logs.mkdir()
    for name, body in planted.items():  # what an agent (in a pod: the same uid) may have left there
        (logs / name).write_text(body)
    verdict = tmp_path / "verdict.json"
    from openforge.envs import harbor_verify

    p = subprocess.run([sys.executable, "-I", "-S", harbor_verify.__file__, "--task-dir", str(task), "--workdir",
                        str(work), "--app", str(app), "--timeout", "30", "--logs", str(logs), "--tests", str(tests)],
                       env={**os.environ, "OPENFORGE_VERDICT": str(verdict)}, capture_output=True, text=True)
    return p, verdict


def test_a_reward_file_present_before_verification_never_counts(tmp_path):
    p, verdict = _wrapper(tmp_path, "#!/bin/bash\necho checked\n", {"reward.txt": "1\n", "reward.json": '{"reward": 1}'})
    assert p.returncode == 2 and "wrote no reward" in p.stderr and not verdict.exists()


def test_wrapper_reads_what_test_sh_wrote_in_a_copy_of_the_workdir(tmp_path):
    sh = (f'#!/bin/bash\nd={tmp_path}/logs\ntouch scratch.tmp\n'
          '[ "$(cat answer.txt)" = 42 ] && echo \'{"reward": 0.5, "style": 1, "ok": true}\' > $d/reward.json\n'
          'echo 0 > $d/reward.txt\n')
    p, verdict = _wrapper(tmp_path, sh, {})
    assert p.returncode == 0, p.stderr
    assert json.loads(verdict.read_text())["subscores"] == {"reward": 0.5, "style": 1.0, "ok": 1.0}  # json preferred
    assert json.loads(verdict.read_text())["reward"] == 0.5
    assert (tmp_path / "app" / "scratch.tmp").exists() and not (tmp_path / "work" / "scratch.tmp").exists()


def test_paths_a_sandbox_cannot_show_a_directory_at():
    from openforge.launchers._bwrap import bad_place

    assert bad_place("/app") is None and bad_place("/logs/verifier") is None and bad_place("/work/project") is None
    for bad in ("/usr/src/app", "/etc/x", "/tmp/app", "/proc/1", "app", "/a/../b", "/"):
        assert bad_place(bad), bad
