#!/usr/bin/env bash
# Sets up, builds and launches TrimKV Studio on the default model.
# Until the GUI (issue 7) and the embedded demo model (issue 6) exist, this runs the command-line
# generator on the best model the repository ships: a tiny random-weight Llama checkpoint used by
# the tests (its text is gibberish; point --model at a real checkpoint folder for real text).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
"$root/packaging/setup.sh"
"$root/packaging/build.sh"
build="${TRIMKV_BUILD_DIR:-$root/build}"
if [ $# -eq 0 ]; then
  set -- generate --model "$root/tests/data/models/llama_tied" --prompt "Hello, world!" --max-new-tokens 32
fi
exec "$build/app/trimkv" "$@"
