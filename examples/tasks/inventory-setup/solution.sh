#!/usr/bin/env bash
set -euo pipefail
f=inventory/stock.csv
awk -F, 'BEGIN { OFS = "," } $1 == "pears" { $2 += 5 } { print }' "$f" > "$f.new"
mv "$f.new" "$f"
echo "plums,3" >> "$f"
