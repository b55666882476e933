#!/usr/bin/env bash
set -euo pipefail

api() {  # api METHOD PATH [JSON]
  if [ $# -ge 3 ]; then
    curl -fsS -X "$1" "$TICKETS_URL$2" -H 'Content-Type: application/json' -d "$3" >/dev/null
  else
    curl -fsS -X "$1" "$TICKETS_URL$2"
  fi
}

tickets=$(api GET /tickets)

# duplicates: "<id> <original>" per line
dups=$(python3 -c '
import json, re, sys
for t in json.loads(sys.argv[1]):
    m = re.match(r"Duplicate of #(\d+)", t["body"])
    if m and t["status"] == "open":
        print(t["id"], m.group(1))' "$tickets")

while read -r id orig; do
  [ -n "$id" ] || continue
  api PATCH "/tickets/$id" '{"status": "closed"}'
  api POST "/tickets/$id/comments" "{\"body\": \"Duplicate of #$orig\"}"
done <<< "$dups"

# the remaining open bugs get the "triaged" label, their other labels kept
tickets=$(api GET /tickets)
python3 -c '
import json, sys
for t in json.loads(sys.argv[1]):
    if t["status"] == "open" and "bug" in t["labels"]:
        print(t["id"], json.dumps({"labels": t["labels"] + ["triaged"]}))' "$tickets" |
while read -r id labels; do
  api PATCH "/tickets/$id" "$labels"
done
