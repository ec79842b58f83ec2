"""Weight-cache benchmark (core/include/trimkv/core/weight_cache.h): how long `trimkv info
--weights q8|q4` takes to load a bf16 checkpoint when it quantises every matrix (cache off), when it
quantises and writes the cache (first load), and when it reads the cache (every later load), with
each process's peak RSS. The checkpoint is bench_weights.py's random one of the shape asked
(written once under ~/.cache/trimkv/bench with numpy alone), or any checkpoint folder or GGUF file
given by --model. The cache goes to a temporary folder, removed afterwards.

Usage: python3 tests/bench/bench_weight_cache.py [--shape smollm2-135m|qwen2.5-3b | --model PATH]
       [--formats q8,q4] [--repeat 3] [--binary build/app/trimkv]
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_weights import BENCH, ROOT, SHAPES, make_checkpoint  # noqa: E402


def timed(cmd, env):
    """Wall seconds of one run of `cmd` and its line about the weight cache."""
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = p.communicate()
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{err}")
    note = next((l for l in out.splitlines() if l.startswith("weight cache")), "")
    return wall, note


def peak_rss_mib(cmd, env):
    """Peak resident memory (MiB) of one run of `cmd`: measured by a helper process whose only
    child it is (RUSAGE_CHILDREN), so nothing else this script ran is counted."""
    helper = ("import resource, subprocess, sys; subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, "
              "stderr=subprocess.DEVNULL, check=True); print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")
    out = subprocess.run([sys.executable, "-c", helper] + cmd, env=env, capture_output=True, text=True, check=True)
    return int(out.stdout.strip()) / 1024.0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", choices=sorted(SHAPES), default="qwen2.5-3b")
    ap.add_argument("--model", help="a checkpoint folder or GGUF file instead of the random one")
    ap.add_argument("--formats", default="q8,q4")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--binary", default=str(ROOT / "build" / "app" / "trimkv"))
    args = ap.parse_args()
    model = Path(args.model) if args.model else BENCH / f"{args.shape}-shaped"
    if not args.model and not (model / "model.safetensors").exists():
        print(f"writing the random {args.shape} checkpoint to {model} ...", flush=True)
        make_checkpoint(model, SHAPES[args.shape])
    size = sum(f.stat().st_size for f in (model.glob("*.safetensors") if model.is_dir() else [model]))
    print(f"model {model} ({size / 2**20:.0f} MiB); {os.cpu_count()} CPUs; best of {args.repeat}\n")
    print("| weights | load, cache off (s) | first load: quantise + write cache (s) | later loads: read cache (s) "
          "| speed-up | peak RSS off / read (MiB) | cache file (MiB) |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for fmt in args.formats.split(","):
        with tempfile.TemporaryDirectory() as cache:
            env = dict(os.environ, TRIMKV_WEIGHT_CACHE_DIR=cache)
            off_env = dict(env, TRIMKV_WEIGHT_CACHE="0")
            cmd = [args.binary, "info", "--model", str(model), "--weights", fmt]
            off = min(timed(cmd, off_env)[0] for _ in range(args.repeat))
            first, note = timed(cmd, env)
            assert "cached in" in note, note
            later = []
            for _ in range(args.repeat):
                t, note = timed(cmd, env)
                assert "read as" in note, note
                later.append(t)
            rss_off, rss_read = peak_rss_mib(cmd, off_env), peak_rss_mib(cmd, env)
            file_mib = sum(f.stat().st_size for f in Path(cache).iterdir()) / 2**20
            print(f"| {fmt} | {off:.2f} | {first:.2f} | {min(later):.2f} | {off / min(later):.1f}x "
                  f"| {rss_off:.0f} / {rss_read:.0f} | {file_mib:.0f} |", flush=True)


if __name__ == "__main__":
    main()
