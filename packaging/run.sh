#!/usr/bin/env bash
# Sets up, builds and launches TrimKV Studio on the embedded demo model (resources/demo-model):
# the Qt desktop app when it was built and a display is available, else the terminal chat
# (`trimkv chat` under DBTrimKV with three sample world images written to build/sample/, to
# attach with /image PATH). Arguments run a `trimkv` command instead, e.g.
#   ./packaging/run.sh eval --data build/sample/test.jsonl
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
"$root/packaging/setup.sh"
"$root/packaging/build.sh"
build="${TRIMKV_BUILD_DIR:-$root/build}"
if [ $# -gt 0 ]; then
  exec "$build/app/trimkv" "$@"
fi
if [ -x "$build/app/trimkv-studio" ] && [ -n "${DISPLAY:-}${WAYLAND_DISPLAY:-}" ]; then
  exec "$build/app/trimkv-studio"
fi
"$build/app/trimkv" make-world --out "$build/sample" --split test --n 3 --seed 7 --quiet >/dev/null
echo "No display (or no Qt): starting the terminal chat. Sample images:"
ls "$build"/sample/images/test/*.png | head -3
echo "Attach one with /image PATH, then type e.g.: Image 1:<image>How many circles are there?"
exec "$build/app/trimkv" chat --policy dbtrimkv --budget 64
