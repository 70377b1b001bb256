#!/usr/bin/env bash
# Installs the dependencies, builds, and runs every test. [gpu] tests are skipped, visibly, on a
# machine without a CUDA device. Extra arguments go to ctest, e.g. scripts/test.sh -L dist
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --with-tests
scripts/build.sh
ctest --test-dir build --output-on-failure -j "$(nproc)" "$@"
