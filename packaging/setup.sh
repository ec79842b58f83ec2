#!/usr/bin/env bash
# Installs everything TrimKV Studio needs on Debian 12 / Ubuntu (idempotent; fast when done).
#   packaging/setup.sh            Debian packages for building and testing (and the GUI's Qt 6)
#   packaging/setup.sh --oracle   also a Python virtual environment with transformers, used only
#                                 to regenerate the committed test fixtures and run benchmarks
#                                 against the reference (CI never needs it)
#   packaging/setup.sh --kvpress  also (after --oracle's) an environment with NVIDIA's kvpress
#                                 0.5.5, for tests/bench/kvpress_compare.py; kvpress needs
#                                 transformers < 5.3, so it gets its own, and borrows the oracle
#                                 environment's torch instead of downloading another
#   packaging/setup.sh --authors  also (after --oracle's) an environment with the TrimKV authors'
#                                 package trimkv 0.1.5 (PyPI), for tests/oracle/authors_gates_fixtures.py;
#                                 it pins transformers 4.57.1, so it gets its own, and borrows the
#                                 oracle environment's torch as --kvpress does
#   packaging/setup.sh --tsan-qt  also Qt's own libraries (Core, Gui, Widgets, Test, OpenGL, the
#                                 offscreen platform) built with -fsanitize=thread from the source
#                                 of the installed Qt (Debian's archive), for tests/sanitize.sh
#                                 tsan: about half an hour on 2 cores, once
# Environment: TRIMKV_VENV (default ~/.cache/trimkv/venv-oracle) for the --oracle environment,
# TRIMKV_KVPRESS_VENV (default ~/.cache/trimkv/venv-kvpress) for the --kvpress one,
# TRIMKV_AUTHORS_VENV (default ~/.cache/trimkv/venv-authors) for the --authors one,
# TRIMKV_TSAN_QT (default ~/.cache/trimkv/qt-tsan) for the --tsan-qt build.
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build ccache pkg-config git
  libtorch-dev libopenblas0-openmp   # LibTorch 1.13; OpenMP OpenBLAS (25x faster matmuls)
  libgloo-dev                        # Gloo headers: data-parallel gate training (c10d)
  libdnnl-dev                        # oneDNN sgemm for prefill (optional in CMake)
  libpcre2-dev libutf8proc-dev nlohmann-json3-dev
  libstb-dev                          # stb_image: PNG/JPEG/BMP/GIF decoding (vision/)
  libopencv-imgproc-dev               # OpenCV drawing of the synthetic world (vision/world)
  catch2
  qt6-base-dev qt6-charts-dev qt6-svg-dev libqt6opengl6-dev libgl-dev  # the GUI (optional)
  xvfb xauth                          # GUI screenshot under a virtual X server
  help2man                            # man pages from the programs' --help (the .deb)
  qemu-user                           # the kernel tests on emulated AVX2 and pre-AVX CPUs
)

want_oracle=0
want_kvpress=0
want_authors=0
want_tsan_qt=0
for arg in "$@"; do
  case "$arg" in
    --oracle) want_oracle=1 ;;
    --kvpress) want_oracle=1; want_kvpress=1 ;;
    --authors) want_oracle=1; want_authors=1 ;;
    --tsan-qt) want_tsan_qt=1 ;;
    -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
    *) echo "setup.sh: unknown option '$arg'" >&2; exit 2 ;;
  esac
done

# What Qt's own build needs beyond the GUI's packages (--tsan-qt).
[ "$want_tsan_qt" = 0 ] || PACKAGES+=(curl xz-utils libharfbuzz-dev libdouble-conversion-dev libb2-dev libzstd-dev
                                      libjpeg-dev libmd4c-dev libmd4c-html0-dev libfreetype-dev libpng-dev
                                      libicu-dev libfontconfig-dev libegl-dev)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

