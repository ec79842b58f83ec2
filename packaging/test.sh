#!/usr/bin/env bash
# Sets up, builds and runs the whole test suite (what CI runs).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
"$root/packaging/setup.sh"
"$root/packaging/build.sh"
build="${TRIMKV_BUILD_DIR:-$root/build}"
cd "$build"
# Every suite must be registered: a dependency missing at configure time (Qt 6 for the GUI tests,
# found QUIET) must fail the run, not shrink it.
expected=(test_kernels test_kernels_avx2 test_kernels_portable test_core test_cli test_vision test_gui install_layout trimkv_studio_version
          trimkv_studio_screenshot fuzz_replay_safetensors fuzz_replay_gguf fuzz_replay_config
          fuzz_replay_tokenizer fuzz_replay_chat_template fuzz_replay_image fuzz_replay_gates
          fuzz_replay_messages fuzz_replay_world_jsonl)
# The CUDA kernel tests are built wherever the CUDA compiler is (and skipped without a GPU).
if command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ]; then expected+=(test_cuda); fi
listed="$(ctest -N | sed -n 's/^ *Test *#[0-9]*: //p')"
for t in "${expected[@]}"; do
  if ! grep -qx "$t" <<<"$listed"; then
    echo "test.sh: the test '$t' is not registered (a dependency missing when CMake configured?)" >&2
    exit 1
  fi
done
ctest --output-on-failure --timeout 1500 "$@"
