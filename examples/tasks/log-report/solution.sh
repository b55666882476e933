#!/usr/bin/env bash
# Count the ERROR lines per log file and write a Markdown summary.
set -e

out_dir="$PWD/report"
mkdir -p "$out_dir"

count_errors() {
  # grep -c prints 0 (and exits 1) when nothing matches: keep going under set -e
  grep -c ' ERROR ' "$1" || true
}

total=0
lines=""
cd logs
for f in *.log; do
  n=$(count_errors "$f")
  total=$((total + n))
  lines+="- $f: $n errors"$'\n'
done
cd - >/dev/null

cat > "$out_dir/summary.md" <<EOF
# Error summary

${lines}
## Total: ${total}
EOF
cat "$out_dir/summary.md"
