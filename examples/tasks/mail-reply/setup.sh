#!/usr/bin/env bash
# Seeds one more message through the service's own API: setup.sh sees $MAIL_URL too.
set -euo pipefail
curl -fsS -X POST "$MAIL_URL/deliver" -H 'Content-Type: application/json' \
  -d '{"from": "news@example.com", "subject": "Weekly digest", "body": "Nothing new this week."}' >/dev/null
