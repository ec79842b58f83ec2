#!/usr/bin/env bash
# Run here before a device call: copies what tests/device/run.sh needs and the GPU machine lacks
# into .device/ (ignored by git; name it in the device tool's `carry`):
#  - Catch2's single header (.device/include/catch2/catch.hpp);
#  - .device/prefix: the runtime's other dependencies for run.sh's second stage, which builds
#    core and vision against the device's LibTorch: PCRE2's and utf8proc's headers and shared
#    libraries (they need glibc 2.14 / 2.4), stb's headers (header-only: the implementation is
#    compiled there) and nlohmann_json's headers and CMake package. No pkg-config is needed there
#    (CMakeLists.txt's trimkv_find_pkg, vision/CMakeLists.txt's stb fallback).
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
dev="$root/.device"
rm -rf "$dev"
mkdir -p "$dev/include/catch2" "$dev/prefix/include/stb" "$dev/prefix/lib" "$dev/prefix/share/cmake"
cp /usr/include/catch2/catch.hpp "$dev/include/catch2/"
p="$dev/prefix"
cp /usr/include/pcre2.h /usr/include/utf8proc.h "$p/include/"
cp /usr/include/stb/stb_image.h /usr/include/stb/stb_image_write.h /usr/include/stb/stb_image_resize.h "$p/include/stb/"
cp -r /usr/include/nlohmann "$p/include/"
cp -r /usr/share/cmake/nlohmann_json "$p/share/cmake/"
arch_lib=/usr/lib/$(gcc -print-multiarch)
for lib in libpcre2-8 libutf8proc; do
  real="$(readlink -f "$arch_lib/$lib.so")"
  soname="$(objdump -p "$real" | awk '/SONAME/ {print $2}')"
  cp "$real" "$p/lib/$soname"
  ln -sf "$soname" "$p/lib/$lib.so"
done
du -sh "$dev"
echo "tests/device/prepare.sh: .device/ ready (carry it: [\".device\"])"
