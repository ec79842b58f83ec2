#!/usr/bin/env bash
# The device check (issue 23), one prepared run on a GPU machine, at most ~8 minutes: builds
# kernels/ (CPU and CUDA) and the CUDA tests against that machine's LibTorch (TRIMKV_KERNELS_ONLY:
# no Qt, PCRE2 or other packages needed there), runs test_cuda (CUDA against the CPU kernels and
# brute-force selection), then bench_cuda, which prints one table. Catch2's header comes from
# .device/ (tests/device/prepare.sh, run beforehand where Catch2 is installed) unless the system
# has it. Output also lands in $OUT (when set) as test.txt and bench.md. Arguments go to CMake.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
build="${TRIMKV_DEVICE_BUILD:-/tmp/trimkv-device}"
out="${OUT:-$build}"
mkdir -p "$out"
prefix="$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')"
# The wheel's own CUDA libraries (nvidia/*/lib beside torch), for the linker to resolve
# libtorch_cuda's dependencies (README "Building against LibTorch 2.x").
links="$(python3 -c 'import torch, os, glob; sp = os.path.dirname(os.path.dirname(torch.__file__)); print(":".join(glob.glob(sp + "/nvidia/*/lib") + glob.glob(sp + "/nvidia/cu*/lib")))')"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'
t0=$(date +%s)
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTRIMKV_KERNELS_ONLY=ON -DTRIMKV_CUDA=ON \
  -DCMAKE_PREFIX_PATH="$prefix" -DTRIMKV_CATCH2_INCLUDE="$root/.device/include" \
  -DCMAKE_CUDA_ARCHITECTURES="${TRIMKV_CUDA_ARCH:-90}" ${links:+-DCMAKE_EXE_LINKER_FLAGS=-Wl,-rpath-link,$links} \
  "$@" > "$out/configure.txt" 2>&1 || { tail -40 "$out/configure.txt"; exit 1; }
cmake --build "$build" -j "$(nproc)" --target test_cuda bench_cuda > "$out/build.txt" 2>&1 || { grep -B2 -A12 -m3 "error" "$out/build.txt"; exit 1; }
echo "build: $(( $(date +%s) - t0 )) s"
status=0
"$build/tests/cuda/test_cuda" --order lex > "$out/test.txt" 2>&1 || status=$?
tail -25 "$out/test.txt"
"$build/tests/cuda/bench_cuda" | tee "$out/bench.md"
exit $status
