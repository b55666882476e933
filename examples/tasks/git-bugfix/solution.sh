#!/usr/bin/env bash
set -euo pipefail
cd calc
sed -i 's|sum(xs) / (len(xs) - 1)|sum(xs) / len(xs)|' stats.py
python3 test_stats.py
git commit -q -am "fix: average() divides by the number of values"
git log --oneline | head -3
