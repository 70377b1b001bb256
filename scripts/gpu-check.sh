#!/usr/bin/env bash
# gpu-check.sh: one command for a machine with a GPU that proves the GPU path works, within 8 minutes.
#
#   scripts/gpu-check.sh                     configure and build for this GPU's architecture, then check
#   scripts/gpu-check.sh --prebuilt [DIR]    use a build made elsewhere by scripts/package-prebuilt.sh
#                                            (DIR/bin and DIR/lib; default DIR .gpu)
#   options: --out DIR (default $OUT if set, else ./gpu-check-out), --budget SECONDS (default 470)
#
# The CUDA runtime (libcudart.so.13), cuBLAS, cuDNN and NCCL are found at run time in the CUDA toolkit or in
# Python's nvidia-* packages (CUDA 13's wheels put cudart and cuBLAS in nvidia/cu13/lib, cuDNN and NCCL in
# nvidia/cudnn/lib and nvidia/nccl/lib); the binaries run through small wrappers that put those folders
# (and DIR/lib) on LD_LIBRARY_PATH, so the PyTorch processes of the comparison keep their own libraries.
# Steps, each under `timeout` and all inside the budget: cutrain info; the [gpu] tests; one short epoch of
# training on synthetic data; bench/compare.sh --quick; cutrain bench-step for both stems and precisions.
# A summary table comes LAST.
# --out receives at most 7 files: gpu-check.log (everything), summary.txt, results.json, compare.png,
# curves.png, train.jsonl and compare-runs.tar.gz (the comparison's metrics and logs).
set -euo pipefail

repo="$(cd "$(dirname "$0")/.." && pwd)"
source "$repo/scripts/cli.sh"
usage() { echo "usage: scripts/gpu-check.sh [--prebuilt [DIR]] [--out DIR] [--budget SECONDS]"; header_help; }

prebuilt="" out="${OUT:-gpu-check-out}" budget=470
while (($#)); do
  case "$1" in
    --prebuilt) if (($# >= 2)) && [[ "$2" != -* ]]; then prebuilt="$2"; shift; else prebuilt=".gpu"; fi ;;
    --out) out="$(value_of "$@")"; shift ;;
    --budget) budget="$(value_of "$@")"; shift
              [[ "$budget" =~ ^[1-9][0-9]*$ ]] || bad_usage "--budget needs a number of seconds" ;;
    -h|--help) usage; exit 0 ;;
    *) bad_usage "unknown option '$1'" ;;
  esac
  shift
done
[ -z "$prebuilt" ] || [ -x "$prebuilt/bin/cutrain" ] ||
  die "$prebuilt/bin/cutrain: not found (make it with scripts/package-prebuilt.sh)"

# ---- a GPU, or a one-line reason
command -v nvidia-smi >/dev/null || die "no CUDA device: nvidia-smi not found"
gpu="$(nvidia-smi --query-gpu=name,compute_cap,driver_version --format=csv,noheader 2>&1 | head -n 1)" ||
  die "no CUDA device: nvidia-smi: $gpu"
[[ "$gpu" == *,*,* ]] || die "no CUDA device: nvidia-smi: $gpu"
arch="$(cut -d, -f2 <<<"$gpu" | tr -d ' .')"

mkdir -p "$out"
out="$(cd "$out" && pwd)"
work="$(mktemp -d "${TMPDIR:-/tmp}/gpu-check.XXXXXX")"
trap 'rm -rf "$work"' EXIT  # what is worth keeping is copied to --out
log="$out/gpu-check.log"
: >"$log"
say() { echo "$*" | tee -a "$log"; }
say "gpu-check: $gpu; work folder $work"

# ---- step NAME LIMIT CMD...: runs CMD under timeout within the budget; one summary row per step
row() { printf '%-26s %-8s %5s  %s' "$@"; }  # step, status, time, result
rows=() failed=0
step_out=""
step() {
  local name="$1" limit="$2"; shift 2
  local start=$SECONDS status=0 left=$((budget - SECONDS - 15))
  if ((left < 10)); then
    rows+=("$(row "$name" SKIPPED - "out of time")"); failed=$((failed + 1)); return 1
  fi
  ((limit <= left)) || limit=$left
  say "== $name (limit $limit s): $*"
  step_out="$work/step.log"
  timeout --kill-after=10 "$limit" "$@" >"$step_out" 2>&1 || status=$?
  cat "$step_out" >>"$log"
  local verdict=ok result no_gpu
  no_gpu="$(grep -c '^SKIPPED: no CUDA device' "$step_out")" || true
  if ((status == 0 && no_gpu > 0)); then  # [gpu] tests that found no GPU prove nothing
    status=1 verdict=SKIPPED
    result="$no_gpu test(s) $(grep -m1 '^SKIPPED: ' "$step_out" | cut -c1-90)"
  elif ((status == 0)); then
    result="$(result_of "$name")"
  else
    verdict=FAILED
    ((status != 124)) || verdict=TIMEOUT
    result="exit $status: $(grep -v '^\s*$' "$step_out" | tail -n 1 | cut -c1-90)"
  fi
  ((status == 0)) || failed=$((failed + 1))
  rows+=("$(row "$name" "$verdict" "$((SECONDS - start))s" "$result")")
  say "${rows[-1]}"
  ((status == 0))
}

