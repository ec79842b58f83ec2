#!/usr/bin/env bash
# Sets up, builds and runs the whole test suite (what CI runs).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
"$root/packaging/setup.sh"
"$root/packaging/build.sh"
build="${TRIMKV_BUILD_DIR:-$root/build}"
cd "$build"
ctest --output-on-failure --timeout 1500 "$@"
