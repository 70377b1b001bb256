#!/usr/bin/env bash
# Builds cutrain's CUDA kernels and their tests against the CUDA emulation (kernels/emu), with
# AddressSanitizer and the alignment check, into build-emu/, and runs them: the [emu] tests, once
# per thread order. Needs neither a GPU nor the CUDA toolkit; scripts/test.sh runs it after the
# main tests. Extra arguments go to ctest, e.g. scripts/test-emu.sh -R "batch norm"
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p build-emu
cmake -S tests/emu -B build-emu >build-emu/configure.log 2>&1 || { cat build-emu/configure.log >&2; exit 1; }
cmake --build build-emu -j "$(nproc)"
ctest --test-dir build-emu --output-on-failure -j "$(nproc)" "$@"
