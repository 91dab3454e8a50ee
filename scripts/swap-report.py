#!/usr/bin/env python3
"""Swap-AB beside the rest of the search, per problem, from a `kaas tune --trial swap` state.

    python3 scripts/swap-report.py STATE.json[.gz]

For each problem: cuBLASLt's heuristic pick (the tuner's reference, timed before the
search), the winner, and the best mean reward the bandit measured among the swap-AB codes
(`_sw` codes) and among the others. Rewards are speedups over that reference in the tuner's
regime (graph replays over rotating buffer sets); the served figures are the workers'.
"""

import gzip
import json
import math
import sys

import tune_code  # beside this script


def label(c: dict) -> str:
    h = tune_code.hopper(c)
    if h is None:
        return "mma/gemv"
    bm, bn, bk, stages, consumers, cluster_m, tags = h
    s = f"{bm}x{bn}" + (f" k{bk}" if bk != 64 else "") + f" s{stages} c{consumers}"
    if "skh" in tags:
        s += " stream-K hybrid"
    elif "sks" in tags:
        s += " stream-K"
    elif c.get("split", 1) > 1:
        s += f" split {c['split']}"
    if cluster_m > 1:
        s += f" m{cluster_m}"
    if tune_code.count(tags, "x") > 1:
        s += f" x{tune_code.count(tags, 'x')}"
    if c.get("persistent"):
        s += " persistent"
    return s + (" swap" if is_swap(c) else "")


def is_swap(c: dict) -> bool:
    h = tune_code.hopper(c)
    return h is not None and "sw" in h[6]


def main() -> int:
    path = sys.argv[1]
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        state = json.load(f)
    rows, swap_logs, best_logs = [], [], []
    for key, r in sorted(state["results"].items(), key=lambda kv: (kv[1]["problem"]["n"], kv[1]["problem"]["k"], kv[1]["problem"]["m"])):
        arms = r.get("arms", [])
        swap = max((a[1] for a in arms if is_swap(a[0])), default=float("nan"))
        other = max((a[1] for a in arms if not is_swap(a[0])), default=float("nan"))
        p = r["problem"]
        rows.append((f"{p['m']}x{p['n']}x{p['k']}", r["reference_us"], r["winner_us"], r["reward"], label(r["winner"]), swap, other))
        if not math.isnan(swap) and not math.isnan(other):
            swap_logs.append(math.log(swap / other))
        best_logs.append(math.log(r["reward"]))
    print(f"{'problem':>20} {'cuBLASLt us':>11} {'winner us':>9} {'reward':>7}  {'best swap':>9} {'best other':>10}  winner")
    for name, ref, win, reward, lab, swap, other in rows:
        print(f"{name:>20} {ref:11.1f} {win:9.1f} {reward:7.3f}  {swap:9.3f} {other:10.3f}  {lab}")
    if swap_logs:
        print(f"\n{len(rows)} problems; geomean of best swap / best other: {math.exp(sum(swap_logs) / len(swap_logs)):.3f}; "
              f"swap best on {sum(1 for x in swap_logs if x > 0)}; geomean winner reward: {math.exp(sum(best_logs) / len(best_logs)):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
