#!/usr/bin/env bash
# Configures and builds cutrain into build/ (binaries in build/bin). Extra arguments go to CMake's
# configure step, e.g. scripts/build.sh -DCMAKE_CUDA_ARCHITECTURES=90
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release "$@" >build-configure.log 2>&1 || { cat build-configure.log >&2; exit 1; }
cmake --build build -j "$(nproc)"
