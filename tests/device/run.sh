#!/usr/bin/env bash
# The device check (issue 23), one prepared run on a GPU machine, at most ~8 minutes. Two stages
# against that machine's LibTorch, the second only when the first built:
#  1. kernels/ (CPU and CUDA) and the CUDA kernel tests alone (TRIMKV_KERNELS_ONLY: nothing but
#     LibTorch and nvcc needed): test_cuda (CUDA against the CPU kernels and brute-force
#     selection), then bench_cuda (attention bandwidth, selection + compaction share);
#  2. core and vision with the CUDA runtime (the other dependencies from .device/prefix, no
#     pkg-config needed; without OpenCV there the synthetic world and the CLI are left out):
#     test_cuda_runtime (--device cuda against --device cpu: logits,
#     tokens, every policy's evictions, the demo model), then bench_cuda_e2e (decode tok/s of a
#     Qwen3-VL-8B-shaped model at 32K context: full, dbtrimkv at 4K, dense SDPA) and, when the
#     machine has transformers, bench_transformers.py on the same shape.
# .device/ comes from tests/device/prepare.sh, run beforehand here. Output also lands in $OUT
# (when set): test.txt, bench.md, runtime.txt, e2e.md. Arguments go to CMake (both stages).
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
common=(-G Ninja -DCMAKE_BUILD_TYPE=Release -DTRIMKV_CUDA=ON -DTRIMKV_CATCH2_INCLUDE="$root/.device/include"
        -DCMAKE_CUDA_ARCHITECTURES="${TRIMKV_CUDA_ARCH:-90}")
[ -n "$links" ] && common+=(-DCMAKE_EXE_LINKER_FLAGS="-Wl,-rpath-link,$links")

t0=$(date +%s)
cmake -S "$root" -B "$build" "${common[@]}" -DTRIMKV_KERNELS_ONLY=ON -DCMAKE_PREFIX_PATH="$prefix" "$@" \
  > "$out/configure.txt" 2>&1 || { tail -40 "$out/configure.txt"; exit 1; }
cmake --build "$build" -j "$(nproc)" --target test_cuda bench_cuda > "$out/build.txt" 2>&1 || { grep -B2 -A12 -m3 "error" "$out/build.txt"; exit 1; }
echo "stage 1 build: $(( $(date +%s) - t0 )) s"
status=0
"$build/tests/cuda/test_cuda" --order lex > "$out/test.txt" 2>&1 || status=$?
tail -25 "$out/test.txt"
{ "$build/tests/cuda/bench_cuda" || echo "bench_cuda: exit status $?"; } | tee "$out/bench.md"

# Stage 2: the runtime. The libraries carried in .device/prefix are found at run time too.
t1=$(date +%s)
full="$build-runtime"
export LD_LIBRARY_PATH="$root/.device/prefix/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
if ! cmake -S "$root" -B "$full" "${common[@]}" -DTRIMKV_BUILD_TESTS=OFF -DTRIMKV_BUILD_GUI=OFF -DPKG_CONFIG_EXECUTABLE=/nonexistent \
      -DCMAKE_PREFIX_PATH="$prefix;$root/.device/prefix" "$@" > "$out/configure-runtime.txt" 2>&1; then
  echo "stage 2 (runtime) configure failed:"; tail -30 "$out/configure-runtime.txt"; exit 1
fi
if ! cmake --build "$full" -j "$(nproc)" --target test_cuda_runtime bench_cuda_e2e > "$out/build-runtime.txt" 2>&1; then
  echo "stage 2 (runtime) build failed:"; grep -B2 -A12 -m3 "error" "$out/build-runtime.txt"; exit 1
fi
echo "stage 2 build: $(( $(date +%s) - t1 )) s"
"$full/tests/cuda/test_cuda_runtime" --order lex > "$out/runtime.txt" 2>&1 || status=$?
tail -25 "$out/runtime.txt"
{ "$full/tests/cuda/bench_cuda_e2e" || echo "bench_cuda_e2e: exit status $?"
  python3 "$root/tests/device/bench_transformers.py" || echo "bench_transformers.py: exit status $?"; } | tee "$out/e2e.md"
exit $status
