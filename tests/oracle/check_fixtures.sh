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
# Files that differ: any but safetensors files holding the same tensors and metadata in another
# byte layout (another safetensors version orders the header differently) count.
differing=0
while read -r line; do
  case "$line" in
    "Files "*".safetensors and "*" differ")
      committed="${line#Files }"; committed="${committed%% and *}"
      regenerated="${line#* and }"; regenerated="${regenerated% differ}"
      echo "${committed#$root/}:"
      "$py" "$root/tests/oracle/compare_safetensors.py" "$committed" "$regenerated" || differing=$((differing + 1)) ;;
    *) echo "$line"; differing=$((differing + 1)) ;;
  esac
done < <(diff -rq "$root/tests/data" "$scratch/data" || true)
if [ "$differing" = 0 ]; then
  echo "check_fixtures: every regenerated fixture equals the committed one"
else
  echo "check_fixtures: $differing regenerated file(s) differ from the committed ones (above)" >&2
  exit 1
fi
