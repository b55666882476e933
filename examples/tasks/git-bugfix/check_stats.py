"""git-bugfix's test, run by verify.sh in a scratch copy of the agent's calc/ (cwd): the assertion of
calc/test_stats.py plus the averages of seeded random lists, compared by verify.sh with what
``--expected SEED`` prints (a correct average, computed without importing the agent's code). So a
rewritten test_stats.py, or a stats.py that exits early or prints "ok", does not pass."""

import random
import sys

mode, seed = sys.argv[1], int(sys.argv[2])
rng = random.Random(seed)
cases = [[rng.randint(-99, 99) for _ in range(rng.randint(1, 8))] for _ in range(20)]
if mode == "--expected":
    def average(xs):
        return sum(xs) / len(xs)
else:
    sys.path.insert(0, "")  # the scratch copy of calc/
    from stats import average

    assert average([2, 4, 6]) == 4, average([2, 4, 6])
print(" ".join(f"{average(xs):.6f}" for xs in cases))
