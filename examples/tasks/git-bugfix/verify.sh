#!/usr/bin/env bash
# Exit 0 when solved, 1 when not (task.toml: exit_code_reward = true).
# cwd: the rollout's workdir (read-only). It is the agent's output, so nothing in it is trusted: the
# repository is checked in a scratch copy whose .git/config and hooks are replaced by ours (a config
# the agent wrote, e.g. core.fsmonitor, would otherwise run its command), and the test that decides
# is this task's own (check_stats.py, never the workdir's test_stats.py, which the agent can rewrite).
# The agent's stats.py runs through $OPENFORGE_UNTRUSTED: in namespaces of its own, it cannot print
# into this script's output, signal it, or see the task directory; its stdout is only compared.
set -u
cd "$OPENFORGE_WORKDIR" || exit 2  # the cwd already, except with verify_on_host = true
[ -d calc/.git ] && [ ! -L calc ] && [ ! -L calc/.git ] || { echo "calc/ is not a git repository"; exit 1; }
scratch="$(mktemp -d)"
repo="$scratch/calc"
cp -R calc "$repo" 2>/dev/null || { echo "cannot copy calc/"; exit 1; }
rm -rf "$repo/.git/hooks" "$repo/.git/info/attributes"
printf '[core]\n\trepositoryformatversion = 0\n\tbare = false\n' > "$repo/.git/config"
cd "$repo" || exit 1
git="git -c safe.directory=* -c core.fsmonitor=false -c core.hooksPath=/dev/null"
$git log -1 --format=%s | grep -q '^fix:' || { echo "last commit is not a fix: commit"; exit 1; }
[ -z "$($git status --porcelain)" ] || { echo "the working tree is not clean"; exit 1; }
[ "$($git rev-list --count HEAD)" -ge 2 ] || exit 1
seed=$((RANDOM * 32768 + RANDOM))
want=$(python3 -I -B "$OPENFORGE_TASK_DIR/check_stats.py" --expected "$seed")
cp "$OPENFORGE_TASK_DIR/check_stats.py" "$scratch/" && chmod -R a+rX "$scratch"  # a root verifier runs it as nobody
# can the agent's code be isolated here, in this directory? (else this verifier failed: not a 0 for the agent)
python3 "$OPENFORGE_UNTRUSTED" --check || { echo "cannot isolate the agent's code here" >&2; exit 2; }
# the agent's stats.py runs here: one that hangs (or is a FIFO) fails the check, it does not time out the verifier
got=$(python3 "$OPENFORGE_UNTRUSTED" --timeout 20 -- python3 -E -s -B "$scratch/check_stats.py" --actual "$seed" \
      2>/dev/null </dev/null | tail -n 1)
[ -n "$want" ] && [ "$got" = "$want" ] || { echo "average() is still wrong"; exit 1; }
echo "fixed and committed"
