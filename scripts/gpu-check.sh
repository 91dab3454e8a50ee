#!/usr/bin/env bash
# GPU check: build the GPU test binary here, stage it for the device machine, and run it
# there.
#
#   scripts/gpu-check.sh [stage]   (here) build `cargo test --release --test gpu`, copy the
#                                  test binary, the `kaas` binary (the sandbox the tests
#                                  spawn) and this script to <checkout>/.dev/gpu/ and
#                                  print the command for the device tool
#   .dev/gpu/gpu-check.sh remote [FILTER...]
#                                  (on the device) find the CUDA libraries, run the tests
#                                  (only those matching a FILTER, if given) with
#                                  KAAS_SANDBOX_EXE pointing at the staged `kaas`, log to
#                                  $OUT/gpu.log
#   scripts/gpu-check.sh stage-baselines   (here) build the release `kaas` and stage it with
#                                  this script in <checkout>/.dev/bl/
#   .dev/bl/gpu-check.sh baselines ARGS…   (on the device) find the CUDA libraries and run
#                                  `kaas baselines ARGS…`
#
# Environment (stage): KAAS_STAGE_ROOT, the checkout the device tool sends (default: the
# repository's main worktree); CARGO_TARGET_DIR as usual.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
mode="${1:-stage}"

stage() {
    local repo root bin kaas built
    repo="$(cd "$here/.." && pwd)"
    # The device tool sends the main checkout, not a linked worktree: stage there.
    root="${KAAS_STAGE_ROOT:-$(git -C "$repo" worktree list --porcelain | awk '/^worktree /{print $2; exit}')}"
    root="${root:-$repo}"
    cd "$repo"
    # The binaries' paths come from cargo's own report of what it built: the test binary
    # `gpu` and the `kaas` binary cargo builds for integration tests.
    built="$(cargo test --release --no-run --test gpu --message-format=json 2>/dev/null \
        | python3 -c 'import json,sys
for line in sys.stdin:
    try: m = json.loads(line)
    except ValueError: continue
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] in ("gpu", "kaas"):
        print(m["target"]["name"], m["executable"])')"
    bin="$(awk '$1 == "gpu" {print $2}' <<<"$built" | tail -n 1)"
    kaas="$(awk '$1 == "kaas" {print $2}' <<<"$built" | tail -n 1)"
    if [[ -z "$bin" || ! -x "$bin" || -z "$kaas" || ! -x "$kaas" ]]; then
        echo "gpu-check: cargo did not report the gpu test binary and the kaas binary; run: cargo test --release --no-run --test gpu" >&2
        exit 1
    fi
    mkdir -p "$root/.dev/gpu"
    cp "$bin" "$root/.dev/gpu/gpu-tests"
    cp "$kaas" "$root/.dev/gpu/kaas"
    cp "$here/gpu-check.sh" "$root/.dev/gpu/gpu-check.sh"
    chmod +x "$root/.dev/gpu/gpu-tests" "$root/.dev/gpu/kaas" "$root/.dev/gpu/gpu-check.sh"
    du -sh "$root/.dev/gpu"
    cat <<CMD
Staged in $root/.dev/gpu. Device tool: run(kind="nvidia-h100-x1", carry=[".dev/gpu"], command=
  bash .dev/gpu/gpu-check.sh remote
)
CMD
}

# The release `kaas` binary, for `kaas baselines` on the device.
stage_baselines() {
    local repo root
    repo="$(cd "$here/.." && pwd)"
    root="${KAAS_STAGE_ROOT:-$(git -C "$repo" worktree list --porcelain | awk '/^worktree /{print $2; exit}')}"
    root="${root:-$repo}"
    cd "$repo"
    cargo build --release --bin kaas
    mkdir -p "$root/.dev/bl"
    cp "${CARGO_TARGET_DIR:-$repo/target}/release/kaas" "$root/.dev/bl/kaas"
    cp "$here/gpu-check.sh" "$root/.dev/bl/gpu-check.sh"
    chmod +x "$root/.dev/bl/kaas" "$root/.dev/bl/gpu-check.sh"
    du -sh "$root/.dev/bl"
    cat <<CMD
Staged in $root/.dev/bl. Device tool: run(kind="nvidia-h100-x1", carry=[".dev/bl"], command=
  bash .dev/bl/gpu-check.sh baselines --grid --total-budget-s 480 --out \$OUT/bl
)
CMD
}

