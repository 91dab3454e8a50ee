#!/usr/bin/env python3
"""Issue 5's figures for a catalog bundle: per layout, the geometric-mean speedup over the
1,000-shape grid counting every shape as served (the kernel where its side-by-side
speedup beats the baseline by the service's SERVE_MARGIN, 1%, else the baseline, 1.0), against cuBLASLt-autotune-max,
cuBLAS-max and cuBLASLt-heuristic-max in graph mode, and against autotune-max in offline
mode; entries, wins, the kernels alone, and by FLOP bucket; then the split-K entries.

    python3 scripts/catalog-figures.py kernels/h100/index.json.gz
"""
import sys
import catalog_index
MARGIN=catalog_index.MARGIN  # the service's SERVE_MARGIN: a win below it is not served
cur=catalog_index.served_entries(catalog_index.load(sys.argv[1]))
for mode, base in [('graph', b) for b in ('cublaslt_autotune_max','cublas_max','cublaslt_heuristic_max')] + [('offline', 'cublaslt_autotune_max')]:
  print(f'{mode} mode, vs {base}')
  for layout in ('tn','nn'):
    served, byb, kern, wins = catalog_index.grid_figures(cur, layout, lambda e: e['run']['speedups'][mode][base])
    gm=catalog_index.geomean
    print(f"  {layout}: served geomean over 1000 = {gm(served):.4f}; entries {len(kern)} (kernels alone {gm(kern):.3f}), wins {wins}, best {max(kern):.3f}; by bucket " + ", ".join(f"{b}: {gm(v):.3f}" for b,v in sorted(byb.items())))

sk=[e for e in cur.values() if '_sk' in e['manifest']['launches'][0]['entry']]
won=[e for e in sk if e["run"]["speedups"]["graph"]["cublaslt_autotune_max"]>=MARGIN]
print(f"split-K entries: {len(sk)} ({sum('_ska' in e['manifest']['launches'][0]['entry'] for e in sk)} atomic), {len(won)} faster than autotune-max in graph mode")
