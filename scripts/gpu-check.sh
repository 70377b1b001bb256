#!/usr/bin/env bash
# gpu-check.sh: on a machine with a GPU, prove the GPU path and record everything, in one go, within 8 minutes.
#
#   scripts/gpu-check.sh [--prebuilt DIR] [--out DIR] [--budget SECONDS]
#   scripts/gpu-check.sh --emulated [--out DIR] [--budget SECONDS] [--tests SPEC]
#
# It runs binaries built elsewhere: a GPU machine lacks what the build needs (Eigen, CLI11, nlohmann-json,
# Gloo, stb, Catch2), so this script never builds. Make them where the build works, for the GPU's
# architecture, and copy the folder over:
#   scripts/build.sh -DCMAKE_CUDA_ARCHITECTURES=90 && scripts/package-prebuilt.sh
# (which writes .gpu/: see it for what the package holds, and how it checks itself).
# --prebuilt DIR: the binaries in DIR/bin, libraries in DIR/lib (default: .gpu beside this script's folder);
# what package-prebuilt.sh compressed (DIR/lib/NAME.gz) is unpacked beside it first.
# --out DIR: where everything goes (default $OUT if set, else ./gpu-check-out). --budget: seconds (default 460).
# --emulated: the rehearsal of the first GPU run on a machine without one: every step below against the
# emulated build (scripts/build.sh --emulated, binaries in build-emulated/bin), on the emulated GPU of
# Note [Emulated build], with configurations small enough for the CPU and no comparison with PyTorch
# (which would need the real device). Every step but the timings means what it means on a GPU.
# --tests SPEC: the Catch2 test spec of the [gpu] step instead of every [gpu] (or [emu]) test (CI's
# rehearsal runs a few, since the emulated build's own tests run them all).
#
# The CUDA runtime, cuBLAS, cuDNN and NCCL are found at run time as one set, all from Python's nvidia-* wheels
# or all from the CUDA toolkit (scripts/gpu_libraries.sh, Note [One set of CUDA libraries]); the binaries run
# through small wrappers that put those folders (and DIR/lib) on LD_LIBRARY_PATH, so the PyTorch processes of
# the comparison keep their own libraries. tests/scripts/test_wheel_libraries.sh rehearses it without a GPU.
#
# Steps, most telling first, each under `timeout` and all within the budget (a step gets at most what is left,
# less 20 s kept for the summary; none when under 10 s). The limits are worst cases, reasoned for an H200
# with a cold start (CUDA context, cuDNN's libraries loaded from disk: about 10 s per process):
#   preflight    before anything runs: the driver (nvidia-smi) against what the build's CUDA runtime needs
#                (libcudart.so.13: 580 or newer), refused in one line below it; the Python that holds the
#                nvidia/cu13 wheels, of $PYTHON, the project's environment, python3, python,
#                $CONDA_PREFIX/bin/python and /opt/conda/bin/python (scripts/gpu_libraries.sh)
#   versions     nvidia-smi, `cutrain info` (versions as loaded), the libraries ldd resolves, torch's,
#                the Python packages' versions beside those the tests used (scripts/setup.sh)           60 s
#   [gpu] NAME   every [gpu] test in one process, then, after a crash or a hang, each one it did not reach
#                in its own (150 s each); the float64 parity step is the slowest (about 20 s of CPU);
#                240 s for them all, and a row says how many ran
#   train        one short training (100 bf16 steps on synthetic data): the loss curve, test accuracy   120 s
#   bench-step   fp32 and bf16, eager and graph, and bf16 graph with --cudnn-benchmark (as PyTorch's side):
#                ms/step at batch 256 (about 60 steps each)                                          60 s each
#   matrix       `bench-step --matrix`: each batch norm x 1 and 2 streams x eager and graph, bf16    240 s
#   matrix --fusion on   the same with the fused units (Note [The fused unit bn-relu-conv]), for the
#                batch norms they apply to (cooperative and split): 8 rows                           160 s
#   fusion       each of those rows against its --fusion off twin, from the two matrices              10 s
#   choices      which batch norm and streams win: the emulated plan's estimates on 1 and 2 ranks
#                (package-prebuilt.sh's plan.txt), beside the matrix's rows                            30 s
#   layers       `bench-step --layers`: each layer's forward and backward alone, and batch norm by
#                shape with each implementation (10 passes after 3 warm-up; about 30 s)             60 s
#   layers --fusion on   the same with the fused units, whose rows are bn1 and conv2 as one       60 s
#   plan         `cutrain bench-step --plan`'s predicted ms/step next to the measured one, when the
#                binary has --plan (until then the row says so)                                        30 s
#   compare      bench/compare.sh --quick: cutrain against PyTorch eager and compiled           what is left
#   targets      bench/speed_targets.py: the matrix's fastest row against compare's PyTorch eager and
#                torch.compile, beside the targets (2.0x, 1.3x, 35% of the bf16 peak)                 10 s
# Nothing stops at a failure; the summary table (step, status, seconds, result) comes last, names every step
# that did not pass, and is rewritten into --out after every step, so even a run cut short leaves it.
# --out receives 8 files (the device machines return at most 8): gpu-check.log (everything), summary.txt,
# tables.txt (the speed tables in full: the matrix, the choices, the best configuration against PyTorch, each layer,
# batch norm by shape; each with --fusion on too, and fusion on against off), logs.tar.gz (each step's and each
# test's own log, the comparison's runs and parity files), train.jsonl, results.json, compare.png and curves.png
# (the last three from the comparison).
set -euo pipefail

