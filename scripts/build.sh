#!/usr/bin/env bash
# Configures and builds cutrain into build/ (binaries in build/bin). Extra arguments go to CMake's
# configure step, e.g. scripts/build.sh -DCMAKE_CUDA_ARCHITECTURES=90
#
# Note [A build for the GPU machine]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# A build for a named GPU architecture (-DCMAKE_CUDA_ARCHITECTURES=...)
# is taken for a build that scripts/package-prebuilt.sh packs for another machine, whose CPU may lack this
# one's AVX-512 (SIGILL): its CPU code is built for x86-64-v3, AVX2 and FMA, which every x86-64 server since
# 2015 has (CUTRAIN_CPU_ARCH, kernels/CMakeLists.txt), unless the arguments name a CUTRAIN_CPU_ARCH.
#
#   scripts/build.sh --emulated   the whole program against the emulated GPU (emu/), into
#                                 build-emulated/ (no GPU or CUDA toolkit needed): `--device cuda`
#                                 then trains on an emulated GPU (Note [Emulated build])
#   scripts/build.sh --target T   only target T and what it needs (the quickstart: cutrain, whose
#                                 build also writes cutrun beside it); after --emulated when both
set -euo pipefail
cd "$(dirname "$0")/.."
build=build
options=()
targets=()
if [[ ${1:-} == --emulated ]]; then
  shift
  build=build-emulated
  options=(-DCUTRAIN_EMULATED=ON)
  # Note [One emulated build]
  # ~~~~~~~~~~~~~~~~~~~~~~~~~
  # This script chooses the emulated build's compiler, and every command that builds it comes here
  # (scripts/test-emulated.sh, which scripts/test.sh runs, too), so that they configure it alike: a
  # second command with another compiler would make CMake drop the folder's cache and stop. A new
  # folder gets clang, about twice as quick as GCC here; a folder configured before keeps its
  # compiler.
  clang="$(command -v clang++-14 || command -v clang++ || true)"
  if [[ ! -f $build/CMakeCache.txt && -n $clang && " $* " != *" -DCMAKE_CXX_COMPILER="* ]]; then
    options+=(-DCMAKE_CXX_COMPILER="$clang")
  fi
fi
if [[ ${1:-} == --target ]]; then
  targets=(--target "${2:?build: --target needs the name of a target}")
  shift 2
fi
if [[ " $* " == *" -DCMAKE_CUDA_ARCHITECTURES="* && " $* " != *" -DCUTRAIN_CPU_ARCH="* ]]; then
  options+=(-DCUTRAIN_CPU_ARCH=x86-64-v3)
  echo "build: a build for a named GPU architecture: its CPU code is for x86-64-v3 (Note [A build for the GPU machine])"
fi
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release "${options[@]}" "$@" >"$build-configure.log" 2>&1 || {
  cat "$build-configure.log" >&2
  exit 1
}
# Note [A build that says it is alive]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# On a busy machine one file can take most of a minute (nvcc
# compiling for two architectures), and CMake says nothing until the next one starts: after 20 s
# without a line, a line says the build goes on, so that nobody takes it for stuck.
cmake --build "$build" -j "$(nproc)" ${targets[@]+"${targets[@]}"} 2>&1 | {
  quiet=0
  while true; do
    if IFS= read -r -t 20 line; then
      printf '%s\n' "$line"
      quiet=0
    elif (($? > 128)); then  # 20 s without a line
      quiet=$((quiet + 20))
      echo "build: still compiling ($quiet s since the last line)"
    else
      [ -z "$line" ] || printf '%s\n' "$line"  # a last line without its newline
      break
    fi
  done
}
