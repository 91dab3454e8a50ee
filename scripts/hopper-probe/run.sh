#!/usr/bin/env bash
# Builds the hopper-probe harness for every (config, layout, acc) named in a plan and runs
# the plan's cases, then prints a short table. Needs nvcc (CUDA 12.3+), cuBLAS and an sm_90 GPU.
#
# usage: scripts/hopper-probe/run.sh [PLAN_FILE]      (default: plans/default.txt)
# env: OUT (log dir), BUILD (binary dir), TIMEOUT (seconds per plan line, default 60), NVCC
# Plan lines:  CONFIG LAYOUT ACC MODE GRID SHAPE...
#   CONFIG  <BM>x<BN>_s<STAGES>_c<CONSUMERS>_m<CLUSTER_M>_g<GROUP_M>[_e0][_pp][_rc][_x<CHAINS>][_du][_p<PROBE>][_k128][_ec],
#           e.g. 128x256_s4_c2_m1_g16
#           (_e0: KAAS_EPILOGUE=0, direct 4-byte stores; _pp: KAAS_PINGPONG=1; _rc: the cluster
#           release arrives with .release.cluster, KAAS_MC_ARRIVE_CTA=0; _x2, _x4: KAAS_CHAINS;
#           _du: KAAS_DESC_UNIFORM=1, the wgmma descriptors as one add to a uniform base; _dr:
#           KAAS_DESC_UNIFORM=2, one add to the descriptors' low words;
#           _p1.._p9: KAAS_PROBE, a diagnostic variant whose results are wrong by design, so
#           bench mode only: 1 loads only, 2 math only, 3 neither, 4 no C stores, 5 neither
#           and no wgmma fence/commit/wait, 6 return at once, 7 return after the barrier
#           set-up, 8 C staged but not stored, 9 no epilogue but one accumulator read; _k128:
#           KAAS_BK=128, two swizzle atoms per ring slot; _k256: four; _ec: KAAS_EARLY_COORDS=1,
#           the consumers' tile origin computed before the K loop; _2d: KAAS_GRID2D=1, one tile
#           per CTA on a [tile columns, tile rows] grid, no tile-order divisions); the entry is named
#           kaas_wgmma_<acc>_<layout>_<CONFIG>
#   LAYOUT  tn | nn      ACC  f32 | f16      MODE  check | bench | both
#   GRID    tiles | persistent | a CTA count      SHAPE  MxNxK
# Logs go to $OUT (default .dev/hopper/out): build.log, run.log, summary.txt.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
out=${OUT:-$root/.dev/hopper/out}
build=${BUILD:-$root/.dev/hopper/build}
mkdir -p "$out" "$build"
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
plan_file=${1:-$here/plans/default.txt}

