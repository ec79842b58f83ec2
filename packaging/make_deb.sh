#!/usr/bin/env bash
# Sets up, builds and packages TrimKV Studio as a Debian package: build/trimkv-studio_<version>_amd64.deb
# (CPack's DEB generator, cmake/Packaging.cmake). Prints the package's path.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${TRIMKV_BUILD_DIR:-$root/build}"
"$root/packaging/setup.sh"
"$root/packaging/build.sh"
(cd "$build" && cpack -G DEB >/dev/null)
ls -1t "$build"/trimkv-studio_*_amd64.deb | head -1
