#!/usr/bin/env bash
# Installs the dependencies, builds, and runs every test, in four parts; each can also run alone:
#   the release build's tests (CTest; [gpu] tests are skipped, visibly, without a CUDA device)
#   scripts/test-emulated.sh     the whole GPU program on the emulated GPU: the [gpu] tests as [emu]
#                                (label `emulated`), and the emulated device's and the CUDA kernels'
#                                own tests in three thread orders (label `emu`)
#   scripts/test-sanitizers.sh asan tsan   the CPU tests under AddressSanitizer and UBSan, and those
#                                of the loader, bucketed all-reduces and store under ThreadSanitizer
#                                (its third part, `emu`, the kernels under AddressSanitizer, is not
#                                run here: Note [What the test command leaves out])
#   scripts/fuzz.sh              each fuzz target for a bounded time (15 s here)
# Last comes a summary: each part, passed or FAILED, and its seconds.
# The emulated, sanitizer and fuzz builds start once the release build is done, at low priority:
# they take the CPU that the release tests, which mostly wait on processes and sockets, leave idle.
# Extra arguments go to ctest in the release and emulation parts, e.g. scripts/test.sh -L dist
#
# Note [What the test command leaves out]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# This command must end within 25 minutes on two cores (CI), and every part is CPU-bound. The kernels'
# run under AddressSanitizer on the emulated device (scripts/test-sanitizers.sh emu) needs a third
# emulated build, which took 265 CPU-seconds for 33 seconds of tests: it is left out here, and the
# same tests run unsanitized in the emulated part. Run it after changing kernels/ or emu/; it finds a
# kernel that reads or writes past its buffers, which a GPU would fault on.
set -euo pipefail
cd "$(dirname "$0")/.."
# The CPU kernels' OpenMP threads sleep when idle instead of spinning, here as in every CTest test
# (tests/CMakeLists.txt): tests and builds share the cores (kernels/base/cpu_threads.h).
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-PASSIVE}"

# part NAME COMMAND...: runs one part; a failure fails the whole run but stops nothing. Each part's
# result and time go into the summary printed last.
status=0
summary=()
part() {
  local name=$1 start=$SECONDS result=passed
  shift
  "$@" || { result=FAILED; status=1; }
  summary+=("$(printf '  %-26s %-7s %4d s' "$name" "$result" $((SECONDS - start)))")
}
# The names of the tests that failed, from each build's CTest record written during this run, so
# that they stand in the last lines of the output, which is all that a CI log may show.
started="$(mktemp)"
trap 'rm -f "$started"' EXIT
print_summary() {
  echo "test.sh: $((SECONDS / 60)) min $((SECONDS % 60)) s in all"
  printf '%s\n' "${summary[@]}"
  local failed
  for failed in build*/Testing/Temporary/LastTestsFailed.log; do
    [ "$failed" -nt "$started" ] || continue
    sed "s|^[0-9]*:|  failed in ${failed%%/*}: |" "$failed"
  done
}

part "setup" scripts/setup.sh --with-tests
part "release build" scripts/build.sh
((status == 0)) || { print_summary; exit 1; }

emulated_log=build/emulated-build.log
nice -n 19 scripts/test-emulated.sh --build-only >"$emulated_log" 2>&1 &
emulated_build=$!
log=build/sanitizer-and-fuzz-builds.log
(nice -n 19 scripts/test-sanitizers.sh --build-only asan tsan && nice -n 19 scripts/fuzz.sh --build-only) >"$log" 2>&1 &
builds=$!

part "release tests" ctest --test-dir build --output-on-failure -j "$(nproc)" "$@"
part "emulated build below" wait "$emulated_build"  # a failed one fails again below, in the open
part "GPU program, emulated" scripts/test-emulated.sh "$@"
part "rest of the builds below" wait "$builds"  # a failed one fails again below, in the open
part "sanitizers" scripts/test-sanitizers.sh asan tsan
part "fuzzing, 15 s a target" scripts/fuzz.sh 15
print_summary
exit "$status"
