"""A tuner candidate as a tune state file holds it, read by the scripts that report on one.

A Hopper or mma configuration is `{"code": ..., "split": n, <launch choices>}`: the code is
its entry name without prefix, accumulator and layout (src/kernels/axes.rs, `CodeForm`),
e.g. `128x32x64_s11_c1_m2_g16_dr_ec_sw`. A gemv configuration is an object of its fields.
"""


def hopper(c: dict):
    """(BM, BN, BK, stages, consumers, cluster rows, suffix tags) of a Hopper code, else None."""
    parts = c.get("code", "").split("_")
    if len(parts) < 5 or not (parts[1].startswith("s") and parts[2].startswith("c") and parts[3].startswith("m") and parts[4].startswith("g")):
        return None
    bm, bn, bk = (int(x) for x in parts[0].split("x"))
    return bm, bn, bk, int(parts[1][1:]), int(parts[2][1:]), int(parts[3][1:]), set(parts[5:])


def count(tags: set, tag: str) -> int:
    """A counted row's value among the tags (`n4` for tag `n`), 1 where absent."""
    for t in tags:
        if t.startswith(tag) and t[len(tag):].isdigit():
            return int(t[len(tag):])
    return 1