repo="$(cd "$(dirname "$0")/.." && pwd)"
source "$repo/scripts/cli.sh"
usage() {
  echo "usage: scripts/gpu-check.sh [--prebuilt DIR | --emulated] [--out DIR] [--budget SECONDS] [--tests SPEC]"
  header_help
}

prebuilt="" out="${OUT:-gpu-check-out}" budget=460 emulated="" tests=""
while (($#)); do
  case "$1" in
    --prebuilt) if (($# >= 2)) && [[ "$2" != -* ]]; then prebuilt="$2"; shift; else prebuilt="$repo/.gpu"; fi ;;
    --out) out="$(value_of "$@")"; shift ;;
    --budget) budget="$(value_of "$@")"; shift
              [[ "$budget" =~ ^[1-9][0-9]*$ ]] || bad_usage "--budget needs a number of seconds" ;;
    --emulated) emulated=1 ;;
    --tests) tests="$(value_of "$@")"; shift ;;
    -h|--help) usage; exit 0 ;;
    *) bad_usage "unknown option '$1'" ;;
  esac
  shift
done
[ -z "$emulated" ] || [ -z "$prebuilt" ] || bad_usage "--emulated runs build-emulated/bin: no --prebuilt with it"

# ---- a GPU first, since a machine without one (the build machine) needs to hear that before anything else
if [ -z "$emulated" ]; then
  command -v nvidia-smi >/dev/null || die "no CUDA device: nvidia-smi not found"
  gpu="$(nvidia-smi --query-gpu=name,compute_cap,driver_version --format=csv,noheader 2>&1 | head -n 1)" ||
    die "no CUDA device: nvidia-smi: $gpu"
  [[ "$gpu" == *,*,* ]] || die "no CUDA device: nvidia-smi: $gpu"
  gpu_name="$(cut -d, -f1 <<<"$gpu" | xargs)" driver="$(cut -d, -f3 <<<"$gpu" | xargs)"
  [[ "$driver" =~ ^[0-9]+ ]] || die "nvidia-smi gives no driver version: '$driver'"
fi

# ---- the binaries: --prebuilt DIR, or .gpu; never a build here
if [ -n "$emulated" ]; then
  [ -x "$repo/build-emulated/bin/cutrain" ] ||
    die "no emulated build in $repo/build-emulated: make it with scripts/build.sh --emulated"
  prebuilt="$repo/build-emulated"
elif [ -z "$prebuilt" ]; then
  [ -x "$repo/.gpu/bin/cutrain" ] ||
    die "no binaries in $repo/.gpu: build them where the build works (scripts/build.sh -DCMAKE_CUDA_ARCHITECTURES=90 && scripts/package-prebuilt.sh), copy .gpu/ here, and run again (or pass --prebuilt DIR)"
  prebuilt="$repo/.gpu"
fi
[ -x "$prebuilt/bin/cutrain" ] || die "$prebuilt/bin/cutrain: not found (make it with scripts/package-prebuilt.sh)"
prebuilt="$(cd "$prebuilt" && pwd)"

# ---- the preflight, before anything runs: a driver new enough for the build's CUDA runtime, and
# the Python whose nvidia-* wheels hold the CUDA libraries (scripts/gpu_libraries.sh); a one-line refusal else.
# A driver runs the CUDA runtime of its own release and older ones: libcudart.so.13 needs release 580 (CUDA
# 13.0's minimum driver), libcudart.so.12 release 525.
cudart="$(grep -aoE -m1 'libcudart\.so\.[0-9]+' "$prebuilt/bin/cutrain" | head -n 1)" || true
case "$cudart" in
  libcudart.so.13) driver_needed=580 ;;
  libcudart.so.12) driver_needed=525 ;;
  *) driver_needed="" ;;
esac
if [ -n "$emulated" ]; then
  gpu="emulated GPU (emu/, on the CPU: the timings below mean nothing), -, -"
  gpu_name="emulated GPU" driver="none"
  preflight_driver="none to check: the emulated device needs no driver and nvidia-smi is not run (on a GPU: the build's libcudart.so.13 needs driver 580 or newer)"
elif [ -z "$driver_needed" ]; then
  preflight_driver="driver $driver; not checked: $prebuilt/bin/cutrain names no CUDA runtime this script knows (${cudart:-none found})"
