#!/usr/bin/env bash
# Installs what cutrain needs to build and run (and with --with-tests, to test), from Debian's
# packages. Idempotent: a second run installs nothing. The CUDA toolkit (with cuDNN, cuBLAS and
# NCCL) must already be present, at /usr/local/cuda or on PATH; it does not come from Debian.
#
#   scripts/setup.sh [--with-tests]
set -euo pipefail
case "${1:-}" in
  "" | --with-tests) ;;
  *) echo "setup: error: unknown argument '$1' (usage: scripts/setup.sh [--with-tests])" >&2; exit 2 ;;
esac

packages=(
  g++ make cmake pkg-config     # the toolchain
  catch2                        # tests (Catch2 v2)
  libstb-dev                    # image decoding and writing
  libgloo-dev                   # CPU collectives
  libeigen3-dev                 # CPU reference matrix products
  libboost-context-dev          # the CUDA emulation's fibers (kernels/emu/block.cpp)
  libcli11-dev                  # command line
  nlohmann-json3-dev            # metrics and checkpoint headers
  python3 python3-numpy         # bench/ scripts and their tests
  python3-matplotlib            # scripts/plot_metrics.py
)

# scripts/test.sh also wants PyTorch on the CPU, for the cross-checks of bench/ against cutrain
# (tests/scripts/test_parity_cpu.sh, test_reference_cpu.sh), and clang with its sanitizer and
# libFuzzer runtime for the fuzz targets (scripts/fuzz.sh); training wants neither.
# The two-node test (tests/scripts/test_two_nodes.sh) makes network namespaces with iproute2's `ip`.
if [ "${1:-}" = "--with-tests" ]; then
  packages+=(python3-torch python3-torchvision clang-14 libclang-rt-14-dev iproute2)
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo_cmd=""
  [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if ! command -v nvcc >/dev/null && [ ! -x /usr/local/cuda/bin/nvcc ]; then
  echo "setup: error: no CUDA toolkit: nvcc is neither on PATH nor at /usr/local/cuda/bin/nvcc" >&2
  exit 1
fi
echo "setup: dependencies present"
