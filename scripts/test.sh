#!/usr/bin/env bash
# Installs the dependencies, builds, and runs every test. [gpu] tests are skipped, visibly, on a
# machine without a CUDA device; the CUDA kernels' tests also run on the CPU under the emulation
# (scripts/test-emu.sh, [emu]). Extra arguments go to ctest, e.g. scripts/test.sh -L dist
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --with-tests
scripts/build.sh
status=0
ctest --test-dir build --output-on-failure -j "$(nproc)" "$@" || status=$?
scripts/test-emu.sh "$@" || status=$?
exit "$status"
