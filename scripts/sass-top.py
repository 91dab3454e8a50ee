#!/usr/bin/env python3
"""The executed-instruction mix of one ncu report: `ncu --import R.ncu-rep --page source --csv
--print-source sass > R.csv`, then `python3 scripts/sass-top.py R.csv`: the share of each
opcode and the 25 SASS lines executed most (2026-11-26 compared our large tile with
cuBLASLt's this way)."""
import collections, csv, sys

rows = list(csv.reader(open(sys.argv[1])))
head = next(i for i, r in enumerate(rows) if any(c.startswith("Source") for c in r) and any(c.startswith("Instructions Executed") for c in r))
h, data = rows[head], rows[head + 1:]
src = next(i for i, c in enumerate(h) if c.startswith("Source"))
executed = next(i for i, c in enumerate(h) if c.startswith("Instructions Executed"))


def num(x):
    try:
        return float(x.replace(",", ""))
    except ValueError:
        return 0.0


data = [r for r in data if len(r) > executed]
total = sum(num(r[executed]) for r in data)
print("total", total)
by_op = collections.Counter()
for r in data:
    words = r[src].strip().split(" ")
    op = words[1] if words[0].startswith("@") and len(words) > 1 else words[0]
    by_op[op.split(".")[0] or "?"] += num(r[executed])
for op, n in by_op.most_common(18):
    print(f"{op:12} {n / total * 100:5.1f}%")
for r in sorted(data, key=lambda r: -num(r[executed]))[:25]:
    print(f"{num(r[executed]) / total * 100:5.1f}%  {r[src].strip()[:110]}")
