#!/usr/bin/env bash
# The whole test suite under sanitizers (README "Reliability"): builds everything in
# build-asan/ with -fsanitize=address,undefined (or build-tsan/ with thread) and runs ctest there.
#   tests/sanitize.sh [asan|tsan] [CTEST ARGS...]
# asan (default): every suite, GUI tests offscreen included; any ASan or UBSan report fails the
# test that triggered it (halt_on_error). tsan: the Studio's worker tests (test_gui), where the
# threads are, against Qt's own libraries built with ThreadSanitizer (setup.sh --tsan-qt; TSan
# cannot see the locks of an uninstrumented Qt), one compute thread (OMP_NUM_THREADS=1: GCC's
# libgomp is not instrumented either, so OpenMP teams are not judged; tests/tsan.supp). Every
# report fails the test (halt_on_error). Exit status: ctest's.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
kind="${1:-asan}"
shift || true
case "$kind" in
  # (the qemu-user runs of test_kernels are left out: ASan's shadow memory does not run under qemu)
  asan) sanitize="address,undefined"; build="$root/build-asan"; filter=(-E '^test_kernels_(avx2|portable)$') ;;
  tsan) sanitize="thread"; build="$root/build-tsan"; filter=(-R '^test_gui$') ;;
  *) echo "usage: tests/sanitize.sh [asan|tsan] [CTEST ARGS...]" >&2; exit 2 ;;
esac
if [ "$kind" = tsan ]; then
  "$root/packaging/setup.sh" --tsan-qt
  qt="${TRIMKV_TSAN_QT:-$HOME/.cache/trimkv/qt-tsan}/build"
  # Debian's plugins after ours (image formats, icon engines); QProcess's vfork-style children
  # look like a multi-threaded fork to TSan (die_after_fork=0); QTest's 5-minute limit per
  # function is too short for the slowed model.
  export LD_LIBRARY_PATH="$qt/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" OMP_NUM_THREADS=1 \
    QT_PLUGIN_PATH="$qt/plugins:/usr/lib/x86_64-linux-gnu/qt6/plugins" QTEST_FUNCTION_TIMEOUT=3600000
else
  "$root/packaging/setup.sh" >/dev/null
fi
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTRIMKV_SANITIZE="$sanitize" \
  -DTRIMKV_CUDA=OFF >/dev/null
cmake --build "$build" -j"$(nproc)"
# LibTorch's own allocations at exit are not ours to fix: leak checking off; everything else halts.
export ASAN_OPTIONS="detect_leaks=0:halt_on_error=1:abort_on_error=1:detect_odr_violation=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
export TSAN_OPTIONS="halt_on_error=1:die_after_fork=0:second_deadlock_stack=1:suppressions=$root/tests/tsan.supp"
cd "$build"
ctest --output-on-failure --timeout 3000 "${filter[@]}" "$@"
