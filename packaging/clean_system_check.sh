#!/usr/bin/env bash
# The clean-system proof of the Debian package (issue 22): a minimal Debian 12 root made by
# debootstrap, the .deb installed with apt (which brings the runtime dependencies), then, inside it,
# what a new user would run: trimkv --version, info on the demo model, generate with a demo image,
# eval on a small generated set, and trimkv-studio --screenshot under xvfb-run; RUNPATH and file
# placement checked; lintian on the package; then apt purge, and no file of ours may remain.
#   packaging/clean_system_check.sh [PACKAGE.deb]    (default: packaging/make_deb.sh's)
# Needs root and Debian's archive. Writes build/clean-system/ (the root, kept for the next run)
# and build/clean-system-report/ (log and screenshot). Exits non-zero on the first failure.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${TRIMKV_BUILD_DIR:-$root/build}"
deb="${1:-}"
[ -n "$deb" ] || deb="$("$root/packaging/make_deb.sh" | tail -1)"
deb="$(realpath "$deb")"
chroot_dir="$build/clean-system"
report="$build/clean-system-report"
mirror="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
mkdir -p "$report"
log="$report/log.txt"
: > "$log"
say() { echo "== $*" | tee -a "$log"; }

for tool in debootstrap lintian; do
  command -v "$tool" >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$tool" >/dev/null
done

say "lintian $(basename "$deb")"
lintian --info "$deb" 2>&1 | grep -v 'root privileges' | tee -a "$log" || true
if lintian "$deb" 2>&1 | grep -q '^E:'; then echo "lintian reports errors" | tee -a "$log"; exit 1; fi

if [ ! -x "$chroot_dir/usr/bin/apt-get" ]; then
  say "debootstrap bookworm (minbase) into $chroot_dir"
  rm -rf "$chroot_dir"
  debootstrap --variant=minbase bookworm "$chroot_dir" "$mirror" >>"$log" 2>&1
fi
mounts=(proc sys dev)
cleanup() { for m in "${mounts[@]}"; do umount -l "$chroot_dir/$m" 2>/dev/null || true; done; }
trap cleanup EXIT
mount -t proc proc "$chroot_dir/proc"
mount --rbind /sys "$chroot_dir/sys"
mount --rbind /dev "$chroot_dir/dev"
cp /etc/resolv.conf "$chroot_dir/etc/resolv.conf" 2>/dev/null || true
in_root() { chroot "$chroot_dir" /usr/bin/env -i HOME=/root PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 bash -c "$1"; }

before="$report/files-before.txt"
in_root "find / -xdev \\( -path /proc -o -path /sys -o -path /dev -o -path /root -o -path /tmp -o -path /var \\) -prune -o -print | sort" > "$before"

say "apt install the package (and xvfb for the screenshot)"
cp "$deb" "$chroot_dir/tmp/trimkv-studio.deb"
in_root "apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends /tmp/trimkv-studio.deb xvfb xauth" >>"$log" 2>&1

say "what a new user runs"
in_root "trimkv --version && trimkv-studio --version" | tee -a "$log"
in_root "trimkv info" | tee -a "$log"
in_root "cd /tmp && rm -rf w && trimkv make-world --out w --n 12 --seed 7 --split test >/dev/null && ls w | head -3" | tee -a "$log"
img=$(in_root "ls /tmp/w/images/*.png 2>/dev/null | head -1 || find /tmp/w -name '*.png' | head -1")
[ -n "$img" ] || img=$(in_root "find /tmp/w -name '*.png' | head -1")
in_root "trimkv generate --image $img --prompt 'How many shapes are there?' --max-new-tokens 16" | tee -a "$log"
in_root "trimkv eval --data /tmp/w/test.jsonl --limit 12 --policy dbtrimkv --budget 256" | tee -a "$log"
in_root "cd /tmp && rm -f shot.png && xvfb-run -a -s '-screen 0 1600x1000x24' trimkv-studio --screenshot /tmp/shot.png" >>"$log" 2>&1
cp "$chroot_dir/tmp/shot.png" "$report/screenshot.png"
say "screenshot: $report/screenshot.png ($(stat -c %s "$report/screenshot.png") bytes)"

say "installed files, RUNPATH"
in_root "dpkg -L trimkv-studio" > "$report/files-installed.txt"
for f in /usr/bin/trimkv /usr/bin/trimkv-studio; do  # read with the host's readelf (minbase has none)
  readelf -d "$chroot_dir$f" > "$report/dynamic.txt"
  grep -q NEEDED "$report/dynamic.txt" || { echo "cannot read $f's dynamic section" | tee -a "$log"; exit 1; }
  if grep -E 'RPATH|RUNPATH' "$report/dynamic.txt"; then echo "$f carries an RPATH/RUNPATH" | tee -a "$log"; exit 1; fi
done
echo "no RPATH/RUNPATH in /usr/bin/trimkv, /usr/bin/trimkv-studio; $(wc -l < "$report/files-installed.txt") paths installed" | tee -a "$log"
grep -vE '^/usr/(bin|share)(/|$)|^/\.$|^/usr$' "$report/files-installed.txt" | tee -a "$log" \
  && { echo "files outside /usr/bin and /usr/share" | tee -a "$log"; exit 1; } || true

say "apt purge, then nothing of ours remains"
in_root "DEBIAN_FRONTEND=noninteractive apt-get purge -y -q trimkv-studio" >>"$log" 2>&1
left=0
while read -r f; do
  case "$f" in /usr|/usr/bin|/usr/share|/usr/share/*/|/.) continue ;; esac
  if [ -e "$chroot_dir$f" ] && [ ! -d "$chroot_dir$f" ]; then echo "left behind: $f" | tee -a "$log"; left=1; fi
  if [ -d "$chroot_dir$f" ] && ! grep -qx "$f" "$before" && [ -z "$(ls -A "$chroot_dir$f")" ]; then
    echo "empty folder left behind: $f" | tee -a "$log"; left=1; fi
done < "$report/files-installed.txt"
in_root "find / -xdev \\( -path /proc -o -path /sys -o -path /dev -o -path /root -o -path /tmp -o -path /var \\) -prune -o -print | sort" > "$report/files-after.txt"
comm -13 "$before" "$report/files-after.txt" | grep -i trimkv | tee -a "$log" | grep -q . && left=1
[ "$left" = 0 ] || exit 1
echo "after purge: none of the $(grep -c . "$report/files-installed.txt") installed paths remains (bar the shared /usr folders)" | tee -a "$log"
say "user data (kept, as every package keeps a user's own files): $(in_root 'ls -d /root/.cache/trimkv /root/.local/share/TrimKV* /root/.config/TrimKV* 2>/dev/null | tr "\n" " "')"
say "clean-system check passed"
