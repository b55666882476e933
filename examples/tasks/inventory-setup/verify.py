"""Scores inventory-setup from inventory/stock.csv (cwd: the rollout's workdir; read bounded)."""

import json
from pathlib import Path

f = Path("inventory/stock.csv")
with open(f, errors="replace") if f.is_file() else open("/dev/null") as fh:
    rows = [ln.split(",") for ln in fh.read(1 << 16).split()]
stock = {r[0]: r[1] for r in rows if len(r) == 2}
scores = {"restock_pears": float(stock.get("pears") == "12"), "add_plums": float(stock.get("plums") == "3"),
          "others_kept": float(stock.get("apples") == "12" and stock.get("quinces") == "2" and len(rows) == 4)}
print(json.dumps({"reward": float(all(scores.values())), "subscores": scores}))