elif ((${driver%%.*} < driver_needed)); then
  die "driver $driver is older than the build needs: $cudart needs driver $driver_needed or newer"
else
  preflight_driver="driver $driver, at least the $driver_needed that $cudart needs"
fi
source "$repo/scripts/python_env.sh"
source "$repo/scripts/gpu_libraries.sh"
gpu_python
export PYTHON="$python"  # bench/compare.sh's PyTorch side runs the same interpreter

mkdir -p "$out"
out="$(cd "$out" && pwd)"
work="$(mktemp -d "${TMPDIR:-/tmp}/gpu-check.XXXXXX")"
logs="$work/logs"  # every step's own log; packed into --out at the end
mkdir -p "$logs/gpu-tests"
log="$out/gpu-check.log"
: >"$log"
say() { echo "$*" | tee -a "$log"; }
say "gpu-check: $gpu; binaries $prebuilt; work folder $work"

# ---- the summary: one row per step, rewritten after each step and printed at the end, however it ends
row() { printf '%-44.44s %-8s %5s  %s' "$@"; }  # step, status, time, result
rows=() failed=()
notes=()  # lines under the table: the parity tests' closest calls, the versions
write_summary() {
  {
    echo "gpu-check summary: $gpu_name, driver $driver, binaries $prebuilt, ${SECONDS} s of $budget"
    row step status time result; echo
    printf '%s\n' "${rows[@]}"
    if ((${#notes[@]})); then echo; printf '%s\n' "${notes[@]}"; fi
    if [ -f "$work/compare/table.txt" ]; then echo; cat "$work/compare/table.txt"; fi
    if [ -f "$work/targets.txt" ]; then echo; cat "$work/targets.txt"; fi
    if ((${#failed[@]})); then echo; echo "did not pass (${#failed[@]}): $(IFS=';'; echo "${failed[*]}")"; fi
  } >"$out/summary.txt"
  write_tables
}
# tables.txt: the speed tables of the matrix, targets and layers steps, each under its heading, as far as
# they have run.
write_tables() {
  local name
  for name in targets matrix matrix-fusion fusion choices layers layers-fusion; do
    [ -f "$work/$name.txt" ] || continue
    printf '==== %s\n' "$name"
    cat "$work/$name.txt"
    echo
  done >"$out/tables.txt"
}
finish() {
  local status=$?
  trap - EXIT
  if [ -d "$work" ]; then
    for f in "$work/compare/results.json" "$work/compare/compare.png" "$work/train.jsonl"; do
      [ -f "$f" ] && cp "$f" "$out/"
    done
    if ls "$work"/compare/runs/*.jsonl >/dev/null 2>&1; then
      python3 "$repo/scripts/plot_metrics.py" "$work"/compare/runs/*.jsonl -o "$out/curves.png" >>"$log" 2>&1 || true
    fi
    [ -d "$work/compare" ] && (cd "$work/compare" && cp -r runs parity compare.log table.txt "$logs/" 2>/dev/null || true)
    tar -czf "$out/logs.tar.gz" --exclude='*.safetensors' -C "$work" logs 2>>"$log" || true
    write_summary
    echo | tee -a "$log"
    tee -a "$log" <"$out/summary.txt"
    rm -rf "$work"
  fi
  ((${#failed[@]} == 0)) || echo "gpu-check.sh: ${#failed[@]} step(s) did not pass; see $out/summary.txt and $log" >&2
  ((status != 0 || ${#failed[@]} == 0)) || status=1
  exit "$status"
}
trap finish EXIT
trap 'exit 130' INT TERM

# ---- step NAME LIMIT CMD...: CMD under timeout within the budget, its output in its own log; one row
step_out=""
step() {
  local name="$1" limit="$2"; shift 2
  local start=$SECONDS status=0 left=$((budget - SECONDS - 20))
  step_out="$logs/$(file_name "$name").log"
  [ "$name" = "${name#\[gpu\] }" ] || step_out="$logs/gpu-tests/$(file_name "${name#\[gpu\] }").log"
  if ((left < 10)); then
    record "$name" SKIPPED - "out of time"; return 1
  fi
  ((limit <= left)) || limit=$left
  echo "== $name (limit $limit s): $*" >>"$log"
  timeout --kill-after=10 "$limit" "$@" >"$step_out" 2>&1 || status=$?
  cat "$step_out" >>"$log"
  local verdict=ok result no_gpu
  no_gpu="$(grep -c '^SKIPPED: no CUDA device' "$step_out")" || true
  if ((status == 0 && no_gpu > 0)); then  # a [gpu] test that found no GPU proves nothing
    status=1 verdict=SKIPPED result="$(grep -m1 '^SKIPPED: ' "$step_out" | cut -c1-90)"
  elif ((status == 0)); then
    result="$(result_of "$name")"
  else
    verdict=FAILED result="exit $status"
    if ((status == 124 || status == 137)); then
      verdict=TIMEOUT result="killed after $limit s"
    elif ((status > 128)); then
      verdict="SIG$((status - 128))" result="crashed (signal $((status - 128)))"  # 139: SIGSEGV
    fi
    result+=": $(grep -v '^\s*$' "$step_out" | grep -v '^===' | tail -n 1 | cut -c1-100)"
  fi
  record "$name" "$verdict" "$((SECONDS - start))s" "$result"
  ((status == 0))
}

file_name() { printf '%s' "$1" | tr -c 'A-Za-z0-9._-' '_' | cut -c1-80; }

# record NAME STATUS TIME RESULT: a row of the summary; any status but ok and n/a counts as not passed.
record() {
  rows+=("$(row "$@")")
  [ "$2" = ok ] || [ "$2" = n/a ] || failed+=("$1")
  echo "${rows[-1]}" | tee -a "$log"
  write_summary
}

# result_of NAME: the figure worth a row in the summary, from the step's output.
result_of() {
  case "$1" in
    versions) grep -m1 "^cuDNN " "$step_out" || head -n 1 "$step_out" ;;  # the libraries as loaded
    "[gpu] "*)  # Catch2's count, and a test skipped for a reason other than no GPU (2 GPUs wanted)
      { grep -E '^(All tests passed|test cases:)' "$step_out" | tail -n 1; sed -n 's/^SKIPPED: /; skipped: /p' "$step_out"; } |
        tr -d '\n' | cut -c1-100 ;;
    train) train_result | tail -n 1 ;;
    bench-step*) grep -E 'ms/step' "$step_out" | tail -n 1 | sed 's/^ *//' | cut -c1-100 ;;
    matrix*) grep -E '^matrix: ' "$step_out" | tail -n 1 | cut -c1-100 ;;
    fusion) grep -E '^fusion: ' "$step_out" | tail -n 1 | sed 's/^fusion: //' | cut -c1-100 ;;
    choices) grep -E '^  1 rank, .*, graph: ' "$step_out" | sed -E 's/^  1 rank, .*, graph: +/1 rank, graph: /; s/ \(.*//' ;;
    layers*) grep -E '^layers: ' "$step_out" | tail -n 1 | sed 's/^layers: //' | cut -c1-100 ;;
    targets) echo "table below" ;;
    plan) plan_result ;;
    compare*) echo "table below" ;;
  esac
}

