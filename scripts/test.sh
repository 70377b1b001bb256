#!/usr/bin/env bash
# Installs the dependencies, builds, and runs every test, in four parts; each can also run alone:
#   the release build's tests (CTest; [gpu] tests are skipped, visibly, without a CUDA device)
#   scripts/test-emu.sh          the CUDA kernels' tests on the CPU, under the emulation ([emu])
#   scripts/test-sanitizers.sh   the CPU tests under AddressSanitizer and UBSan, and those of the
#                                loader, reducer and store under ThreadSanitizer
#   scripts/fuzz.sh              each fuzz target for a bounded time
# The sanitizer and fuzz builds start once the release build is done, at low priority: they take
# the CPU that the release tests, which mostly wait on processes and sockets, leave idle.
# Extra arguments go to ctest in the release and emulation parts, e.g. scripts/test.sh -L dist
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --with-tests
scripts/build.sh

log=build/sanitizer-and-fuzz-builds.log
(nice -n 19 scripts/test-sanitizers.sh --build-only && nice -n 19 scripts/fuzz.sh --build-only) >"$log" 2>&1 &
builds=$!

status=0
ctest --test-dir build --output-on-failure -j "$(nproc)" "$@" || status=$?
scripts/test-emu.sh "$@" || status=$?
wait "$builds" || true  # a build that failed there fails again here, in the open
scripts/test-sanitizers.sh || status=$?
scripts/fuzz.sh || status=$?
exit "$status"
