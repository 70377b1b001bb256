# scripts/gpu-check.sh without a GPU, against stand-ins: nvidia-smi, the prebuilt cutrain and cutrain_tests,
# the Pythons, and bench/compare.sh are small scripts in a copy of the repository, so the whole run takes a second
# or two. Without binaries it says in one line what to do and never runs cmake; below the driver that the build's
# CUDA runtime needs it refuses in one line naming both; it takes the Python that holds nvidia/cu13 and says which;
# with everything there, every step gets its row (a failing, a crashing and a GPU-less [gpu] test too: all in one
# process, then what the crash left in a process each, names with ',' and a leading '-' found, and a row says how
# many ran), the table comes last and names what did not pass, and --out holds at most 8 files.
source "$(dirname "$0")/common.sh"
copy="$scratch/repo"
mkdir -p "$copy/scripts" "$copy/bench" "$scratch/path"
cp "$repo/scripts/gpu-check.sh" "$repo/scripts/cli.sh" "$repo/scripts/plot_metrics.py" "$repo/scripts/python_env.sh" \
  "$repo/scripts/gpu_libraries.sh" "$repo/scripts/plan_choices.sh" "$repo/scripts/setup.sh" "$copy/scripts/"
cp "$repo/bench/speed_targets.py" "$repo/bench/cli.py" "$copy/bench/"
stub() { printf '#!/usr/bin/env bash\n%s\n' "$2" >"$1"; chmod +x "$1"; }
stub "$scratch/path/cmake" "echo ran >>'$scratch/cmake-ran'"
stub "$scratch/path/nvidia-smi" 'echo "NVIDIA H200, 9.0, ${FAKE_DRIVER:-580.65.06}"'
# The Pythons: python3 and python without nvidia/cu13 (a regular package nvidia hides the installed one), and
# conda's with it; no project environment.
real_python="$(command -v python3)"
mkdir -p "$scratch/hide/nvidia" "$scratch/wheels/nvidia/cu13/lib" "$scratch/conda/bin"
touch "$scratch/hide/nvidia/__init__.py"
for py in python3 python; do
  stub "$scratch/path/$py" "PYTHONPATH='$scratch/hide'\${PYTHONPATH:+:\$PYTHONPATH} exec '$real_python' \"\$@\""
done
stub "$scratch/conda/bin/python" "PYTHONPATH='$scratch/wheels'\${PYTHONPATH:+:\$PYTHONPATH} exec '$real_python' \"\$@\""
export PATH="$scratch/path:$PATH" CONDA_PREFIX="$scratch/conda" CUTRAIN_CACHE_DIR="$scratch/cache"
unset PYTHON

# ---- no binaries: one line, status 1, no cmake
one_line_error "no .gpu" 1 bash "$copy/scripts/gpu-check.sh" --out "$scratch/out0"
grep -q "package-prebuilt.sh" "$scratch/stderr" || fail "no .gpu: the line does not say what to do: $(cat "$scratch/stderr")"
[ ! -e "$scratch/cmake-ran" ] || fail "gpu-check.sh ran cmake"

# ---- stand-ins for the prebuilt binaries and the comparison
mkdir -p "$copy/.gpu/bin" "$copy/.gpu/lib"
stub "$copy/.gpu/bin/cutrain" '
# (as the real binary, it names libcudart.so.13)
case "$1" in
  info) echo "cuDNN 9.19.0, cuBLAS 13.1.0, NCCL 2.28.9, CUDA runtime 13.0, driver CUDA 13.0 (as loaded)"
        echo "cuda:0 NVIDIA H200 (sm_90, 139.8 GiB)" ;;
  train) metrics="${@: -1}"
         for s in 10 20 30; do echo "{\"kind\": \"step\", \"global_step\": $s, \"loss\": $((40 - s))e-1}" >>"$metrics"; done
         echo "{\"kind\": \"epoch\", \"epoch\": 2, \"test_acc\": 0.412}" >>"$metrics"
         echo "{\"kind\": \"summary\", \"mean_images_per_s\": 51234.5}" >>"$metrics" ;;
  bench-step)
    if [ "$2" = --matrix ]; then
      echo "  cooperative        2  graph      3.90      3.70      3.90      65641      23.0        -"
      echo "  split              2  graph      3.80      3.70      3.90      67368      23.6        -"
      echo "matrix: fastest split, 2 streams, graph, 3.80 ms/step"; exit 0
    fi
    if [ "$2" = --layers ]; then
      echo "  conv1                    conv 3x3/1    256x32x32x64        0.100     0.200     3774.87     3774.87         -         -    38.2    19.1"
      echo "layers: forward 1.000 ms, backward 2.000 ms, SGD 0.100 ms, 3.100 ms per step layer by layer (batch norm cooperative)"
      echo "batch norm in all (every layer'"'"'s forward and backward): cooperative 0.500 ms, split 0.400 ms, cudnn 0.450 ms"; exit 0
    fi
    if [ "$2" = --plan ]; then echo "cutrain: error: bench-step --plan: the inventory is recorded by the emulated device" >&2; exit 1; fi
    echo "  steps took 3.90 to 4.20 ms (50 timed steps after 10 warm-up; last loss 2.3000)"
    echo "  4.00 ms/step, 64000 images/s (the median step)" ;;
