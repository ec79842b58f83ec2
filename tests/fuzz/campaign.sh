#!/usr/bin/env bash
# Fuzzing campaign (README "Fuzzing"): builds the libFuzzer targets with clang, ASan and UBSan in
# build-fuzz/ (tests and GUI off), then runs each target for SECONDS from its seeds, and prints a
# Markdown table per target: seconds run, executions, coverage (libFuzzer's cov: edges and ft:
# features at the end), corpus size, and crashes (inputs saved to build-fuzz/findings/<target>/).
#   tests/fuzz/campaign.sh [SECONDS=600] [TARGET...]      (default: every target)
# A crash found is fixed, and its input copied to tests/fuzz/regressions/<target>/, which the
# normal suite replays (fuzz_replay tests) with any compiler.
set -uo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
secs="${1:-600}"
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(safetensors gguf config tokenizer chat_template image gates messages world_jsonl)
build="$root/build-fuzz"

for p in clang libclang-rt-14-dev libomp-14-dev; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$p" >/dev/null
done
"$root/packaging/setup.sh" >/dev/null
# LibTorch is built against GCC's OpenMP (libgomp): clang uses it too, not its own libomp.
gomp="$(g++ -print-file-name=libgomp.so)"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=clang++ \
  -DTRIMKV_FUZZ=ON -DTRIMKV_BUILD_GUI=OFF -DTRIMKV_CUDA=OFF \
  -DOpenMP_CXX_FLAGS=-fopenmp=libgomp -DOpenMP_CXX_LIB_NAMES=gomp -DOpenMP_gomp_LIBRARY="$gomp" >/dev/null || exit 1
cmake --build "$build" --target $(printf 'fuzz_%s ' "${targets[@]}") -j"$(nproc)" || exit 1

export ASAN_OPTIONS="detect_leaks=0:abort_on_error=1:symbolize=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
echo "| target | seconds | executions | exec/s | coverage (edges) | features | corpus | crashes |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|"
for t in "${targets[@]}"; do
  corpus="$build/corpus/$t"
  findings="$build/findings/$t"
  mkdir -p "$corpus" "$findings"
  grep "^$t " "$root/tests/fuzz/seeds.txt" | while read -r _ rel; do cp -n "$root/tests/data/$rel" "$corpus/" 2>/dev/null; done
  for d in seeds regressions; do [ -d "$root/tests/fuzz/$d/$t" ] && cp -n "$root/tests/fuzz/$d/$t"/* "$corpus/" 2>/dev/null; done
  log="$build/findings/$t.log"
  start="$build/findings/$t.start"  # findings newer than this are this run's (older ones stay)
  touch "$start"
  # Inputs as long as the largest seed (GGUF seeds are ~100 KB), at least 64 KiB.
  max_len=$(find "$corpus" -type f -printf '%s\n' | sort -n | tail -1)
  [ "${max_len:-0}" -ge 65536 ] || max_len=65536
  # -fork keeps going after a crash (each one saved); rss/timeout limits catch blow-ups and hangs.
  (cd "$findings" && "$build/tests/fuzz/fuzz_$t" "$corpus" -max_total_time="$secs" -print_final_stats=1 \
     -fork=1 -ignore_crashes=1 -ignore_timeouts=1 -ignore_ooms=1 -rss_limit_mb=3072 -timeout=10 \
     -max_len="$max_len" > "$log" 2>&1)
  last=$(grep -E '^#[0-9]+:? .*cov: [0-9]+' "$log" | tail -1)
  execs=$(echo "$last" | sed -n 's/^#\([0-9]*\).*/\1/p')  # fork mode's running count of inputs run
  cov=$(echo "$last" | grep -o 'cov: [0-9]*' | awk '{print $2}')
  ft=$(echo "$last" | grep -o 'ft: [0-9]*' | awk '{print $2}')
  crashes=$(find "$findings" -maxdepth 1 -newer "$start" -regextype egrep -regex '.*/(crash|leak|timeout|oom)-.*' | wc -l)
  size=$(ls "$corpus" | wc -l)
  echo "| $t | $secs | ${execs:-?} | $(( ${execs:-0} / (secs > 0 ? secs : 1) )) | ${cov:-?} | ${ft:-?} | $size | $crashes |"
done
