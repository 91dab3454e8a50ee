"""The table `device-run.sh source` ends with: per submitted source and problem, the
compile-and-submit time, the time from submission to verdict, the verdict and the
speedup over cuBLASLt-autotune-max in graph mode, read back from the service.

    python3 scripts/source-report.py KAAS_URL OUT_DIR   (OUT_DIR holds compile.tsv and
                                                        submit-NAME.txt per kernel)
"""

import json
import re
import sys
import urllib.request
from datetime import datetime


def ts(s: str) -> datetime:
    return datetime.fromisoformat(s.replace("Z", "+00:00"))


def main(url: str, out: str) -> None:
    compiled = dict(line.rstrip("\n").split("\t") for line in open(f"{out}/compile.tsv"))
    print("kernel | problem | compile+submit s | submission→verdict s | verdict | speedup (graph, vs cuBLASLt-autotune-max)")
    for name, secs in compiled.items():
        said = open(f"{out}/submit-{name}.txt").read()
        m = re.search(r"submission (\d+)", said)
        if not m:
            print(f"{name} | - | {secs} | - | not submitted: {said.strip()[-300:]} | -")
            continue
        v = json.load(urllib.request.urlopen(f"{url}/v1/submissions/{m.group(1)}"))
        json.dump(v, open(f"{out}/submission-{name}.json", "w"), indent=1)
        for j in v["jobs"]:
            r = j.get("run")
            if not r:
                print(f"{name} | {j['path']} | {secs} | - | {j['state']} {j.get('error') or ''} | -")
                continue
            waited = (ts(r["measured_at"]) - ts(v["created_at"])).total_seconds()
            speedup = ((r.get("speedups") or {}).get("graph") or {}).get("cublaslt_autotune_max")
            shown = "-" if speedup is None else f"{speedup:.3f}"
            print(f"{name} | {j['path']} | {secs} | {waited:.1f} | {r['verdict']} | {shown}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
