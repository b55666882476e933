"""Runs a Harbor task's ``tests/test.sh`` inside the verifier's sandbox and turns the reward file it
writes into an openforge verdict. Standard library only: run as ``python -I -S harbor_verify.py``.

Owns: the verifier side of the Harbor contract (``main``). In order:

1. ``/logs/verifier`` is emptied (a fresh directory of the verifier's own locally; in a pod, whatever
   the agent left there is removed after every process of the agent was ended), so a reward file is
   only ever one ``test.sh`` wrote in this run;
2. ``/tests`` is emptied and filled with a copy of the task's ``tests/``;
3. the task's workdir (``/app`` or the Dockerfile's ``WORKDIR``) is, where it is not the rollout's
   workdir itself, emptied and filled with a copy of what the agent left (directories, regular files
   with their modes, links as links; FIFOs, sockets and devices left out), so ``test.sh`` may write in it;
4. ``bash /tests/test.sh`` runs in the workdir (stdin empty; its exit status is not the score: Harbor's
   rule), killed after ``--timeout`` seconds;
5. ``/logs/verifier/reward.json`` (named rewards; preferred when both exist, as in Harbor) or
   ``reward.txt`` (one number) is read — not following a link, a regular file, at most 64 KiB — and
   written as ``{"reward": ..., "subscores": {...}}`` to ``$OPENFORGE_VERDICT``. No reward file, an
   unreadable or invalid one: exit 2 with the reason (the rollout is an ``env_error``, never a 0).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import stat
import subprocess
import sys

MAX_REWARD_BYTES = 1 << 16


def fresh(path: str) -> None:
    """``path`` as an empty directory (a link there is removed, not followed)."""
    if os.path.islink(path) or (os.path.lexists(path) and not os.path.isdir(path)):
        os.unlink(path)
    os.makedirs(path, exist_ok=True)
    for name in os.listdir(path):
        p = os.path.join(path, name)
        if os.path.isdir(p) and not os.path.islink(p):
            shutil.rmtree(p)
        else:
            os.unlink(p)


def copy_tree(src: str, dst: str) -> None:
    """Directories, regular files (with their modes) and links (as links) of ``src`` into ``dst``."""
    for root, dirs, files in os.walk(src):
        rel = os.path.relpath(root, src)
        out = dst if rel == "." else os.path.join(dst, rel)
        for name in [*dirs, *files]:
            s, d = os.path.join(root, name), os.path.join(out, name)
            st = os.lstat(s)
            if stat.S_ISLNK(st.st_mode):
                os.symlink(os.readlink(s), d)
            elif stat.S_ISDIR(st.st_mode):
                os.mkdir(d, 0o755)
            elif stat.S_ISREG(st.st_mode):
                fd = os.open(s, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
                with os.fdopen(fd, "rb") as fin, open(d, "wb") as fout:
                    shutil.copyfileobj(fin, fout)
                os.chmod(d, stat.S_IMODE(st.st_mode) | 0o600)
        dirs[:] = [n for n in dirs if not os.path.islink(os.path.join(root, n))]


def read_reward_file(path: str) -> str | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ValueError(f"{path} is not a regular file")
        data = f.read(MAX_REWARD_BYTES + 1)
    if len(data) > MAX_REWARD_BYTES:
        raise ValueError(f"{path} is larger than {MAX_REWARD_BYTES} bytes")
    return data.decode(errors="replace")


def _number(v: object, what: str) -> float:
    if isinstance(v, bool):
        return float(v)
    if not isinstance(v, (int, float)) or not math.isfinite(v):
        raise ValueError(f"{what} must be a finite number, got {v!r}")
    return float(v)


def verdict_of(logs: str) -> dict:
    """The verdict from ``reward.json`` (preferred) or ``reward.txt``; ValueError when neither is usable."""
    text = read_reward_file(os.path.join(logs, "reward.json"))
    if text is not None:
        try:
            obj = json.loads(text)
        except ValueError as e:
            raise ValueError(f"reward.json is not JSON: {e}") from None
        if not isinstance(obj, dict) or not obj:
            raise ValueError("reward.json must be a non-empty object of named rewards")
        rewards = {str(k): _number(v, f"reward.json[{k!r}]") for k, v in obj.items()}
        reward = rewards["reward"] if "reward" in rewards else sum(rewards.values()) / len(rewards)
        return {"reward": reward, "subscores": rewards, "detail": f"reward.json: {text.strip()[:300]}"}
    text = read_reward_file(os.path.join(logs, "reward.txt"))
    if text is None:
        raise ValueError("tests/test.sh wrote no reward (/logs/verifier/reward.txt or reward.json)")
    try:
        reward = float(text.strip())
    except ValueError:
        raise ValueError(f"reward.txt must hold one number, got {text.strip()[:100]!r}") from None
    return {"reward": _number(reward, "reward.txt"), "detail": f"reward.txt: {text.strip()[:100]}"}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--task-dir", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--app", required=True)
    ap.add_argument("--timeout", type=float, required=True)
    ap.add_argument("--logs", default="/logs/verifier")
    ap.add_argument("--tests", default="/tests")
    a = ap.parse_args()
    logs, tests = a.logs, a.tests
    fresh(logs)
    fresh(tests)
    copy_tree(os.path.join(a.task_dir, "tests"), tests)
    if os.path.realpath(a.app) != os.path.realpath(a.workdir):
        fresh(a.app)
        copy_tree(a.workdir, a.app)
    os.chdir(a.app)
    try:
        r = subprocess.run(["bash", os.path.join(tests, "test.sh")], stdin=subprocess.DEVNULL, timeout=a.timeout)
        print(f"[openforge] tests/test.sh exited {r.returncode}", file=sys.stderr)
    except subprocess.TimeoutExpired:
        print(f"[openforge] tests/test.sh ran over {a.timeout:g}s", file=sys.stderr)
        return 2
    try:
        verdict = verdict_of(logs)
    except (OSError, ValueError) as e:
        print(f"[openforge] {e}", file=sys.stderr)
        return 2
    with open(os.environ["OPENFORGE_VERDICT"], "w") as f:
        json.dump(verdict, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
