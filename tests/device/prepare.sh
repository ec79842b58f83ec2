#!/usr/bin/env bash
# Run here before a device call: copies what tests/device/run.sh needs and the GPU machine lacks
# (Catch2's single header) into .device/ (ignored by git; name it in the device tool's `carry`).
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
mkdir -p "$root/.device/include/catch2"
cp /usr/include/catch2/catch.hpp "$root/.device/include/catch2/"
echo "tests/device/prepare.sh: .device/ ready (carry it: [\".device\"])"
