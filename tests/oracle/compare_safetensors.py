"""Compares two safetensors files tensor by tensor (tests/oracle/check_fixtures.sh, for files that
are not byte-identical): names, dtypes, shapes, metadata, and the largest absolute difference.
Exit status 0 when they hold the same tensors and metadata (only the byte layout differs: header
order, padding), 1 otherwise. Usage: compare_safetensors.py COMMITTED REGENERATED"""
import sys

from safetensors import safe_open


def main(a_path, b_path):
    same = True
    with safe_open(a_path, "pt") as a, safe_open(b_path, "pt") as b:
        if a.metadata() != b.metadata():
            keys = sorted(set(a.metadata() or {}) | set(b.metadata() or {}))
            changed = [k for k in keys if (a.metadata() or {}).get(k) != (b.metadata() or {}).get(k)]
            print(f"  metadata differs: {', '.join(changed)}")
            same = False
        names_a, names_b = set(a.keys()), set(b.keys())
        if names_a != names_b:
            print(f"  tensors only committed: {sorted(names_a - names_b)}; only regenerated: {sorted(names_b - names_a)}")
            same = False
        worst = (0.0, "")
        for name in sorted(names_a & names_b):
            x, y = a.get_tensor(name), b.get_tensor(name)
            if x.dtype != y.dtype or x.shape != y.shape:
                print(f"  {name}: {x.dtype} {tuple(x.shape)} vs {y.dtype} {tuple(y.shape)}")
                same = False
                continue
            d = (x.double() - y.double()).abs().max().item() if x.numel() else 0.0
            if d > worst[0]:
                worst = (d, name)
        if worst[0] > 0:
            print(f"  largest |difference| {worst[0]:.3g} ({worst[1]})")
            same = False
    if same:
        print("  same tensors and metadata (only the byte layout differs)")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
