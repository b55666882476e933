#!/usr/bin/env bash
set -euo pipefail
mkdir -p calc && cd calc
git init -q -b main .
git config user.email dev@example.com
git config user.name "Dev"
cat > stats.py <<'PY'
def average(xs):
    # mean of a non-empty list
    return sum(xs) / (len(xs) - 1)
PY
cat > test_stats.py <<'PY'
from stats import average

assert average([2, 4, 6]) == 4, average([2, 4, 6])
print("ok")
PY
printf "__pycache__/\n" > .gitignore
git add -A
git commit -q -m "stats: add average()"
