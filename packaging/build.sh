#!/usr/bin/env bash
# Configures and builds TrimKV Studio in build/ (Release, ccache, Ninja). Extra arguments go to
# the CMake configure step, e.g. -DCMAKE_PREFIX_PATH=<libtorch 2.x>/share/cmake.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${TRIMKV_BUILD_DIR:-$root/build}"
export CCACHE_DIR="${CCACHE_DIR:-$HOME/.cache/ccache}"
# Paths below the checkout are hashed relative to it, so clones share cache hits.
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$root}"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
cmake --build "$build" -j"$(nproc)"
