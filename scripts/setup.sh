#!/usr/bin/env bash
# Installs what cutrain needs to build and run from Debian's packages, and with --with-tests what
# its tests need too, PyTorch at the GPU machine's versions from PyPI among it. Idempotent: a second
# run installs nothing. The CUDA toolkit (with cuDNN, cuBLAS and NCCL) must already be present, at
# /usr/local/cuda or on PATH; it does not come from Debian.
#
#   scripts/setup.sh [--with-tests]
#   scripts/setup.sh --python-pins     prints the Python packages' pins below, one a line
set -euo pipefail
cd "$(dirname "$0")/.."

# Note [The GPU machine's Python]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# The Python side of the comparison, at the versions of the GPU machine
# where it is measured (Python 3.12 there). This is the one place that names them; gpu-check.sh prints
# them beside those it finds there. torch's wheel from PyPI is its CUDA 13 build and brings the
# nvidia-* wheels that machine has (nvidia-cudnn-cu13, nvidia-nccl-cu13, nvidia-cublas,
# nvidia-cuda-runtime, ...) at the versions torch pins; tests/scripts/test_wheel_libraries.sh resolves
# the packaged binary's libraries against them.
python_pins=(torch==2.11.0 torchvision==0.26.0 safetensors==0.8.0 tensorboard==2.21.0)

case "${1:-}" in
  "" | --with-tests) ;;
  --python-pins) printf '%s\n' "${python_pins[@]}"; exit 0 ;;
  *) echo "setup: error: unknown argument '$1' (usage: scripts/setup.sh [--with-tests | --python-pins])" >&2; exit 2 ;;
esac

packages=(
  g++ make cmake pkg-config     # the toolchain
  catch2                        # tests (Catch2 v2)
  libstb-dev                    # image decoding and writing
  libgloo-dev                   # CPU collectives
  libeigen3-dev                 # the CPU classifier's matrix products
  libdnnl-dev                   # oneDNN: the CPU convolutions
  libboost-context-dev          # the CUDA emulation's fibers (emu/block.cpp)
  libcli11-dev                  # command line
  nlohmann-json3-dev            # metrics and checkpoint headers
  python3 python3-numpy         # bench/ scripts and their tests
  python3-matplotlib            # scripts/plot_metrics.py
)

# scripts/test.sh also wants clang with its sanitizer and libFuzzer runtime for the fuzz targets
# (scripts/fuzz.sh), and Python's venv for the PyTorch environment below; training wants neither.
# The two-node test (tests/scripts/test_two_nodes.sh) makes network namespaces with iproute2's `ip`.
if [ "${1:-}" = "--with-tests" ]; then
  packages+=(python3-venv clang-14 libclang-rt-14-dev iproute2)
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo_cmd=""
  [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  # Another apt (an unattended upgrade, a second terminal) may hold its lock: apt waits for it, up to
  # 10 minutes, and says whose it is, instead of failing at once.
  wait_for_lock=(-o DPkg::Lock::Timeout=600)
  probe="$($sudo_cmd apt-get -o DPkg::Lock::Timeout=0 check 2>&1 || true)"
  if [[ "$probe" == *"Could not get lock"* ]]; then
    echo "setup: another process holds apt's lock; waiting for it (up to 10 minutes)"
  fi
  $sudo_cmd apt-get "${wait_for_lock[@]}" update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get "${wait_for_lock[@]}" install -y -qq --no-install-recommends \
    "${missing[@]}" >/dev/null
fi

if ! command -v nvcc >/dev/null && [ ! -x /usr/local/cuda/bin/nvcc ]; then
  echo "setup: error: no CUDA toolkit: nvcc is neither on PATH nor at /usr/local/cuda/bin/nvcc" >&2
  exit 1
fi

# The tests' PyTorch (Note [The GPU machine's Python]), in the project's environment (scripts/python_env.sh).
# A stamp in it records the pins it was made with: while they match, nothing is installed; when they
# change, it is made again. The wheels are kept in wheels/ beside it, so that a remade environment
# downloads nothing twice (pip's own HTTP cache keeps nothing when the index says not to cache).
# A lock lets the clones and worktrees that share the environment run this at the same time.
if [ "${1:-}" = "--with-tests" ]; then
  source scripts/python_env.sh
  stamp="$cutrain_venv/cutrain-pins.txt"
  wheels="$(dirname "$cutrain_venv")/wheels"
  mkdir -p "$wheels"
  exec 9>"$wheels/.lock"
  flock 9
  if [ "$(cat "$stamp" 2>/dev/null)" != "$(printf '%s\n' "${python_pins[@]}")" ]; then
    echo "setup: installing ${python_pins[*]} into $cutrain_venv"
    rm -rf "$cutrain_venv"
    /usr/bin/python3 -m venv "$cutrain_venv"
    pip=("$cutrain_venv/bin/python" -m pip --quiet)
    "${pip[@]}" download --dest "$wheels" "${python_pins[@]}"
    "${pip[@]}" install --no-index --find-links "$wheels" "${python_pins[@]}"
    printf '%s\n' "${python_pins[@]}" >"$stamp"
  fi
  exec 9>&-
fi
echo "setup: dependencies present"
