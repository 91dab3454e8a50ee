#!/usr/bin/env bash
# Installs the CUDA compile-time tools kaas needs without a GPU — NVRTC, the CUDA
# headers and ptxas — from NVIDIA's pip wheels into .dev/cuda, and prints the
# environment that points kaas at them. Usage: eval "$(scripts/cuda-tools.sh)"
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dest="$root/.dev/cuda"
if [ ! -x "$dest/nvidia/cuda_nvcc/bin/ptxas" ] || [ ! -e "$dest/nvidia/cuda_nvrtc/lib/libnvrtc.so.12" ]; then
  python3 -m pip install --quiet --disable-pip-version-check --no-deps --target "$dest" \
    nvidia-cuda-nvrtc-cu12==12.9.86 nvidia-cuda-runtime-cu12==12.9.79 nvidia-cuda-nvcc-cu12==12.9.86 >&2
fi
echo "export KAAS_PTXAS='$dest/nvidia/cuda_nvcc/bin/ptxas'"
echo "export KAAS_CUDA_INCLUDE='$dest/nvidia/cuda_runtime/include'"
echo "export LD_LIBRARY_PATH='$dest/nvidia/cuda_nvrtc/lib'\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
