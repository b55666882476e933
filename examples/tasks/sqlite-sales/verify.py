"""Scores sqlite-sales from shop.db in the workdir (opened read-only). The expected totals and the
original orders are fixed here, not computed from the agent's database (which it could change)."""

import json
import sqlite3
import sys
from pathlib import Path

ORDERS = [(1, "ada", 120.5, "paid"), (2, "ada", 30.0, "refunded"), (3, "bo", 15.25, "paid"),
          (4, "bo", 4.75, "paid"), (5, "cy", 99.0, "pending"), (6, "ada", 9.5, "paid")]  # as setup.sh made them
want = {}
for _, customer, amount, status in ORDERS:
    if status == "paid":
        want[customer] = want.get(customer, 0.0) + amount

if not Path("shop.db").is_file():  # gone, or a FIFO / device the agent put there (opening one would block)
    print(json.dumps({"reward": 0.0, "subscores": {"table": 0.0, "totals": 0.0, "orders_kept": 0.0},
                      "detail": "shop.db is not a regular file"}))
    raise SystemExit(0)
try:
    db = sqlite3.connect("file:shop.db?mode=ro", uri=True)
    tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    got = dict(db.execute("SELECT customer, total FROM customer_totals LIMIT 1000")) \
        if "customer_totals" in tables else {}
    orders = db.execute("SELECT id, customer, amount, status FROM orders ORDER BY id LIMIT 1000").fetchall() \
        if "orders" in tables else []
except sqlite3.Error as e:  # the agent's database cannot be read: its failure (exit 3)
    print(f"shop.db cannot be read as the task asks: {type(e).__name__}: {e}", file=sys.stderr)
    raise SystemExit(3) from None
scores = {"table": float("customer_totals" in tables),
          "totals": float(bool(got) and got.keys() == want.keys()
                          and all(isinstance(got[k], (int, float)) and abs(got[k] - want[k]) < 1e-9 for k in want)),
          "orders_kept": float(orders == ORDERS)}
print(json.dumps({"reward": float(all(scores.values())), "subscores": scores, "totals": got}))
