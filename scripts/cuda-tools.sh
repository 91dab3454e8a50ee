#!/usr/bin/env bash
# Installs the CUDA compile-time tools kaas needs without a GPU — NVRTC, the CUDA
# headers (with CCCL: libcu++, CUB, Thrust), ptxas, and the CUTLASS/CuTe headers that
# CUDA source submissions may include — from NVIDIA's pip wheels at pinned versions
# into .dev/cuda, and prints the environment that points kaas at them.
# Usage: eval "$(scripts/cuda-tools.sh)"
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dest="$root/.dev/cuda"
# The header set a compiled artifact records (submissions.build.header_set): bump it with
# the pins below, so a stored build names the headers it was compiled against.
runtime=12.9.79 nvcc=12.9.86 cccl=12.9.27 cutlass=4.2.0.0
if [ ! -x "$dest/nvidia/cuda_nvcc/bin/ptxas" ] || [ ! -e "$dest/nvidia/cuda_nvrtc/lib/libnvrtc.so.12" ]; then
  python3 -m pip install --quiet --disable-pip-version-check --no-deps --target "$dest" \
    nvidia-cuda-nvrtc-cu12==12.9.86 nvidia-cuda-runtime-cu12==$runtime nvidia-cuda-nvcc-cu12==$nvcc >&2
fi
# Separate targets: pip --target replaces whole top-level folders, and these wheels
# share `nvidia/`.
if [ ! -e "$dest/cccl/nvidia/cuda_cccl/include/cuda/std/cassert" ]; then
  python3 -m pip install --quiet --disable-pip-version-check --no-deps --target "$dest/cccl" nvidia-cuda-cccl-cu12==$cccl >&2
fi
if [ ! -e "$dest/cutlass/cutlass_library/source/include/cute/tensor.hpp" ]; then
  python3 -m pip install --quiet --disable-pip-version-check --no-deps --target "$dest/cutlass" nvidia-cutlass==$cutlass >&2
fi
echo "export KAAS_PTXAS='$dest/nvidia/cuda_nvcc/bin/ptxas'"
# nvcc's include/ holds crt/ (crt/mma.h, behind <mma.h>: WMMA), which the runtime wheel
# lacks. crt/ is a root of its own too: its headers include each other by bare name
# ("mma.hpp"), and kaas compiles with -no-source-include, under which NVRTC does not look
# beside the including header.
echo "export KAAS_CUDA_INCLUDE='$dest/nvidia/cuda_runtime/include:$dest/nvidia/cuda_nvcc/include:$dest/nvidia/cuda_nvcc/include/crt:$dest/cccl/nvidia/cuda_cccl/include'"
echo "export KAAS_CUTLASS_INCLUDE='$dest/cutlass/cutlass_library/source/include'"
echo "export KAAS_HEADER_SET='nvidia-cuda-runtime-cu12==$runtime nvidia-cuda-nvcc-cu12==$nvcc nvidia-cuda-cccl-cu12==$cccl nvidia-cutlass==$cutlass'"
echo "export LD_LIBRARY_PATH='$dest/nvidia/cuda_nvrtc/lib'\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
