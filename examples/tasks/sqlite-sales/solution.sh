#!/usr/bin/env bash
set -euo pipefail
sqlite3 shop.db <<'SQL'
-- one row per customer with paid orders
CREATE TABLE customer_totals (customer TEXT PRIMARY KEY, total REAL);
INSERT INTO customer_totals (customer, total)
  SELECT customer, SUM(amount) FROM orders WHERE status = 'paid' GROUP BY customer;
SQL
sqlite3 shop.db 'SELECT * FROM customer_totals ORDER BY customer;'
