#!/usr/bin/env bash
# Builds cutrain's CPU code with sanitizers and runs tests under them; any report fails the run.
#   asan  build-asan/: AddressSanitizer (leaks included) and UndefinedBehaviorSanitizer, every test
#         but the [gpu] ones and the long trainings below, which the release build runs already;
#   tsan  build-tsan/: ThreadSanitizer, the tests of the loader, the bucketed all-reduces and the store.
# Every process that has a report (a cutrain a test starts, a rank under cutrun) writes it to
# build-*/sanitizer-reports/, which are printed at the end.
#   emu   build-emulated-asan/: the emulated build (Note [Emulated build]) with AddressSanitizer and
#         UBSan's alignment check, the emulated device's tests and the CUDA kernels' (label `emu`):
#         where a GPU faults on an access out of bounds or misaligned, the kernel stops there.
# scripts/test.sh runs asan and tsan (Note [What the test command leaves out] in scripts/test.sh); alone:
#
#   scripts/test-sanitizers.sh [--build-only] [asan] [tsan] [emu]   (default: all; ctest arguments in CTEST_ARGS)
set -euo pipefail
cd "$(dirname "$0")/.."
build_only=0
if [[ ${1:-} == --build-only ]]; then build_only=1; shift; fi
parts=("$@")
((${#parts[@]})) || parts=(asan tsan emu)
clang="$(command -v clang++-14 || command -v clang++ || true)"
[ -n "$clang" ] || { echo "test-sanitizers: error: no clang++ (scripts/setup.sh --with-tests installs it)" >&2; exit 1; }

# Under ASan at -O0 these take from 10 s to over 10 minutes each (trainings, the float64 and bf16
# step bounds, the evaluator's runs, the largest convolutions), and run the same CPU code as the short tests: the release
# build runs them (and the bench/ script tests, which sanitized builds leave out).
long_trainings='^(training learns|sync-bn: 2 and 3 ranks|images/s and training time|synthetic: a linear model|'
long_trainings+='an absurd learning rate|The fp32 step on the CPU|The bf16 model of the step|The bounds fail a step|'
long_trainings+='SIGTERM: the step finishes|two processes through cutrun train together|eval prints the accuracy|'
long_trainings+='evaluator: --tta flip|metrics that cannot be written|a resumed run continues exactly|'
long_trainings+='ResNet-18 has torchvision.s parameter counts|conv2d CPU splits a large batch|'
long_trainings+='a new run in a folder that holds|SIGHUP to cutrun stops the job|a read-only --save is refused|'
long_trainings+='a finished run resumed with the same|a torn last metrics record|cutrun --max-restarts survives|'
long_trainings+='a run with --save-every-steps also saves|step lines come after the first step|'
long_trainings+='without --device, a machine with no GPU warns|SIGINT to cutrun during a step longer|'
long_trainings+='a rank blocked writing to a full pipe|train --threads 1 and --threads 3|'
long_trainings+='torchrun --max-restarts 1: after|the average of --model-ema|SIGTERM to one rank alone|'
long_trainings+='a resume keeps the run.s recipe|eval takes checkpoint-best|'
long_trainings+='ResNet-18.s block with (a downsample|an identity shortcut) matches finite differences|'
long_trainings+='ranks that would resume from different checkpoints|a checkpoint says what made it|'
long_trainings+='metrics begin with the run|with --clip-grad-norm, 2 ranks take one process|'
long_trainings+='a resume keeps the step schedule|a resume keeps --clip-grad-norm|'
long_trainings+='train --normalize-mean and --normalize-std)'

# build FOLDER SANITIZERS OPTIMIZATION [CMAKE OPTIONS]: configures and builds the targets of the
# array `targets` (and what they run) with them. Built for speed: clang (twice as quick as GCC here,
# and a second compiler's view of the code) and line numbers only.
targets=()
build() {
  local folder=$1 sanitizers=$2 optimization=$3
  shift 3
  mkdir -p "$folder"
  cmake -S . -B "$folder" -DCUTRAIN_SANITIZE="$sanitizers" -DCMAKE_CXX_COMPILER="$clang" \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="$optimization -gline-tables-only" \
    -DCMAKE_CUDA_FLAGS_RELWITHDEBINFO="-O1" "$@" >"$folder/configure.log" 2>&1 ||
    { cat "$folder/configure.log" >&2; return 1; }
  cmake --build "$folder" -j "$(nproc)" --target "${targets[@]}"
}

# check FOLDER CTEST_ARGS...: runs the tests (through the command in the array run_with, if any);
# fails on a failed test or on any sanitizer report.
run_with=()
check() {
  ((build_only)) && return 0
  local folder=$1 status=0
  shift
  local reports="$PWD/$folder/sanitizer-reports"
  rm -rf "$reports"
  mkdir -p "$reports"
  ASAN_OPTIONS="log_path=$reports/asan" UBSAN_OPTIONS="log_path=$reports/ubsan:print_stacktrace=1" \
    TSAN_OPTIONS="log_path=$reports/tsan" \
    "${run_with[@]}" ctest --test-dir "$folder" --output-on-failure -j "$(nproc)" "$@" ${CTEST_ARGS:-} || status=1
  if compgen -G "$reports/*" >/dev/null; then
    echo "test-sanitizers: $folder: sanitizer reports:" >&2
    for report in "$reports"/*; do
      echo "--- $report" >&2
      cat "$report" >&2
    done
    status=1
  fi
  return "$status"
}

status=0
for part in "${parts[@]}"; do
  case "$part" in
    asan) run_with=() targets=(cutrain_tests) && build build-asan address,undefined -O0 &&
            check build-asan -E "$long_trainings" || status=1 ;;
    # setarch -R: clang 14's ThreadSanitizer cannot place its shadow memory when the kernel
    # randomizes addresses with more bits than it expects; without randomization it always can.
    tsan) run_with=(setarch "$(uname -m)" -R) targets=(cutrain_tests) && build build-tsan thread -O1 &&
            check build-tsan || status=1 ;;
    emu) run_with=() targets=(cutrain_emu_tests cutrain_emu_nccl_tests) &&
           build build-emulated-asan address,alignment -O1 -DCUTRAIN_EMULATED=ON && check build-emulated-asan -L '^emu$' ||
           status=1 ;;
    *) echo "test-sanitizers: error: unknown part '$part' (usage: scripts/test-sanitizers.sh [asan] [tsan] [emu])" >&2
       exit 2 ;;
  esac
done
exit "$status"
