#!/usr/bin/env bash
# Fetch Harbor's own ATIF validator for the ATIF tests (tests/atif_format): the `harbor` wheel (pinned below),
# without its dependencies, unpacked into the openforge cache. Only `harbor.models.trajectories` and
# `harbor.utils.trajectory_validator` are used (plain pydantic), so it runs on the project's Python even though
# the package itself asks for Python >= 3.12; nothing is installed into .venv. Idempotent. Prints the folder.
set -euo pipefail
VERSION=0.26.0
DEST="${XDG_CACHE_HOME:-$HOME/.cache}/openforge/harbor-$VERSION"
PY=${PYTHON:-python3}
if [ ! -f "$DEST/harbor/utils/trajectory_validator.py" ]; then
  TMP=$(mktemp -d)
  trap 'rm -rf "$TMP"' EXIT
  "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 -d "$TMP" "harbor==$VERSION"
  mkdir -p "$DEST.part"
  "$PY" -m zipfile -e "$TMP"/harbor-"$VERSION"-*.whl "$DEST.part"
  rm -rf "$DEST" && mv "$DEST.part" "$DEST"
fi
echo "$DEST"
