#!/usr/bin/env bash
# Builds the fuzz targets (tests/fuzz: the CIFAR-10 record parser, the safetensors reader, the image
# decoder path, the store's messages) with clang's libFuzzer, AddressSanitizer and UBSan into
# build-fuzz/, and runs each for a bounded time, one per core at a time, starting from its seeds
# (tests/fuzz/corpus/<target>/) and the inputs it once crashed on (tests/fuzz/crashes/<target>/).
# What a fuzzer adds to its corpus stays in build-fuzz/corpus/. scripts/test.sh runs it; alone:
#
#   scripts/fuzz.sh [--build-only] [SECONDS_PER_TARGET] [TARGET...]   (default: 25 s each, every target)
#
# A crash stops with the input that caused it. Fix the code, add a test for the fix, and copy the
# input into tests/fuzz/crashes/<target>/: cutrain_tests replays it from then on (test_fuzz_inputs.cpp).
set -euo pipefail
cd "$(dirname "$0")/.."
build_only=0
if [[ ${1:-} == --build-only ]]; then build_only=1; shift; fi
seconds="${1:-25}"
case "$seconds" in
  '' | *[!0-9]*) echo "fuzz: error: '$seconds' is not a whole number of seconds (usage: scripts/fuzz.sh [SECONDS] [TARGET...])" >&2; exit 2 ;;
esac
shift $(($# > 0 ? 1 : 0))
targets=("$@")
((${#targets[@]})) || targets=(cifar10_records safetensors_file image_file store_messages)

cxx="$(command -v clang++-14 || command -v clang++ || true)"
[ -n "$cxx" ] || { echo "fuzz: error: no clang++ (scripts/setup.sh --with-tests installs it)" >&2; exit 1; }
mkdir -p build-fuzz
cmake -S tests/fuzz -B build-fuzz -DCMAKE_CXX_COMPILER="$cxx" >build-fuzz/configure.log 2>&1 ||
  { cat build-fuzz/configure.log >&2; exit 1; }
cmake --build build-fuzz -j "$(nproc)"
((build_only)) && exit 0

# Runs one target for $seconds (its output in build-fuzz/<target>.log) and says how it went.
fuzz() {
  local target=$1 log=build-fuzz/$1.log dict=()
  [ -f "tests/fuzz/$target.dict" ] && dict=(-dict="tests/fuzz/$target.dict")
  mkdir -p "build-fuzz/corpus/$target" build-fuzz/crashes
  # New inputs go to the first folder; the others are read. A folder that is not there is no input.
  local seeds=("build-fuzz/corpus/$target" "tests/fuzz/corpus/$target")
  [ -d "tests/fuzz/crashes/$target" ] && seeds+=("tests/fuzz/crashes/$target")
  # -timeout: an input that takes seconds is a finding too (a hang); -max_len: two CIFAR records.
  if build-fuzz/fuzz_"$target" -max_total_time="$seconds" -timeout=5 -max_len=8192 "${dict[@]}" \
      -artifact_prefix="build-fuzz/crashes/$target-" "${seeds[@]}" >"$log" 2>&1; then
    echo "fuzz: $target: $(grep -o 'Done [0-9]* runs in [0-9]* second(s)' "$log" | sed 's/Done //'), nothing found"
  else
    echo "fuzz: $target FAILED:" >&2
    grep -E '^(==[0-9]+==ERROR|SUMMARY|.*runtime error|.*Test unit written to)' "$log" >&2 || tail -20 "$log" >&2
    echo "fuzz: the whole output is in $log; fix the code, then copy the input into tests/fuzz/crashes/$target/" >&2
    return 1
  fi
}

# $(nproc) targets at a time; each prints one line when it ends.
status=0
running=0
for target in "${targets[@]}"; do
  [ -x "build-fuzz/fuzz_$target" ] || { echo "fuzz: error: no target '$target'" >&2; exit 2; }
  if ((running == $(nproc))); then
    wait -n || status=1
    running=$((running - 1))
  fi
  fuzz "$target" &
  running=$((running + 1))
done
while ((running)); do
  wait -n || status=1
  running=$((running - 1))
done
exit "$status"