# 1. build every distinct (config, layout, acc), in parallel
grep -v '^\s*#' "$plan_file" | awk 'NF>=5 {print $1, $2, $3}' | sort -u > "$out/builds.txt"
build_one() {
  local cfg=$1 layout=$2 acc=$3
  if [[ ! $cfg =~ ^([0-9]+)x([0-9]+)_s([0-9]+)_c([0-9]+)_m([0-9]+)_g([0-9]+)(_e0)?(_pp)?(_rc)?(_x[24])?(_du|_dr)?(_p[0-9])?(_k128|_k256)?(_ec)?(_2d)?$ ]]; then
    echo "bad config $cfg" > "$build/build-$cfg-$layout-$acc.log"; return 1
  fi
  local tn=$([ "$layout" = tn ] && echo 1 || echo 0) f32=$([ "$acc" = f32 ] && echo 1 || echo 0)
  local flags="-DKAAS_EPILOGUE=1"
  [ -n "${BASH_REMATCH[7]}" ] && flags="-DKAAS_EPILOGUE=0"
  [ -n "${BASH_REMATCH[8]}" ] && flags="$flags -DKAAS_PINGPONG=1"
  [ -n "${BASH_REMATCH[9]}" ] && flags="$flags -DKAAS_MC_ARRIVE_CTA=0"
  [ -n "${BASH_REMATCH[10]}" ] && flags="$flags -DKAAS_CHAINS=${BASH_REMATCH[10]#_x}"
  [ "${BASH_REMATCH[11]}" = _du ] && flags="$flags -DKAAS_DESC_UNIFORM=1"
  [ "${BASH_REMATCH[11]}" = _dr ] && flags="$flags -DKAAS_DESC_UNIFORM=2"
  [ -n "${BASH_REMATCH[12]}" ] && flags="$flags -DKAAS_PROBE=${BASH_REMATCH[12]#_p}"
  local bk=64
  [ -n "${BASH_REMATCH[13]}" ] && bk=${BASH_REMATCH[13]#_k}
  [ -n "${BASH_REMATCH[14]}" ] && flags="$flags -DKAAS_EARLY_COORDS=1"
  [ -n "${BASH_REMATCH[15]}" ] && flags="$flags -DKAAS_GRID2D=1"
  # One entry name per plan config, so every row of the table names what ran.
  "$NVCC" -std=c++17 -O3 -gencode arch=compute_90a,code=sm_90a -Xptxas -v \
    -DKAAS_BM=${BASH_REMATCH[1]} -DKAAS_BN=${BASH_REMATCH[2]} -DKAAS_BK=$bk -DKAAS_STAGES=${BASH_REMATCH[3]} \
    -DKAAS_CONSUMERS=${BASH_REMATCH[4]} -DKAAS_CLUSTER_M=${BASH_REMATCH[5]} -DKAAS_GROUP_M=${BASH_REMATCH[6]} \
    -DKAAS_LAYOUT_TN=$tn -DKAAS_ACC_F32=$f32 $flags -DKAAS_ENTRY=kaas_wgmma_${acc}_${layout}_$cfg \
    -o "$build/probe-$cfg-$layout-$acc" "$here/probe.cu" -lcublas -lcuda \
    > "$build/build-$cfg-$layout-$acc.log" 2>&1 || { echo "BUILD FAILED $cfg $layout $acc"; return 1; }
}
export -f build_one; export out build here NVCC
t0=$(date +%s)
xargs -P "$(nproc)" -L 1 bash -c 'build_one "$@"' _ < "$out/builds.txt"
echo "built $(wc -l < "$out/builds.txt") binaries in $(( $(date +%s) - t0 ))s"
for f in "$build"/build-*.log; do echo "== $(basename "$f")"; grep -v "^ptxas info    : \(Compiling\|Function properties\|Compile time\)" "$f" | grep -v "bytes stack frame, 0 bytes spill" | grep -i "kaas_wgmma\|registers\|spill\|C75\|error\|warning" | grep -v "ref_gemm\|fill_random\|compare\|count_" | head -8; done > "$out/build.log"
grep -B1 -i "error" "$out/build.log" | head -20

# 2. run the cases
: > "$out/run.log"
grep -v '^\s*#' "$plan_file" | while read -r cfg layout acc mode grid shapes; do
  [ -z "$cfg" ] && continue
  bin="$build/probe-$cfg-$layout-$acc"
  [ -x "$bin" ] || { echo "MISSING $cfg $layout $acc" | tee -a "$out/run.log"; continue; }
  timeout "${TIMEOUT:-60}" "$bin" --mode "$mode" --grid "$grid" $shapes >> "$out/run.log" 2>&1 || echo "EXIT $? $cfg $layout $acc $grid" | tee -a "$out/run.log"
done

# 3. table
{
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader 2>/dev/null | head -1
  grep -h "^INFO" "$out/run.log" | sort -u | awk '{for (i = 3; i <= NF; i++) if ($i ~ /^max_active_clusters=/) print $2, $i}'
  echo "--- correctness"
  awk '/^RESULT/ {printf "%-44s %s %s %-16s %s %s %s %s %s %s %s %s %s\n", $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14}' "$out/run.log"
  echo "--- timing (median us, TFLOP/s, speedup = cublas_us / us)"
  awk '/^TIMING/ {split($7,a,"=");split($8,b,"=");split($9,c,"=");split($10,d,"=");split($11,e,"=");
       printf "%-44s %s %s %-16s %-10s %9s %9s %7s %7s %6s\n", $2, $3, $4, $5, $6, a[2], b[2], c[2], d[2], e[2]}' "$out/run.log"
  grep -h "EXIT\|MISSING\|BUILD FAILED" "$out/run.log" || true
  echo "--- cost of K (least squares over the K values timed per entry and M×N)"
  python3 "$here/slopes.py" "$out/run.log" || true
} | tee "$out/summary.txt"
