#!/usr/bin/env bash
# Regenerates the oracle fixtures into a scratch copy of tests/data and compares the copy with
# the committed files: the committed oracle values must be re-derivable from the committed
# scripts (README "Test fixtures"). Needs the oracle environment (packaging/setup.sh --oracle);
# CI does not run it.
#   tests/oracle/check_fixtures.sh [PART...]      (parts as make_fixtures.py takes them)
# Prints each file that differs and exits 1 if any does; files only one side has are listed too.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
py="${TRIMKV_VENV:-$HOME/.cache/trimkv/venv-oracle}/bin/python"
if [ ! -x "$py" ]; then
  echo "check_fixtures: no oracle environment at $py (run packaging/setup.sh --oracle)" >&2
  exit 2
fi
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
cp -a "$root/tests/data" "$scratch/data"
(cd "$root" && TRIMKV_FIXTURE_DATA="$scratch/data" "$py" tests/oracle/make_fixtures.py "$@")
if diff -rq "$root/tests/data" "$scratch/data"; then
  echo "check_fixtures: every regenerated fixture equals the committed one"
else
  echo "check_fixtures: the files above differ from the committed ones" >&2
  exit 1
fi
