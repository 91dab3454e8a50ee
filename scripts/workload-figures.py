#!/usr/bin/env python3
"""The workload presets as a service answers them: per preset, the problems' states and
the served geometric mean over cuBLASLt-autotune-max (graph mode, as the worker measured
it; every problem without a served kernel counted as 1.0), over all token counts and over
1-16 tokens; then over the distinct problems at 16-1,024 tokens. No GPU: run it against a fresh `kaas serve` on the shipped catalog.

    python3 scripts/workload-figures.py [URL] [DEVICE]     # http://127.0.0.1:8080 H100-SXM
"""
import collections
import json
import math
import sys
import urllib.request

url = sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:8080"
device = sys.argv[2] if len(sys.argv) > 2 else "H100-SXM"


def geomean(rows):
    return math.exp(sum(math.log(r["speedup"] if r["state"] == "served" and r["speedup"] else 1.0) for r in rows) / len(rows))


everything = []
print("preset | problems | served | baseline_faster | not answered | served geomean | tokens 1-16")
for w in json.load(urllib.request.urlopen(f"{url}/v1/workloads")):
    name = w["config"]["name"]
    rows = json.load(urllib.request.urlopen(f"{url}/v1/workloads/{name}?device={device}"))["rows"]
    states = collections.Counter(r["state"] for r in rows)
    decode = [r for r in rows if r["tokens"] <= 16]
    everything += rows
    print(f"{name} | {len(rows)} | {states['served']} | {states['baseline_faster']} | {states['not_in_catalog']} | {geomean(rows):.4f} | {geomean(decode):.3f}")
print(f"all presets | {len(everything)} | | | | {geomean(everything):.4f} |")
# Issue 54's range, each distinct problem once (presets share shapes).
mid = {r["path"]: r for r in everything if 16 <= r["tokens"] <= 1024}
print(f"16-1,024 tokens, distinct problems | {len(mid)} | {sum(r['state'] == 'served' for r in mid.values())} | | | "
      f"{geomean(list(mid.values())):.4f} |")