if [ "$want_oracle" = 1 ]; then
  venv="${TRIMKV_VENV:-$HOME/.cache/trimkv/venv-oracle}"
  # gguf + accelerate: transformers' GGUF loading (tests/oracle/smollm2_checkpoint.py); jinja2:
  # transformers' chat templates; llama-cpp-python (built from source on install, minutes): the
  # GGUF fixtures' llama.cpp logits and the llama.cpp side of the benchmarks.
  if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c "import transformers, tokenizers, torch, safetensors, PIL, gguf, accelerate, jinja2, llama_cpp" 2>/dev/null; then
    echo "setup: creating the oracle environment in $venv (PyPI torch is several GB)"
    [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
    "$venv/bin/pip" install -q --upgrade pip
    "$venv/bin/pip" install -q torch transformers tokenizers safetensors pillow gguf accelerate jinja2 llama-cpp-python
  fi
  echo "setup: oracle environment ready: $venv/bin/python"
fi

# An environment beside the oracle one, for a package that pins another transformers: the oracle
# environment's packages come after its own on sys.path, so torch (and the triton it brings) is
# found there instead of being downloaded again, while the transformers installed here wins.
#   side_env NAME DIR CHECK PACKAGE...   (CHECK: Python that succeeds when DIR is ready)
side_env() {
  local name="$1" dir="$2" check="$3"
  shift 3
  local oracle="${TRIMKV_VENV:-$HOME/.cache/trimkv/venv-oracle}"
  if [ ! -x "$dir/bin/python" ] || ! "$dir/bin/python" -c "$check" 2>/dev/null; then
    echo "setup: creating the $name environment in $dir"
    [ -x "$dir/bin/python" ] || python3 -m venv "$dir"
    local site
    site="$("$dir/bin/python" -c 'import site; print(site.getsitepackages()[0])')"
    "$oracle/bin/python" -c 'import site; print(site.getsitepackages()[0])' > "$site/zz_oracle_env.pth"
    "$dir/bin/pip" install -q --upgrade pip
    "$dir/bin/pip" install -q "$@"
  fi
  echo "setup: $name environment ready: $dir/bin/python"
}

if [ "$want_kvpress" = 1 ]; then
  side_env kvpress "${TRIMKV_KVPRESS_VENV:-$HOME/.cache/trimkv/venv-kvpress}" "import kvpress, transformers, torch" \
    "kvpress==0.5.5" "transformers>=4.56,<5.3" "tokenizers<0.23.1" "huggingface-hub<2"
fi

if [ "$want_authors" = 1 ]; then
  # trimkv imports flash_attn (CUDA only, not among its requirements) at import time, so
  # readiness is read from the package metadata; authors_gates_fixtures.py stands in for
  # flash_attn (it is never called).
  side_env "TrimKV authors'" "${TRIMKV_AUTHORS_VENV:-$HOME/.cache/trimkv/venv-authors}" \
    "import importlib.metadata as m, transformers, torch, einops; assert m.version('trimkv') == '0.1.5'" \
    "trimkv==0.1.5" "transformers==4.57.1"
fi

if [ "$want_tsan_qt" = 1 ]; then
  # The installed Qt's own source, so that the instrumented libraries can stand in for Debian's at
  # run time (LD_LIBRARY_PATH): the same version, the same ABI; Charts and Svg stay Debian's.
  # forkfd_pidfd off: QProcess then forks instead of vfork-ing, whose child (sharing the parent's
  # memory until exec) TSan takes for the parent's main thread, reporting races that are not.
  qt_dir="${TRIMKV_TSAN_QT:-$HOME/.cache/trimkv/qt-tsan}"
  qt_version="$(dpkg-query -W -f='${Version}' libqt6core6)"  # e.g. 6.4.2+dfsg-10
  upstream="${qt_version%-*}"
  if [ ! -e "$qt_dir/build/lib/libQt6Core.so.6" ] || [ "$(cat "$qt_dir/version" 2>/dev/null)" != "$qt_version" ]; then
    echo "setup: building Qt $upstream with ThreadSanitizer in $qt_dir (about half an hour on 2 cores)"
    rm -rf "$qt_dir"
    mkdir -p "$qt_dir"
    curl -sSfL -o "$qt_dir/src.tar.xz" "http://deb.debian.org/debian/pool/main/q/qt6-base/qt6-base_${upstream}.orig.tar.xz"
    tar -xf "$qt_dir/src.tar.xz" -C "$qt_dir"
    src="$(find "$qt_dir" -maxdepth 1 -type d -name 'qtbase-everywhere-src-*' | head -1)"
    cmake -S "$src" -B "$qt_dir/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS=-g1 -DCMAKE_CXX_FLAGS=-g1 \
      -DFEATURE_sanitize_thread=ON -DQT_BUILD_EXAMPLES=OFF -DQT_BUILD_TESTS=OFF -DFEATURE_dbus=OFF \
      -DFEATURE_xcb=OFF -DFEATURE_vulkan=OFF -DFEATURE_sql=OFF -DFEATURE_glib=OFF -DFEATURE_forkfd_pidfd=OFF \
      -DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache > "$qt_dir/configure.log"
    cmake --build "$qt_dir/build" -j"$(nproc)" --target Core Gui Widgets Test OpenGL OpenGLWidgets \
      QOffscreenIntegrationPlugin > "$qt_dir/build.log"
    rm -f "$qt_dir/src.tar.xz"
    echo "$qt_version" > "$qt_dir/version"
  fi
  echo "setup: Qt with ThreadSanitizer ready: $qt_dir/build/lib"
fi
