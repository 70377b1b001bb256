#!/usr/bin/env bash
# The soak of cutrun --max-restarts on two nodes (issue 23): TRIALS jobs (default 10), each on two
# network namespaces with one rank per node, each with 3 SIGKILLs of a random rank at random moments,
# and every job's final model and optimizer compared with a run without faults, byte for byte. It is
# tests/scripts/test_two_node_restarts.sh (CI runs one job), many times; it needs root and iproute2.
# Prints the faults injected, the restarts and how many results were identical.
#   scripts/soak-restarts.sh [TRIALS] [BIN_DIR]   # BIN_DIR: build/bin
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
exec bash "$repo/tests/scripts/test_two_node_restarts.sh" "$repo" "${2:-$repo/build/bin}" "${1:-10}"