# result_of NAME: the figure worth a row in the summary, from the step's output.
result_of() {
  case "$1" in
    build) echo "sm_$arch" ;;
    "cutrain info") grep -m1 '^cuda:0' "$step_out" || tail -n 1 "$step_out" ;;
    "[gpu] tests")  # Catch2's count, then the tests skipped for a reason other than no GPU (2 GPUs wanted)
      { grep 'test cases' "$step_out" | tail -n 1; sed -n 's/^SKIPPED: /; &/p' "$step_out"; } | tr -d '\n' ;;
    train*) grep -v '^\s*$' "$step_out" | tail -n 1 | cut -c1-100 ;;
    bench-step*) grep -iE 'images/s' "$step_out" | tail -n 1 | cut -c1-100 ;;
    compare*) echo "table below" ;;
  esac
}

# ---- run-time libraries: DIR/lib, the toolkit, the driver, every nvidia/*/lib of Python's packages
libs=()
[ -n "$prebuilt" ] && libs+=("$(cd "$prebuilt" && pwd)/lib")
for d in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/targets/x86_64-linux/lib /usr/local/nvidia/lib64; do
  [ -d "$d" ] && libs+=("$d")
done
while read -r d; do [ -n "$d" ] && libs+=("$d"); done < <(python3 -c '
import glob, os, nvidia
for root in nvidia.__path__:
    print("\n".join(sorted(glob.glob(os.path.join(root, "*", "lib")))))' 2>/dev/null || true)
libpath="$(IFS=:; echo "${libs[*]}")"
say "gpu-check: run-time library path: $libpath"

# ---- the binaries: prebuilt, or built here for this GPU's architecture
if [ -n "$prebuilt" ]; then
  real_bin="$(cd "$prebuilt/bin" && pwd)"
else
  command -v cmake >/dev/null || die "cmake not found; build elsewhere and pass --prebuilt DIR"
  step build 300 bash -o pipefail -c "cd '$repo' && cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_CUDA_ARCHITECTURES=$arch >/dev/null && cmake --build build-gpu -j \$(nproc) 2>&1 | tail -n 30" ||
    die "build failed (see $log); where the dependencies are missing, use --prebuilt DIR"
  real_bin="$repo/build-gpu/bin"
fi
missing="$(LD_LIBRARY_PATH="$libpath" ldd "$real_bin/cutrain" | awk '/not found/ { print $1 }' | tr '\n' ' ')"
[ -z "$missing" ] || die "$real_bin/cutrain: libraries not found: $missing(searched $libpath and the system)"

# Wrappers: the binaries with the library path; cutrun is a script and passes it on to its ranks.
bin="$work/bin"
mkdir -p "$bin"
for f in "$real_bin"/*; do
  [ -f "$f" ] && [ -x "$f" ] || continue
  printf '#!/bin/sh\nLD_LIBRARY_PATH="%s${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" exec "%s" "$@"\n' "$libpath" "$f" \
    >"$bin/$(basename "$f")"
  chmod +x "$bin/$(basename "$f")"
done

# ---- the checks, most telling first
step "cutrain info" 30 "$bin/cutrain" info || true
step "[gpu] tests" 120 "$bin/cutrain_tests" "[gpu]" || true
step "train 1 epoch synthetic" 90 "$bin/cutrain" train --device cuda --synthetic-train 12800 --synthetic-test 2000 \
  --epochs 1 --max-steps 50 --log-every 10 --metrics "$work/train.jsonl" || true
# compare.sh stops its runs in time to print the table by the end of its --budget, and its step's limit
# leaves it 20 s more: the table must not be cut. bench-step keeps its 80 s.
compare_budget=$((budget - SECONDS - 80))
((compare_budget <= 240)) || compare_budget=240
((compare_budget >= 60)) || compare_budget=60
step "compare --quick" $((compare_budget + 20)) "$repo/bench/compare.sh" --quick --bin "$bin" \
  --out "$work/compare" --budget "$compare_budget" || true
for stem in cifar imagenet; do
  for precision in bf16 fp32; do
    step "bench-step $stem $precision" 30 "$bin/cutrain" bench-step --stem "$stem" --precision "$precision" \
      --batch-size 256 --device cuda || true
  done
done

# ---- what comes back, and the summary, last
for f in "$work/compare/results.json" "$work/compare/compare.png" "$work/train.jsonl"; do
  [ -f "$f" ] && cp "$f" "$out/"
done
if ls "$work"/compare/runs/*.jsonl >/dev/null 2>&1; then
  python3 "$repo/scripts/plot_metrics.py" "$work"/compare/runs/*.jsonl -o "$out/curves.png" >>"$log" 2>&1 || true
  tar -czf "$out/compare-runs.tar.gz" --exclude='*.safetensors' -C "$work/compare" runs parity compare.log \
    table.txt 2>>"$log" || true
fi
{
  echo
  binaries="built for sm_$arch"
  [ -z "$prebuilt" ] || binaries="prebuilt $prebuilt"
  echo "gpu-check summary: $gpu, $binaries, ${SECONDS} s"
  row step status time result; echo
  printf '%s\n' "${rows[@]}"
  if [ -f "$work/compare/table.txt" ]; then echo; cat "$work/compare/table.txt"; fi
} | tee "$out/summary.txt" | tee -a "$log"
((failed == 0)) || { echo "gpu-check.sh: $failed step(s) did not pass; see $log" >&2; exit 1; }
