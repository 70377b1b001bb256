#!/usr/bin/env bash
# Configures and builds cutrain into build/ (binaries in build/bin). Extra arguments go to CMake's
# configure step, e.g. scripts/build.sh -DCMAKE_CUDA_ARCHITECTURES=90
#
#   scripts/build.sh --emulated   the whole program against the CUDA emulation, into
#                                 build-emulated/ (no GPU or CUDA toolkit needed): `--device cuda`
#                                 then trains on an emulated GPU (Note [Emulated build])
set -euo pipefail
cd "$(dirname "$0")/.."
build=build
options=()
if [[ ${1:-} == --emulated ]]; then
  shift
  build=build-emulated
  options=(-DCUTRAIN_EMULATED=ON)
fi
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release "${options[@]}" "$@" >"$build-configure.log" 2>&1 || {
  cat "$build-configure.log" >&2
  exit 1
}
cmake --build "$build" -j "$(nproc)"
