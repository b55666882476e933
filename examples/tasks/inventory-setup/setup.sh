#!/usr/bin/env bash
set -euo pipefail
# An interactive prompt, as in many real setup scripts: stdin is empty, so it reads EOF and the
# default applies. (Fed this script on stdin, `read` would swallow the next line instead.)
read -r -p "Reset the inventory? [Y/n] " answer || answer=y
mkdir -p inventory
printf 'apples,12\npears,7\nquinces,2\n' > inventory/stock.csv
echo "inventory reset (answer: ${answer:-y})"