esac'
stub "$copy/.gpu/bin/cutrain_tests" '
case "$1" in
  --list-test-names-only) printf "%s\n" "passes, with a comma [x]" "--leading dash" "fails" "crashes" "no gpu"
                          exit 5 ;;  # as Catch2 does: the number of tests listed
  "[gpu]")  # all in one process, as Catch2 XML reporter writes it: a crash is caught, reported, and raised again
    [ "$2 $3 $4 $5" = "-r xml -d yes" ] || exit 3
    echo "<Catch name=\"cutrain_tests\" filters=\"[gpu]\">"
    echo "    <TestCase name=\"passes, with a comma [x]\" tags=\"[gpu]\" filename=\"/r/tests/x.cpp\" line=\"1\">"
    echo "      <OverallResult success=\"true\" durationInSeconds=\"2.4\">"
    echo "        <StdOut>"
    echo "fp32 against float64: closest call: conv1.weight gradient: error 0.01 of bound 0.1"
    echo "        </StdOut>"
    echo "      </OverallResult>"
    echo "    </TestCase>"
    echo "    <TestCase name=\"--leading dash\" tags=\"[gpu]\" filename=\"/r/tests/x.cpp\" line=\"5\">"
    echo "      <OverallResult success=\"true\" durationInSeconds=\"0.1\"/>"
    echo "    </TestCase>"
    echo "    <TestCase name=\"fails\" tags=\"[gpu]\" filename=\"/r/tests/x.cpp\" line=\"9\">"
    echo "      <Expression success=\"false\" type=\"REQUIRE\" filename=\"/r/tests/x.cpp\" line=\"12\">"
    echo "      </Expression>"
    echo "      <OverallResult success=\"false\" durationInSeconds=\"0.2\"/>"
    echo "    </TestCase>"
    echo "    <TestCase name=\"crashes\" tags=\"[gpu]\" filename=\"/r/tests/x.cpp\" line=\"20\">"
    echo "      <FatalErrorCondition filename=\"/r/tests/x.cpp\" line=\"21\">"
    echo "        SIGSEGV - Segmentation violation signal"
    echo "      </FatalErrorCondition>"
    echo "      <OverallResult success=\"false\"/>"
    echo "    </TestCase>"
    kill -SEGV $$ ;;
  "passes\, with a comma \[x\]") echo "fp32 against float64: closest call: conv1.weight gradient: error 0.01 of bound 0.1"
                                  echo "All tests passed (3 assertions in 1 test case)" ;;
  "*-leading dash") echo "All tests passed (1 assertion in 1 test case)" ;;
  fails) echo "tests/x.cpp:1: FAILED:"; echo "test cases: 1 | 1 failed"; exit 1 ;;
  crashes) kill -SEGV $$ ;;
  "no gpu") echo "SKIPPED: no CUDA device: CUDA driver version is insufficient" ;;
  *) echo "No test cases matched $1"; exit 2 ;;
