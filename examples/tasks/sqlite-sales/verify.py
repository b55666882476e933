"""Scores sqlite-sales from shop.db in the workdir (opened read-only)."""

import json
import sqlite3

db = sqlite3.connect("file:shop.db?mode=ro", uri=True)
tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
want = dict(db.execute("SELECT customer, SUM(amount) FROM orders WHERE status = 'paid' GROUP BY customer"))
got = dict(db.execute("SELECT customer, total FROM customer_totals")) if "customer_totals" in tables else {}
orders = db.execute("SELECT COUNT(*), SUM(amount) FROM orders").fetchone()
scores = {"table": float("customer_totals" in tables),
          "totals": float(bool(got) and got.keys() == want.keys() and all(abs(got[k] - want[k]) < 1e-9 for k in want)),
          "orders_kept": float(orders == (6, 279.0))}
print(json.dumps({"reward": float(all(scores.values())), "subscores": scores, "totals": got}))