# Links the newest file matching $2 (e.g. libcublas.so.*) found under the search folders
# as $1 (e.g. libcublas.so) in $libdir, and adds its folder to the search path: cudarc
# opens the unversioned names (or .so.12), and CUDA 13 ships .so.13.
link_lib() {
    local name="$1" pattern="$2" found=""
    for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib /usr/lib/x86_64-linux-gnu \
        $(python3 -c 'import site,sys; print(" ".join(site.getsitepackages()))' 2>/dev/null || true); do
        [[ -d "$d" ]] || continue
        found="$(find -L "$d" -maxdepth 4 -name "$pattern" -type f 2>/dev/null | sort -V | tail -n 1)"
        [[ -n "$found" ]] && break
    done
    if [[ -n "$found" ]]; then
        ln -sf "$found" "$libdir/$name"
        extra="${extra}:$(dirname "$found")"
        echo "gpu-check: $name -> $found"
    else
        echo "gpu-check: no $pattern found" >&2
    fi
}

# Makes the CUDA 13 libraries findable under the names cudarc opens.
setup_libs() {
    libdir="$(mktemp -d)"
    extra=""
    link_lib libcublas.so 'libcublas.so.*[0-9]'
    link_lib libcublasLt.so 'libcublasLt.so.*[0-9]'
    link_lib libnvrtc.so 'libnvrtc.so.*[0-9]'
    export LD_LIBRARY_PATH="$libdir${extra}:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}:/usr/local/nvidia/lib64"
}

# `kaas baselines ARGS…` with the libraries found; device state before and after.
baselines() {
    setup_libs
    nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv 2>&1 || true
    local rc=0
    "$(staged_kaas)" baselines "$@" || rc=$?
    nvidia-smi --query-gpu=clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv 2>&1 || true
    return $rc
}

# The staged `kaas`: plain (.dev/gpu, .dev/bl, or one copied into .dev/run by hand), else
# device-run.sh's stage's kaas.xz (or an older stage's kaas.gz), unpacked afresh.
staged_kaas() {
    if [[ -x "$here/kaas" ]]; then echo "$here/kaas"; return; fi
    # Unpacked beside and renamed into place: suites running side by side (device-run.sh's
    # KAAS_SUITE_JOBS) each unpack it, and one must not overwrite the binary another runs.
    local tmp
    mkdir -p /tmp/kaas-staged && tmp="$(mktemp /tmp/kaas-staged/kaas.XXXXXX)"
    if [[ -e "$here/kaas.xz" ]]; then xz -dc "$here/kaas.xz"; else gunzip -c "$here/kaas.gz"; fi >"$tmp" \
        && chmod +x "$tmp" && mv -f "$tmp" /tmp/kaas-staged/kaas
    echo /tmp/kaas-staged/kaas
}

# Any `kaas ARGS…` command (e.g. `kaas run --ptx … --manifest … --bench`) with the
# libraries found.
kaas_cmd() {
    setup_libs
    "$(staged_kaas)" "$@"
}

remote() {
    local out="${OUT:-/tmp/kaas-gpu-out}"
    mkdir -p "$out"
    setup_libs
    {
        echo "== $(date -u +%Y-%m-%dT%H:%M:%SZ) $(uname -srm)"
        nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv 2>&1 || true
        echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
        ldconfig -p 2>/dev/null | grep -E 'libcuda\.so|libcublas|libnvrtc\.so' || true
    } | tee "$out/env.txt"
    # The shipped catalog of the checkout this runs in (.dev/gpu sits two levels down).
    export KAAS_SHIPPED_CATALOG="${KAAS_SHIPPED_CATALOG:-$(cd "$here/../.." && pwd)/kernels}"
    local rc=0
    # The hostile-kernel tests spawn the staged `kaas sandbox`.
    KAAS_SANDBOX_EXE="$(staged_kaas)"
    export KAAS_SANDBOX_EXE
    # On the GPU machine a test that would skip (no GPU, no NVRTC) fails instead.
    export KAAS_REQUIRE_GPU="${KAAS_REQUIRE_GPU-1}"
    "$here/gpu-tests" --nocapture --test-threads=1 "$@" 2>&1 | tee "$out/gpu.log" || rc=$?
    nvidia-smi --query-gpu=clocks.sm,temperature.gpu,power.draw --format=csv 2>&1 | tee -a "$out/env.txt" || true
    echo "== summary"
    grep -E '^(CHECK|TIMING|HOSTILE)' "$out/gpu.log" | grep -E 'FAIL|ERROR|TIMING|HOSTILE' || true
    grep -E '^test result|FAILED|panicked' "$out/gpu.log" || true
    return $rc
}

case "$mode" in
    stage) stage ;;
    remote) shift; remote "$@" ;;
    stage-baselines) stage_baselines ;;
    baselines) shift; baselines "$@" ;;
    kaas) shift; kaas_cmd "$@" ;;
    *) echo "usage: $0 [stage|remote [FILTER...]|stage-baselines|baselines ARGS…|kaas ARGS…]" >&2; exit 2 ;;
esac
