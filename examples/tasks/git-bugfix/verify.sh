#!/usr/bin/env bash
# Exit 0 when solved, 1 when not (task.toml: exit_code_reward = true). cwd: the rollout's workdir.
cd calc || exit 1
git="git -c safe.directory=*"
$git log -1 --format=%s | grep -q '^fix:' || { echo "last commit is not a fix: commit"; exit 1; }
[ -z "$($git status --porcelain)" ] || { echo "the working tree is not clean"; exit 1; }
[ "$($git rev-list --count HEAD)" -ge 2 ] || exit 1
python3 -B test_stats.py >/dev/null 2>&1 || { echo "test_stats.py fails"; exit 1; }
echo "fixed and committed"