# ---- the preflight's rows
if [ -n "$emulated" ]; then record "preflight: driver" n/a - "$preflight_driver"
else record "preflight: driver" ok - "$preflight_driver"; fi
record "preflight: python" ok - "$python_choice"

unpack_prebuilt "$prebuilt" || die "$prebuilt: cannot unpack its compressed files"
[ -x "$prebuilt/bin/cutrain_tests" ] || die "$prebuilt/bin/cutrain_tests: not found (make it with scripts/package-prebuilt.sh)"

# ---- run-time libraries: DIR/lib and one set of CUDA libraries, the wheels' or the toolkit's
# (scripts/gpu_libraries.sh, Note [One set of CUDA libraries]), found through the Python that the comparison uses
gpu_library_path "$prebuilt" "$python"
libpath="$library_path"
# The C++ runtime that the build was linked against (package-prebuilt.sh's lib/cxx), only where the machine's own
# is older than the binaries need: it needs a newer glibc than they do.
if [ -d "$prebuilt/lib/cxx" ] &&
   LD_LIBRARY_PATH="$libpath" ldd "$prebuilt/bin/cutrain" 2>&1 | grep -qE "version .(GLIBCXX|CXXABI|GCC)_[0-9.]+. not found|lib(stdc\+\+|gcc_s)\.so.* not found"; then
  libpath="$libpath:$prebuilt/lib/cxx"
  say "gpu-check: the machine's libstdc++ or libgcc_s is older than the binaries need: the package's lib/cxx is on the path"
fi
say "gpu-check: run-time library path ($library_set of $python): $libpath"
missing="$(LD_LIBRARY_PATH="$libpath" ldd "$prebuilt/bin/cutrain" 2>&1 | awk '/not found/ { print $1 }' | tr '\n' ' ')" ||
  true
if [ -n "$missing" ]; then  # nothing can run: the table says why
  record libraries FAILED - "$prebuilt/bin/cutrain needs $missing(not in $libpath or the system)"
  exit 1
fi

