#!/bin/sh
# make_manpage.sh PROGRAM NAME OUTDIR: OUTDIR/NAME.1.gz from the program's own --help and --version
# (help2man); for trimkv, each command's --help becomes a section of its own.
set -eu
prog="$1"; name="$2"; out="$3"
inc="$out/$name.h2m"
: > "$inc"
if [ "$name" = trimkv ]; then
  printf '[COMMANDS]\n' >> "$inc"
  for cmd in $("$prog" --help | sed -n 's/^  \([a-z][a-z-]*\)  .*/\1/p'); do
    printf '.SS %s\n.nf\n' "$cmd" >> "$inc"
    "$prog" "$cmd" --help 2>&1 | sed 's/\\/\\e/g; s/^\./\\\&./' >> "$inc"
    printf '.fi\n' >> "$inc"
  done
  desc="chat with vision-language models under a KV budget, and inspect what they keep"
else
  desc="desktop application: image chat with a live view of the KV cache under eviction"
fi
printf '[FILES]\n.TP\n/usr/share/trimkv/demo-model\nthe built-in demo model (TRIMKV_DEMO_MODEL names another)\n.TP\n~/.cache/trimkv/weights\nq8/q4 blocks made at load, kept for the next load (TRIMKV_WEIGHT_CACHE=0: never)\n' >> "$inc"
QT_QPA_PLATFORM=offscreen help2man --no-info --section 1 --name "$desc" \
  --include "$inc" --output "$out/$name.1" "$prog"
gzip -9nf "$out/$name.1"
