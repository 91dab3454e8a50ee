#!/usr/bin/env python3
"""The cost of K per entry from a hopper-probe run log: for each (entry, layout, M×N) timed
at three or more K, the least-squares line of the median µs against the count of 64-wide
K-tiles, its slope in ns per K-tile and its intercept in µs, and cuBLAS's the same way
(from the same lines). Read with plans/ktile.txt: which path of the kernel carries the
cost of a K-tile.

    python3 scripts/hopper-probe/slopes.py OUT/run.log
"""
import collections
import re
import sys

LINE = re.compile(r"^TIMING (\S+) (\S+) (\S+) (\d+)x(\d+)x(\d+) \S+ us=([\d.]+) cublas_us=([\d.]+)")


def fit(points):
    """(slope, intercept) of y against x by least squares."""
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    slope = sum((x - mx) * (y - my) for x, y in points) / sxx if sxx else float("nan")
    return slope, my - slope * mx


def main():
    groups = collections.OrderedDict()
    with open(sys.argv[1]) as f:
        for line in f:
            m = LINE.match(line)
            if not m:
                continue
            entry, layout, _acc, M, N, K, us, cus = m.groups()
            ktiles = (int(K) + 63) // 64
            groups.setdefault((entry, layout, f"{M}x{N}"), []).append((ktiles, float(us), float(cus)))
    print(f"{'entry':<46} {'layout':<6} {'M×N':<10} {'K values':>8} {'ns/K-tile':>10} {'at K=0 µs':>10} {'cuBLAS ns/K-tile':>17} {'cuBLAS at K=0':>14}")
    for (entry, layout, mn), pts in groups.items():
        if len({k for k, _, _ in pts}) < 3:
            continue
        s, b = fit([(k, us) for k, us, _ in pts])
        cs, cb = fit([(k, c) for k, _, c in pts])
        print(f"{entry:<46} {layout:<6} {mn:<10} {len(pts):>8} {1e3 * s:>10.1f} {b:>10.2f} {1e3 * cs:>17.1f} {cb:>14.2f}")


if __name__ == "__main__":
    main()