esac'
stub "$copy/bench/compare.sh" '
while (($#)); do [ "$1" = --out ] && out="$2"; shift; done
mkdir -p "$out/runs" "$out/parity"
echo "config  images/s" >"$out/table.txt"; echo "cutrain-bf16  64000" >>"$out/table.txt"
echo "{\"runs\": {\"torch-eager-bf16-cl\": {\"images_per_s\": 32000, \"ms_per_step\": 8.0},
               \"torch-compile-bf16-cl\": {\"images_per_s\": 60000, \"ms_per_step\": 4.27}}}" >"$out/results.json"
echo "cutrain-bf16 run" >"$out/runs/cutrain-bf16.r1.log"'

# The package's compressed library (scripts/package-prebuilt.sh), which the run unpacks beside it.
echo "a library" | gzip >"$copy/.gpu/lib/libdnnl.so.2.gz"

# ---- a driver older than the build's CUDA runtime needs: one line naming both, before anything runs
FAKE_DRIVER=570.86.15 one_line_error "driver 570" 1 bash "$copy/scripts/gpu-check.sh" --out "$scratch/out-driver"
grep -q "driver 570.86.15 is older than the build needs: libcudart.so.13 needs driver 580 or newer" "$scratch/stderr" ||
  fail "driver 570: $(cat "$scratch/stderr")"
[ ! -e "$scratch/out-driver/summary.txt" ] && [ ! -e "$copy/.gpu/lib/libdnnl.so.2" ] || fail "driver 570: something ran"

# ---- a run with everything there: one row per step, the table last, the failures named
status=0
bash "$copy/scripts/gpu-check.sh" --out "$scratch/out" >"$scratch/stdout" 2>"$scratch/stderr" || status=$?
[ "$status" = 1 ] || fail "exit status $status, expected 1: $(tail -n 5 "$scratch/stderr")"
summary="$scratch/out/summary.txt"
[ -f "$summary" ] || fail "no summary.txt"
expect_row() { grep -qE "$1" "$summary" || fail "no row /$1/ in: $(cat "$summary")"; }
expect_row '^versions +ok .*cuDNN 9\.19\.0, cuBLAS 13\.1\.0, NCCL 2\.28\.9'
expect_row '^preflight: driver +ok .*driver 580\.65\.06, at least the 580 that libcudart\.so\.13 needs'
expect_row "^preflight: python +ok .*$scratch/conda/bin/python, which holds nvidia/cu13 \\(before it, python3: no nvidia/cu13; python: no nvidia/cu13\\)"
expect_row '^\[gpu\] passes, with a comma \[x\] +ok +2s +passed'
expect_row '^\[gpu\] --leading dash +ok '
expect_row '^\[gpu\] fails +FAILED .*failed at tests/x\.cpp:12'
expect_row '^\[gpu\] crashes +SIG11 .*in the one process: SIGSEGV'
expect_row '^\[gpu\] no gpu +SKIPPED .*no CUDA device'
expect_row '^\[gpu\] tests: how many ran +n/a .*5 of 5 ran: 4 in one process \(exit 139\), then 1 in a process each'
expect_row '^train +ok .*loss 3\.000 \(step 10\) -> 1\.000 \(step 30\), test accuracy 41\.2% after 2 epochs; 51234 images/s'
expect_row '^train loss by step: 10: 3\.000, 20: 2\.000, 30: 1\.000'
expect_row '^bench-step bf16 graph +ok .*4\.00 ms/step'
expect_row '^bench-step bf16 graph --cudnn-benchmark +ok .*4\.00 ms/step'
expect_row '^matrix +ok .*fastest split, 2 streams, graph, 3\.80 ms/step'
expect_row '^  split +2 +graph +3\.80'
expect_row '^matrix --fusion on +ok .*fastest split, 2 streams, graph, 3\.80 ms/step'
expect_row '^fusion +ok .*fastest on 3\.80 ms \(split, 2 stream\(s\), graph\), fastest off 3\.80 ms'
expect_row '^  cooperative, 2 stream\(s\), graph: +off +3\.90, on +3\.90: \+0\.0%$'
expect_row '^layers --fusion on +ok .*3\.100 ms per step layer by layer'
expect_row '^plan +n/a .*plan\.txt \(package-prebuilt\.sh writes it from an emulated build\); measured 4\.00 ms/step'
expect_row '^compare --quick +ok '
expect_row '^layers +ok .*3\.100 ms per step layer by layer'
expect_row '^batch norm in all .*split 0\.400 ms'
expect_row '^targets +ok '
# the matrix's 67368 images/s against compare's PyTorch figures
expect_row '^  torch-eager-bf16-cl +8\.00 +32000 +2\.11x +>= 2\.0x +yes$'
expect_row '^  torch-compile-bf16-cl +4\.27 +60000 +1\.12x +>= 1\.3x +no$'
expect_row '^  cutrain: share of the bf16 peak +23\.6% +>= 35% +no$'
for heading in targets matrix matrix-fusion fusion layers layers-fusion; do
  grep -qx "==== $heading" "$scratch/out/tables.txt" || fail "no $heading table in tables.txt: $(cat "$scratch/out/tables.txt")"
done
expect_row 'closest call: conv1\.weight gradient'
# the Python side's versions beside the pins the tests used (scripts/setup.sh --python-pins), whatever is found
expect_row "^python [0-9.]+: torch [^ ]+ \\(tests: $(bash "$repo/scripts/setup.sh" --python-pins | sed -n 's/^torch==//p')\\), torchvision"
expect_row '^cutrain-bf16  64000'
expect_row '^did not pass \(3\): \[gpu\] fails;\[gpu\] crashes;\[gpu\] no gpu$'
[ "$(tail -n 1 "$scratch/stdout")" = "$(tail -n 1 "$summary")" ] || fail "the table is not the last thing printed"
grep -q "3 step(s) did not pass" "$scratch/stderr" || fail "stderr: $(cat "$scratch/stderr")"
files="$(find "$scratch/out" -type f | wc -l)"
((files <= 8)) || fail "$files files in --out (the device machines return 8)"
tar -tzf "$scratch/out/logs.tar.gz" >"$scratch/listing"; grep -q "logs/gpu-tests/all-in-one-process.xml" "$scratch/listing" || fail "no log of the one process: $(cat "$scratch/listing")"
grep -q "logs/runs/cutrain-bf16.r1.log" "$scratch/listing" || fail "no comparison runs in the logs: $(cat "$scratch/listing")"
[ ! -e "$scratch/cmake-ran" ] || fail "gpu-check.sh ran cmake"
[ "$(cat "$copy/.gpu/lib/libdnnl.so.2")" = "a library" ] || fail "lib/libdnnl.so.2.gz not unpacked"

# ---- with the plan package-prebuilt.sh wrote: its prediction beside the measured step
echo "plan: 274 graph nodes, 80 memsets, 3.30 GB moved by custom kernels, 143.2 GFLOP in convolutions, estimated 3.52 ms/step" \
  >"$copy/.gpu/plan.txt"
printf 'plan choice: %s rank(s), %s, %s stream(s): estimated %s ms/step\n' 1 cooperative 2 1.46 1 split 2 1.61 \
  2 cooperative 1 1.47 2 cooperative 2 1.47 >>"$copy/.gpu/plan.txt"
bash "$copy/scripts/gpu-check.sh" --prebuilt "$copy/.gpu" --out "$scratch/out2" >/dev/null 2>&1 || true
grep -qE '^plan +ok +[0-9]+s +predicted 3\.52 ms/step, measured 4\.00 ms/step' "$scratch/out2/summary.txt" ||
  fail "no plan row: $(cat "$scratch/out2/summary.txt")"
# which batch norm and streams win: the plan's choices from plan.txt, and the matrix's rows
for line in '^choices +ok +[0-9]+s +1 rank, graph: fastest split 2$' \
    '^  1 rank\(s\), emulated plan: +fastest cooperative 2 \(cooperative 2 stream\(s\) 1\.46, split 2 stream\(s\) 1\.61\)$' \
    '^  2 rank\(s\), emulated plan: +fastest cooperative 1 and cooperative 2 alike ' \
    '^  1 rank, NVIDIA H200, graph: +fastest split 2 \(split 2 stream\(s\) 3\.80, cooperative 2 stream\(s\) 3\.90\)$' \
    '^  2 ranks, NVIDIA H200: not measured'; do
  grep -qE "$line" "$scratch/out2/summary.txt" || fail "no row /$line/ in: $(cat "$scratch/out2/summary.txt")"
done
echo "ok"
