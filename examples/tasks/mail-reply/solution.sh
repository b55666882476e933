#!/usr/bin/env bash
set -euo pipefail
# Alice's message id, from the inbox
id=$(curl -fsS "$MAIL_URL/messages" | python3 -c '
import json, sys
# the first message from alice
print(next(m["id"] for m in json.load(sys.stdin) if m["from"].startswith("alice")))')
when=$(grep "design review" calendar.txt | awk '{print $1, $2}')
body=$(printf '{"to": "alice@example.com", "subject": "Re: design review", "body": "The design review is on %s.", "in_reply_to": "%s"}' "$when" "$id")
curl -fsS -X POST "$MAIL_URL/send" -H 'Content-Type: application/json' -d "$body"
echo