# Wrappers: the binaries with the library path; cutrun is a script and passes it on to its ranks.
bin="$work/bin"
mkdir -p "$bin"
for f in "$prebuilt"/bin/*; do
  [ -f "$f" ] && [ -x "$f" ] || continue
  printf '#!/bin/sh\nLD_LIBRARY_PATH="%s${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" exec "%s" "$@"\n' "$libpath" "$f" \
    >"$bin/$(basename "$f")"
  chmod +x "$bin/$(basename "$f")"
done

# ---- versions: the GPU and driver, and every library as the process loads it
versions() {
  "$bin/cutrain" info
  echo "GPU: $gpu (nvidia-smi: name, compute capability, driver)"
  echo "loaded from: $(LD_LIBRARY_PATH="$libpath" ldd "$prebuilt/bin/cutrain" 2>/dev/null |
    awk '$1 ~ /^lib(cudart|cublas|cudnn|nccl)/ { print $1 " " $3 }' | tr '\n' ' ')"
  "$python" -c 'import torch; print(f"torch {torch.__version__}, its CUDA {torch.version.cuda}, its cuDNN {torch.backends.cudnn.version()}")' ||
    echo "torch: not importable"
  python_versions "$python" "$repo/scripts/setup.sh"
}
export bin libpath prebuilt gpu python repo
export -f versions python_versions
if step versions 60 bash -c versions; then
  while IFS= read -r line; do notes+=("$line"); done < <(grep -E '^(loaded from|torch|python)' "$step_out" || true)
fi

# ---- the [gpu] tests: all in one process first, which makes the CUDA context and loads the libraries once (about
# 10 s a process on a cold H200, so that one process a test did not fit their 240 s); the XML reporter's lines
# come as each test ends. Where that process crashes or hangs, the test it was in gets the crash's row, and each
# test it had not reached runs in a process of its own in the time left, so a crash costs one test. A row says
# how many ran, and how.
list="$logs/gpu-tests/list.txt"
tag="[gpu]"
[ -z "$emulated" ] || tag="[emu]"  # tests/gpu.h: the [gpu] tests are [emu] in the emulated build
# suite_results XML: one line per test in Catch2's XML report, "VERDICT<tab>SECONDS<tab>NAME<tab>RESULT":
# VERDICT ok, FAILED, SKIPPED (no CUDA device), FATAL (Catch2 caught a signal) or UNFINISHED (no end: killed).
suite_results() {
  awk '
    function unescape(s) {
      gsub(/&quot;/, "\"", s); gsub(/&apos;/, "\047", s); gsub(/&lt;/, "<", s); gsub(/&gt;/, ">", s); gsub(/&amp;/, "\\&", s)
      return s
    }
    function attr(line, key,   v) {
      if (!match(line, key "=\"[^\"]*\"")) return ""
      v = substr(line, RSTART + length(key) + 2, RLENGTH - length(key) - 3)
      return unescape(v)
    }
    /^ *<TestCase / { name = attr($0, "name"); open = 1; fail_at = ""; fatal = ""; skipped = ""; secs = "-"; success = ""; next }
    !open { next }
    /<Expression success="false"/ && fail_at == "" { fail_at = attr($0, "filename") ":" attr($0, "line"); sub(/.*\/tests\//, "tests/", fail_at) }
    /<FatalErrorCondition/ { getline fatal; gsub(/^ +| +$/, "", fatal) }
    /^ *SKIPPED: / && skipped == "" { skipped = $0; sub(/^ */, "", skipped) }
    /<OverallResult / { success = attr($0, "success"); d = attr($0, "durationInSeconds"); if (d != "") secs = sprintf("%.0fs", d) }
    /^ *<\/TestCase>/ {
      open = 0
      if (fatal != "") print "FATAL\t" secs "\t" name "\t" fatal
      else if (success != "true") print "FAILED\t" secs "\t" name "\t" (fail_at == "" ? "failed" : "failed at " fail_at)
      else if (skipped ~ /^SKIPPED: no CUDA device/) print "SKIPPED\t" secs "\t" name "\t" substr(skipped, 1, 90)
      else if (skipped != "") print "ok\t" secs "\t" name "\tpassed; skipped: " substr(skipped, 10, 80)
      else print "ok\t" secs "\t" name "\tpassed"
    }
    END { if (open) print "UNFINISHED\t-\t" name "\t-" }' "$1"
}
# Catch2 exits with the number of tests it lists: a list is good when the binary ran (no signal)
# and named at least one test.
listed=0
"$bin/cutrain_tests" --list-test-names-only "${tests:-$tag}" >"$list" 2>&1 || listed=$?
if ((listed > 0 && listed < 128)) && [ -s "$list" ]; then
  tests_end=$((SECONDS + 240))
  limit=$((budget - SECONDS - 20))
  ((limit <= 240)) || limit=240
  suite_xml="$logs/gpu-tests/all-in-one-process.xml"
  status=0
  echo "== [gpu] tests in one process (limit $limit s): $bin/cutrain_tests ${tests:-$tag} -r xml -d yes" >>"$log"
  if ((limit >= 10)); then
    timeout --kill-after=10 "$limit" "$bin/cutrain_tests" "${tests:-$tag}" -r xml -d yes >"$suite_xml" 2>&1 || status=$?
  fi
  cat "$suite_xml" >>"$log" 2>/dev/null || true
  declare -A ran=()
  one_process=0
  while IFS=$'\t' read -r verdict secs name result; do
    ran["$name"]=1 one_process=$((one_process + 1))
    case "$verdict" in
      FATAL) verdict="SIG$((status - 128))" result="crashed (signal $((status - 128))), in the one process: $result"
             ((status > 128)) || verdict=FAILED ;;
      UNFINISHED) if ((status == 124 || status == 137)); then verdict=TIMEOUT result="killed after $limit s, in the one process"
                  elif ((status > 128)); then verdict="SIG$((status - 128))" result="crashed (signal $((status - 128))), in the one process"
                  else verdict=FAILED result="the one process ended inside it (exit $status)"; fi ;;
    esac
    record "[gpu] $name" "$verdict" "$secs" "$result"
  done < <(suite_results "$suite_xml")
  # What the one process did not reach: a process each, in what is left of the 240 s.
  own_process=0
  while IFS= read -r name; do
    [ -n "$name" ] && [ -z "${ran[$name]:-}" ] || continue
    # Catch2's test spec: ',' '[' ']' '\' escaped; a leading '-' would read as a flag, so '*' matches it.
    spec="$(sed 's/[][\,]/\\&/g' <<<"$name")"
    [[ "$spec" != -* ]] || spec="*${spec:1}"
    limit=$((tests_end - SECONDS))
    ((limit <= 150)) || limit=150
    if ((limit < 10)); then record "[gpu] $name" SKIPPED - "out of the [gpu] tests' 240 s"; continue; fi
    own_process=$((own_process + 1))
    step "[gpu] $name" "$limit" "$bin/cutrain_tests" "$spec" || true
  done <"$list"
  how="$one_process in one process (exit $status)"
  ((own_process == 0)) || how+=", then $own_process in a process each"
  record "[gpu] tests: how many ran" n/a "$((240 - tests_end + SECONDS))s" \
    "$((one_process + own_process)) of $(grep -c . "$list") ran: $how"
  while IFS= read -r line; do notes+=("$line"); done < <(cat "$suite_xml" "$logs"/gpu-tests/*.log 2>/dev/null |
    grep -E 'closest call' | sed 's/^ *//' | cut -c1-160 || true)
else
  record "[gpu] tests" FAILED - "cutrain_tests --list-test-names-only (exit $listed): $(tail -n 1 "$list" | cut -c1-70)"
fi

# ---- one short training: 2 epochs of 50 bf16 steps (batch 256) on synthetic data, evaluated each epoch
# (emulated: 2 epochs of 8 steps of batch 8, width 8).
# Its row: the first and last logged loss, the test accuracy; the whole loss curve goes under the table.
train_result() {
  python3 - "$work/train.jsonl" <<'PY' 2>&1 | tail -n 2
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
steps = [l for l in lines if l.get("kind") == "step"]
epochs = [l for l in lines if l.get("kind") == "epoch" and l.get("test_acc") is not None]
summary = [l for l in lines if l.get("kind") == "summary"]
print("train loss by step: " + ", ".join(f"{s['global_step']}: {s['loss']:.3f}" for s in steps))
acc = f"test accuracy {100 * epochs[-1]['test_acc']:.1f}% after {epochs[-1]['epoch']} epochs" if epochs else "no test accuracy"
speed = f"; {summary[0]['mean_images_per_s']:.0f} images/s" if summary else ""
print(f"loss {steps[0]['loss']:.3f} (step {steps[0]['global_step']}) -> {steps[-1]['loss']:.3f} "
      f"(step {steps[-1]['global_step']}), {acc}{speed}" if steps else "no step logged")
PY
}
train_size=(--synthetic-train 12800 --synthetic-test 2000 --log-every 10)
[ -z "$emulated" ] || train_size=(--synthetic-train 64 --synthetic-test 32 --batch-size 8 --width 8 --log-every 2)
if step train 120 "$bin/cutrain" train --device cuda "${train_size[@]}" --epochs 2 --metrics "$work/train.jsonl"; then
  notes+=("$(train_result | head -n 1)")
fi

# ---- the step's speed: fp32 and bf16, eager and replayed from a CUDA graph; then bf16 graph again with
# cuDNN's engines timed (--cudnn-benchmark), as the comparison's PyTorch chooses its own
# (torch.backends.cudnn.benchmark = True), so that both sides choose alike; measured afresh, into a cache folder
# of the work folder's (nothing from an earlier run, nothing left in ~/.cache)
bench_size=(--batch-size 256)
[ -z "$emulated" ] || bench_size=(--batch-size 8 --width 8 --steps 2 --warmup 1)
for precision in fp32 bf16; do
  for mode in eager graph; do
    graph_flag=()
    [ "$mode" = eager ] || graph_flag=(--cuda-graph)
    step "bench-step $precision $mode" 60 "$bin/cutrain" bench-step --device cuda --stem cifar --precision "$precision" \
      "${bench_size[@]}" "${graph_flag[@]}" || true
  done
done
measured_bf16="$(sed -nE 's/^ *([0-9.]+) ms\/step.*/\1/p' "$step_out" 2>/dev/null | tail -n 1)" || true  # bf16, graph
step "bench-step bf16 graph --cudnn-benchmark" 60 env CUTRAIN_CACHE_DIR="$work/cache" "$bin/cutrain" bench-step --device cuda --stem cifar --precision bf16 \
  "${bench_size[@]}" --cuda-graph --cudnn-benchmark || true

# keep_table NAME REGEX: the last step's output goes into tables.txt as NAME, and its lines that match REGEX
# under the summary's table.
keep_table() {
  cp "$step_out" "$work/$1.txt"
  while IFS= read -r line; do notes+=("$line"); done < <(grep -E "$2" "$step_out" || true)
  write_tables
}

# ---- the speed choices side by side (bench-step --matrix): each batch-norm implementation on one
# stream and on two, eager and replayed, bf16; fewer steps per row rather than fewer rows. Its table
# goes below the summary's rows.
matrix_size=(--batch-size 256 --steps 20 --warmup 5)
[ -z "$emulated" ] || matrix_size=(--batch-size 4 --width 4 --steps 1 --warmup 1)
if step matrix 240 "$bin/cutrain" bench-step --matrix --device cuda --stem cifar --precision bf16 "${matrix_size[@]}"; then
  keep_table matrix '^(bench-step --matrix|  )'
fi

# ---- the matrix again with --fusion on (Note [The fused unit bn-relu-conv]): each basic block's bn1 and conv2 as
# one unit, for cooperative and split batch norm (under cuDNN's the units run unfused: one line says so). Then
# each fused row against its unfused twin. --fusion stays off by default until these rows say otherwise.
if step "matrix --fusion on" 160 "$bin/cutrain" bench-step --matrix --fusion on --device cuda --stem cifar \
  --precision bf16 "${matrix_size[@]}"; then
  keep_table matrix-fusion '^bench-step --matrix: '
fi
fusion_table() {
  echo "--fusion on against off, bf16 (median ms/step of the two matrices; a positive figure is the time fusion saves):"
  awk '
    FNR == 1 { fused = FILENAME ~ /matrix-fusion\.txt$/ }
    $1 ~ /^(cooperative|split)$/ && $2 ~ /^[12]$/ && $3 ~ /^(eager|graph)$/ {
      key = $1 ", " $2 " stream(s), " $3
      if (fused) { on[key] = $4; if (best_on == "" || $4 < on[best_on]) best_on = key }
      else { off[key] = $4; order[++n] = key; if (best_off == "" || $4 < off[best_off]) best_off = key }
    }
    END {
      for (i = 1; i <= n; ++i) {
        k = order[i]
        if (k in on) printf "  %-34s off %9.2f, on %9.2f: %+.1f%%\n", k ":", off[k], on[k], 100 * (off[k] - on[k]) / off[k]
      }
      if (best_on == "" || best_off == "") { print "fusion: no rows to compare"; exit 1 }
      printf "fusion: fastest on %.2f ms (%s), fastest off %.2f ms (%s)\n", on[best_on], best_on, off[best_off], best_off
    }' "$work/matrix.txt" "$work/matrix-fusion.txt"
}
export -f fusion_table
export work
if [ -f "$work/matrix.txt" ] && [ -f "$work/matrix-fusion.txt" ]; then
  step fusion 10 bash -c fusion_table && keep_table fusion '^(--fusion on against off|  (cooperative|split), )'
else
  record fusion SKIPPED - "no matrix to compare: both matrix steps must pass"
fi

# ---- which batch norm (cooperative or split) and which streams win, on one rank and on two: the emulated plan's
# estimates (scripts/plan_choices.sh says what they cannot tell), beside the matrix's measured rows. bench-step
# times one GPU without a communicator, so two ranks are not measured here. The default stays cooperative on two
# streams until a GPU's rows say otherwise.
choice_row() {  # choice_row LABEL "BATCHNORM STREAMS: MS"...: one line, the fastest first
  local label="$1"; shift
  if (($# == 0)); then printf '  %-34s %s\n' "$label:" "no figures"; return; fi
  printf '  %-34s %s\n' "$label:" "$(printf '%s\n' "$@" | sort -t: -k2 -g | awk -F': ' '
    { text = text (NR > 1 ? ", " : "") $1 " stream(s) " $2; ms[NR] = $2; name[NR] = $1 }
    END { print "fastest " (NR > 1 && ms[1] == ms[2] ? name[1] " and " name[2] " alike" : name[1]) " (" text ")" }')"
}
choices() {
  local plan_lines ranks mode figures
  echo "which batch norm and streams win, bf16 (ms/step; the default stays cooperative, 2 streams):"
  if [ -n "$emulated" ]; then plan_lines="$(plan_choices "$bin/cutrain")"
  else plan_lines="$(grep '^plan choice: ' "$prebuilt/plan.txt" 2>/dev/null || true)"; fi
  for ranks in 1 2; do
    mapfile -t figures < <(sed -nE "s/^plan choice: $ranks rank\(s\), ([a-z]+), ([12]) stream\(s\): estimated ([0-9.]+) ms.*/\1 \2: \3/p" <<<"$plan_lines")
    choice_row "$ranks rank(s), emulated plan" "${figures[@]}"
  done
  echo "    (the plan weighs the batch norms by their bytes, but credits no overlap of two streams, nor the cooperative"
  echo "    kernel's hold on the whole GPU, nor a running all-reduce: the streams are not its to choose; scripts/plan_choices.sh)"
  for mode in eager graph; do
    mapfile -t figures < <(sed -nE "s/^  (cooperative|split) +([12]) +$mode +([0-9.]+) .*/\1 \2: \3/p" "$work/matrix.txt" 2>/dev/null)
    choice_row "1 rank, $gpu_name, $mode" "${figures[@]}"
  done
  echo "  2 ranks, $gpu_name: not measured (bench-step times one GPU, without a communicator)"
}
source "$repo/scripts/plan_choices.sh"
export -f choices choice_row plan_choices
export emulated work gpu_name
# A GPU run reads the package's plan (plan.txt); an emulated one plans its eight steps itself, which on
# a busy machine took more than 30 s.
choices_limit=30
[ -z "$emulated" ] || choices_limit=120
if step choices "$choices_limit" bash -c choices; then
  keep_table choices '^  [12] rank|^which batch norm'
fi

# ---- where the time goes (bench-step --layers): each layer's forward and backward alone, eager on one
# stream, beside its FLOPs; then batch norm by shape with every implementation, from CUDA events around
# each launch. Fewer passes rather than fewer layers; the full tables go to tables.txt.
layers_size=(--batch-size 256 --steps 10 --warmup 3)
[ -z "$emulated" ] || layers_size=(--batch-size 4 --width 4 --steps 1 --warmup 1)
if step layers 60 "$bin/cutrain" bench-step --layers --device cuda --stem cifar --precision bf16 "${layers_size[@]}"; then
  keep_table layers '^(layers: |batch norm in all )'
fi
if step "layers --fusion on" 60 "$bin/cutrain" bench-step --layers --fusion on --device cuda --stem cifar \
  --precision bf16 "${layers_size[@]}"; then
  keep_table layers-fusion '^layers: '
fi

# ---- THE STEP INVENTORY: `cutrain bench-step --plan` predicts ms/step from what one step launches (its last
# line: "plan: N graph nodes, M memsets, X GB moved by custom kernels, Y GFLOP in convolutions, estimated
# Z ms/step"). Its prediction goes next to the measured bf16 graph step above. The plan is recorded by the
# emulated device, so a GPU build cannot make it: package-prebuilt.sh writes it into DIR/plan.txt from the
# emulated build beside the GPU build, and the emulated rehearsal makes it itself.
plan_result() {
  local predicted
  predicted="$(grep -E '^plan: ' "$step_out" | tail -n 1 | sed -E 's/.*estimated ([0-9.]+) ms\/step.*/\1/')"
  echo "predicted ${predicted:-?} ms/step, measured ${measured_bf16:-?} ms/step (bf16, graph, batch 256); $(grep -E '^plan: ' "$step_out" | tail -n 1 | cut -c1-60)"
}
if [ -n "$emulated" ]; then
  step plan 30 "$bin/cutrain" bench-step --plan --stem cifar --precision bf16 --batch-size 256 || true
elif [ -f "$prebuilt/plan.txt" ]; then
  step plan 5 cat "$prebuilt/plan.txt" || true
else
  record plan n/a - "no $prebuilt/plan.txt (package-prebuilt.sh writes it from an emulated build); measured ${measured_bf16:-?} ms/step (bf16, graph)"
fi

# ---- cutrain against PyTorch: whatever time is left (compare.sh stops starting runs in time for its table;
# its step's limit leaves it 20 s more, so the table is never cut; the targets' step has 15 s after that)
compare_budget=$((budget - SECONDS - 55))
((compare_budget <= 240)) || compare_budget=240
if [ -n "$emulated" ]; then
  record "compare --quick" n/a - "emulated: PyTorch's side of the comparison needs the real GPU"
elif ((compare_budget >= 60)); then
  step "compare --quick" $((compare_budget + 20)) "$repo/bench/compare.sh" --quick --bin "$bin" \
    --out "$work/compare" --budget "$compare_budget" || true
else
  record "compare --quick" SKIPPED - "out of time ($compare_budget s left for it)"
fi

# ---- the targets: the matrix's fastest row against PyTorch eager and torch.compile from the comparison
# (bench/speed_targets.py); the emulated rehearsal has no PyTorch side, and its table says so.
if [ -f "$work/matrix.txt" ]; then
  results=()
  [ ! -f "$work/compare/results.json" ] || results=(--results "$work/compare/results.json")
  step targets 10 python3 "$repo/bench/speed_targets.py" "$work/matrix.txt" "${results[@]}" &&
    cp "$step_out" "$work/targets.txt" || true
else
  record targets SKIPPED - "no matrix table to take the fastest row from"
fi
