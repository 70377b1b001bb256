#!/usr/bin/env bash
# Builds the whole program against the emulated GPU (Note [Emulated build] in CMakeLists.txt) into
# build-emulated/, as scripts/build.sh --emulated does (Note [One emulated build]), and runs its
# tests: the program's [gpu] tests, tagged [emu] there (label `emulated`), which train on the
# emulated device, run two ranks over the emulated NCCL and rehearse scripts/gpu-check.sh; and the
# emulated device's own tests with the custom kernels', once per thread order (label `emu`). Needs
# neither a GPU nor the CUDA toolkit; as root it builds with the toolkit hidden (a mount namespace
# with an empty folder over it), which shows that. scripts/test.sh runs it.
#
#   scripts/test-emulated.sh [--build-only] [ctest arguments]     e.g. -L '^emu$', or -R "batch norm"
set -euo pipefail
cd "$(dirname "$0")/.."
build_only=0
if [[ ${1:-} == --build-only ]]; then build_only=1; shift; fi
build=(scripts/build.sh --emulated)

toolkit="$(readlink -f /usr/local/cuda 2>/dev/null || true)"
if [ -n "$toolkit" ] && [ -d "$toolkit" ] && [ "$(id -u)" = 0 ] && unshare -m true 2>/dev/null; then
  echo "test-emulated: building with the CUDA toolkit ($toolkit) hidden"
  unshare -m bash -c 'mount -t tmpfs -o size=1m none "$0" && exec "$@"' "$toolkit" "${build[@]}"
else
  "${build[@]}"
fi
((build_only)) && exit 0
ctest --test-dir build-emulated --output-on-failure -j "$(nproc)" "$@"
