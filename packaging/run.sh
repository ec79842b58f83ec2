#!/usr/bin/env bash
# Sets up, builds and launches TrimKV Studio on the embedded demo model (resources/demo-model).
# Until the Qt GUI (issue 7) lands, the app is the terminal chat: it starts with a sample world
# conversation's images written to build/sample/ (attach them with /image PATH) under the
# model's own DBTrimKV gates. Arguments replace the default command, e.g.
#   ./packaging/run.sh eval --data build/sample/test.jsonl
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
"$root/packaging/setup.sh"
"$root/packaging/build.sh"
build="${TRIMKV_BUILD_DIR:-$root/build}"
if [ $# -eq 0 ]; then
  "$build/app/trimkv" make-world --out "$build/sample" --split test --n 3 --seed 7 --quiet >/dev/null
  echo "Sample images: $(ls "$build"/sample/images/test/*.png | head -3 | tr '\n' ' ')"
  echo "Questions the demo model knows: see $build/sample/test.jsonl (e.g. 'Image 1:' then /image PATH, then 'How many circles are there?')"
  set -- chat --policy dbtrimkv --budget 64
fi
exec "$build/app/trimkv" "$@"
