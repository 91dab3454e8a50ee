"""Helpers of `device-run.sh recheck` (the H100 catalog measured on another GPU).

    python3 scripts/recheck.py pick BUNDLE_DIR OUT_DIR EVERY   every EVERY-th entry of the
        bundle in (layout, acc, FLOP) order, as NAME.ptx + NAME.json (its manifest)
    python3 scripts/recheck.py table BUNDLE_TGZ                 per layout and FLOP bucket,
        the geometric mean of the entries' graph-mode speedup over cuBLASLt-autotune-max
"""

import gzip
import io
import json
import math
import os
import sys
import tarfile


def pick(src: str, dst: str, every: int, offset: int = 0) -> None:
    """Every `every`-th entry of the bundle `src` from `offset`, in (layout, acc, FLOP)
    order, as NAME.ptx and NAME.json (its concrete manifest) in `dst`."""
    idx = json.load(gzip.open(os.path.join(src, "index.json.gz")))
    flop = lambda p: p["m"] * p["n"] * p["k"]
    entries = sorted(idx["entries"], key=lambda e: (e["problem"]["layout"], e["problem"]["acc"], flop(e["problem"]), e["problem"]["m"]))
    picked = entries[offset % every::every]
    for e in picked:
        p = e["problem"]
        name = f"{p['acc']}_{p['layout']}_{p['m']}x{p['n']}x{p['k']}"
        with open(os.path.join(src, "ptx", e["artifact"] + ".ptx")) as f:
            ptx = f.read()
        with open(os.path.join(dst, name + ".ptx"), "w") as f:
            f.write(ptx)
        with open(os.path.join(dst, name + ".json"), "w") as f:
            json.dump(e["manifest"], f)
    print(f"recheck: {len(picked)} of {len(entries)} entries (every {every}th from {offset % every})")


def bucket(p: dict) -> str:
    flop = 2 * p["m"] * p["n"] * p["k"]
    return "< 2^30" if flop < 2**30 else "2^30-2^36" if flop < 2**36 else "2^36-2^40" if flop < 2**40 else ">= 2^40"


def table(tgz: str) -> None:
    t = tarfile.open(tgz)
    idx = json.load(gzip.open(io.BytesIO(t.extractfile("bundle/index.json.gz").read())))
    rows: dict = {}
    for e in idx["entries"]:
        g = ((e.get("run") or {}).get("speedups") or {}).get("graph") or {}
        rows.setdefault((e["problem"]["layout"], bucket(e["problem"])), []).append(g.get("cublaslt_autotune_max"))
    print("layout | FLOP bucket | entries | × cuBLASLt-autotune-max, geomean | beat it")
    for (layout, b), xs in sorted(rows.items()):
        xs = [x for x in xs if x]
        if xs:
            print(f"{layout} | {b} | {len(xs)} | {math.exp(sum(map(math.log, xs)) / len(xs)):.4f} | {sum(x > 1 for x in xs)}")


if __name__ == "__main__":
    if sys.argv[1] == "pick":
        pick(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]) if len(sys.argv) > 5 else 0)
    else:
        table(sys.argv[2])
