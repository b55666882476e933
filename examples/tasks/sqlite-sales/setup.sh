#!/usr/bin/env bash
set -euo pipefail
rm -f shop.db
sqlite3 shop.db <<'SQL'
-- orders of the week; status is paid, refunded or pending
CREATE TABLE orders (id INTEGER PRIMARY KEY, customer TEXT NOT NULL, amount REAL NOT NULL, status TEXT NOT NULL);
INSERT INTO orders (customer, amount, status) VALUES
  ('ada', 120.5, 'paid'), ('ada', 30.0, 'refunded'), ('bo', 15.25, 'paid'),
  ('bo', 4.75, 'paid'), ('cy', 99.0, 'pending'), ('ada', 9.5, 'paid');
SQL
