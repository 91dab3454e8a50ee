#!/usr/bin/env bash
# Builds the hopper-probe harness for every (config, layout, acc) named in a plan and runs
# the plan's cases, then prints a short table. Needs nvcc (CUDA 12.3+), cuBLAS and an sm_90 GPU.
#
# usage: scripts/hopper-probe/run.sh [PLAN_FILE]      (default: plans/default.txt)
# env: OUT (log dir), BUILD (binary dir), TIMEOUT (seconds per plan line, default 60), NVCC,
#      KAAS (the kaas binary; default target/release/kaas, then .dev/gpu/kaas, then PATH),
#      DRY_RUN=1 (print each build's defines and stop: no GPU or nvcc needed)
# Plan lines:  CONFIG LAYOUT ACC MODE GRID SHAPE...
#   CONFIG  a Hopper code as the tuner names it, less `kaas_wgmma_<acc>_<layout>_`:
#           <BM>x<BN>x<BK>_s<STAGES>_c<CONSUMERS>_m<CLUSTER_M>_g16 and the suffixes of
#           src/tuner/hopper.rs's AXES table in its order (e.g. 128x256x64_s4_c2_m1_g16_pp_du_ec);
#           `kaas tune --defines` turns it into the template's defines, so the probe builds
#           exactly what the tuner builds. Then the probe's own options, each after a `+`:
#           +e0: KAAS_EPILOGUE=0, direct 4-byte stores from the accumulators; +rc: the cluster
#           release arrives with .release.cluster (KAAS_MC_ARRIVE_CTA=0); +p1 … +p9: KAAS_PROBE,
#           a diagnostic variant whose results are wrong by design, so bench mode only:
#           1 loads only, 2 math only, 3 neither, 4 no C stores, 5 neither and no wgmma
#           fence/commit/wait, 6 return at once, 7 return after the barrier set-up, 8 C staged
#           but not stored, 9 no epilogue but one accumulator read. The entry is the tuner's
#           name with `_probe_<option>` for each option.
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
KAAS=${KAAS:-$(for k in "$root/target/release/kaas" "$root/.dev/gpu/kaas" "$(command -v kaas)"; do [[ -x $k ]] && { echo "$k"; break; }; done)}
[[ -x "$KAAS" ]] || { echo "no kaas binary: cargo build --release, or set KAAS" >&2; exit 1; }
plan_file=${1:-$here/plans/default.txt}

# 1. build every distinct (config, layout, acc), in parallel
grep -v '^\s*#' "$plan_file" | awk 'NF>=5 {print $1, $2, $3}' | sort -u > "$out/builds.txt"
build_one() {
  local cfg=$1 layout=$2 acc=$3 code extras="" flags name x
  local log="$build/build-$cfg-$layout-$acc.log"
  code=${cfg%%+*}
  [[ $cfg == *+* ]] && extras=${cfg#*+}
  name=kaas_wgmma_${acc}_${layout}_${code}
  flags=$("$KAAS" tune --defines "$name" 2>"$log") || { echo "BAD CONFIG $cfg: $(cat "$log")"; return 1; }
  for x in ${extras//+/ }; do
    case $x in
      e0) if [[ $flags == *-DKAAS_EPILOGUE=* ]]; then flags=$(sed 's/-DKAAS_EPILOGUE=[0-9]*/-DKAAS_EPILOGUE=0/' <<<"$flags"); else flags="$flags -DKAAS_EPILOGUE=0"; fi ;;
      rc) flags="$flags -DKAAS_MC_ARRIVE_CTA=0" ;;
      p[1-9]) flags="$flags -DKAAS_PROBE=${x#p}" ;;
      *) echo "BAD CONFIG $cfg: unknown probe option +$x"; return 1 ;;
    esac
    name=${name}_probe_$x
  done
  # One entry name per plan config, so every row of the table names what ran.
  flags=$(sed "s/-DKAAS_ENTRY=[^ ]*/-DKAAS_ENTRY=$name/" <<<"$flags")
  if [[ -n "${DRY_RUN:-}" ]]; then echo "$cfg $layout $acc: $flags"; return 0; fi
  # shellcheck disable=SC2086  # the flags are words
  "$NVCC" -std=c++17 -O3 -gencode arch=compute_90a,code=sm_90a -Xptxas -v $flags \
    -o "$build/probe-$cfg-$layout-$acc" "$here/probe.cu" -lcublas -lcuda \
    > "$log" 2>&1 || { echo "BUILD FAILED $cfg $layout $acc"; return 1; }
}
export -f build_one; export out build here NVCC KAAS DRY_RUN
t0=$(date +%s)
xargs -P "$(nproc)" -L 1 bash -c 'build_one "$@"' _ < "$out/builds.txt"
[[ -n "${DRY_RUN:-}" ]] && exit 0
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
