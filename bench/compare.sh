#!/usr/bin/env bash
# compare.sh: cutrain against the PyTorch reference, side by side, in one invocation.
#
# Both programs get the same data files, GPUs, model, per-GPU batch, precision and number of steps, and
# run one after the other, alternating (cutrain, PyTorch, cutrain, PyTorch, ...), so that a machine that
# warms up or slows down treats them alike. Both keep the same clock (app/run_clock.h): evaluation,
# checkpoint writes and the epoch-start wait are left out of images/s. Then one table (bench/summarize.py):
# images/s and ms/step (medians over the logged intervals after the warm-up), epoch time, peak GPU memory,
# test accuracy after the same epochs, and cutrain's ratio against each PyTorch configuration:
#   torch-eager-fp32       the reference recipe as written: fp32 eager, DataLoader with PIL transforms
#   torch-eager-bf16-cl    bf16 autocast and channels_last, data resident on the GPU
#   torch-compile-bf16-cl  the same under torch.compile
# Two correctness checks (bench/check_parity.py): before the runs, the first step's loss and gradients from
# the same initial weights (each fp32 result measured against PyTorch's float64 step); after them, the
# accuracy in torchvision of the checkpoint the cutrain-fp32 run saved.
# With --target-accuracy A, every run stops at the first evaluation that reaches A (or after --epochs), and
# the table adds each run's time to A (training time, evaluation left out) and cutrain's ratio of it.
# One GPU: each program runs as one plain process; N GPUs: cutrain through cutrun, PyTorch through torchrun.
set -euo pipefail

usage() {
  cat <<'EOF'
usage: bench/compare.sh [options]
  --nproc N          GPUs of this node to use (default 1)
  --quick            a few hundred steps on a small synthetic dataset: about 3 minutes on one GPU; with
                     --device cpu a CPU-sized run instead (1,024 images, width 8, batch 32, 2 epochs)
  --data DIR         CIFAR-10 binary folder (default: a synthetic one made by `cutrain make-synthetic`)
  --out DIR          where the logs, metrics, results.json and compare.png go (default bench-out)
  --bin DIR          where cutrain and cutrun are (default: build/bin of this repository, wherever
                     the script is started from)
  --epochs E         epochs per run (default 20; --quick: 4)
  --batch-size B     per process (default 256; --quick on the CPU: 32)
  --stem S           cifar or imagenet (default cifar)
  --repeats R        rounds of all runs, pooled in the medians (default 1)
  --compile-mode M   default or max-autotune (default: default)
  --target-accuracy A  run each configuration until its test accuracy reaches A (a fraction, e.g. 0.94),
                     --epochs at most, and add the time to A to the table
  --eval-every-steps N  evaluate every N steps, not every epoch (a finer time to target)
  --lr LR, --lr-schedule S, --warmup-epochs E, --weight-decay WD, --width W, --tta none|flip,
  --lr-milestones F,F, --lr-gamma G, --clip-grad-norm N, --norm-weight-decay WD, --label-smoothing S,
  --normalize-mean M,M,M, --normalize-std S,S,S, --model-ema, --model-ema-steps N, --model-ema-decay D
                     the recipe, the same for both programs (default: their shared defaults)
  --torch-data D     gpu (the fast configurations keep the data on the GPU) or loader (DataLoader for all)
  --no-parity        skip the two correctness checks
  --budget S         stop starting runs when S seconds are spent; the table covers what finished
  --device D         cuda (default) or cpu (to try this script on a machine without a GPU: tiny runs only;
                     every column runs but cutrain-bf16, which needs a GPU and is skipped, saying so;
                     torch-compile-bf16-cl is skipped too, saying why, where torch has no torch.compile)
  -h, --help         this text
Environment: PYTHON is the interpreter with torch, torchvision and numpy (default: the project's
environment, made by scripts/setup.sh --with-tests, where it exists, else python3).
EOF
}

here="$(cd "$(dirname "$0")" && pwd)"
source "$here/../scripts/cli.sh"
source "$here/../scripts/python_env.sh"
nproc=1 quick=0 data="" out="bench-out" bin="$here/../build/bin" epochs="" batch="" stem=cifar repeats=1
compile_mode=default torch_data=gpu parity=1 device=cuda budget=
recipe=()    # flags with a value that both programs take alike
switches=()  # and switches
while (($#)); do
  case "$1" in
    --nproc) nproc="$(value_of "$@")"; shift ;;
    --quick) quick=1 ;;
    --data) data="$(value_of "$@")"; shift ;;
    --out) out="$(value_of "$@")"; shift ;;
    --bin) bin="$(value_of "$@")"; shift ;;
    --epochs) epochs="$(value_of "$@")"; shift ;;
    --batch-size) batch="$(value_of "$@")"; shift ;;
    --stem) stem="$(value_of "$@")"; shift ;;
    --repeats) repeats="$(value_of "$@")"; shift ;;
    --compile-mode) compile_mode="$(value_of "$@")"; shift ;;
    --torch-data) torch_data="$(value_of "$@")"; shift ;;
    --no-parity) parity=0 ;;
    --device) device="$(value_of "$@")"; shift ;;
    --budget) budget="$(value_of "$@")"; shift ;;
    --target-accuracy|--eval-every-steps|--lr|--lr-schedule|--warmup-epochs|--weight-decay|--width|--tta)
      recipe+=("$1" "$(value_of "$@")"); shift ;;
    --model-ema) switches+=("$1") ;;
    -h|--help) usage; exit 0 ;;
    *) reference_script_option "$1" || bad_usage "unknown option '$1'"
       recipe+=("$1" "$(value_of "$@")"); shift ;;
  esac
  shift
done
for n in "$nproc" ${batch:+"$batch"} "$repeats" ${epochs:+"$epochs"} ${budget:+"$budget"}; do
  [[ "$n" =~ ^[1-9][0-9]*$ ]] || bad_usage "'$n' is not a positive integer"
done
[[ "$stem" =~ ^(cifar|imagenet)$ ]] || bad_usage "--stem must be cifar or imagenet"
[[ "$compile_mode" =~ ^(default|max-autotune)$ ]] || bad_usage "--compile-mode must be default or max-autotune"
[[ "$torch_data" =~ ^(gpu|loader)$ ]] || bad_usage "--torch-data must be gpu or loader"
[[ "$device" =~ ^(cuda|cpu)$ ]] || bad_usage "--device must be cuda or cpu"
for ((i = 0; i < ${#recipe[@]}; i += 2)); do
  flag="${recipe[i]}" value="${recipe[i + 1]}"
  case "$flag" in
    --lr-schedule) [[ "$value" =~ ^(constant|cosine|onecycle|step)$ ]] ||
                     bad_usage "--lr-schedule must be constant, cosine, onecycle or step" ;;
    --tta) [[ "$value" =~ ^(none|flip)$ ]] || bad_usage "--tta must be none or flip" ;;
    --target-accuracy) [[ "$value" =~ ^(0?\.[0-9]*[1-9][0-9]*|1(\.0*)?)$ ]] ||
                         bad_usage "--target-accuracy: '$value' is not a fraction in (0, 1], e.g. 0.94" ;;
    *) check_number_form "$flag" "$value" ;;
  esac
done

# Quick: 12,800 synthetic images are 50 steps per epoch at batch 256 on one GPU; 4 epochs = 200 steps.
# On the CPU: 1,024 images at batch 32 and width 8 are 32 steps per epoch, a few seconds each program.
if ((quick)) && [ "$device" = cpu ]; then
  epochs="${epochs:-2}" batch="${batch:-32}" train_n=$((1024 * nproc)) test_n=256 log_every=4 warmup=8 limit=600
  [[ " ${recipe[*]} " == *" --width "* ]] || recipe+=(--width 8)
elif ((quick)); then
  epochs="${epochs:-4}" train_n=$((12800 * nproc)) test_n=2000 log_every=10 warmup=30 limit=240
else
  epochs="${epochs:-20}" train_n=50000 test_n=10000 log_every=25 warmup=50 limit=7200
fi
batch="${batch:-256}"

# ---- what must be present: the binaries, torch with a CUDA device, enough GPUs
PYTHON="$(default_python)"
cutrain="$bin/cutrain"
[ -x "$cutrain" ] || die "$cutrain: not found or not executable (build first, or pass --bin DIR)"
((nproc == 1)) || [ -x "$bin/cutrun" ] || die "$bin/cutrun: not found (needed for --nproc $nproc)"
reason="$("$PYTHON" - "$nproc" "$device" 2>&1 <<'EOF' || true
import sys
try:
    import numpy, torch, torchvision
except ImportError as e:
    sys.exit(f"torch not importable: {e}")
if sys.argv[2] == "cpu":
    sys.exit(0)
if not torch.cuda.is_available():
    sys.exit("no CUDA device: torch.cuda.is_available() is False")
if torch.cuda.device_count() < int(sys.argv[1]):
    sys.exit(f"--nproc {sys.argv[1]} but torch sees {torch.cuda.device_count()} CUDA devices")
EOF
)"
[[ "$reason" != *"torch not importable"* ]] || die "$(tail -n 1 <<<"$reason") ($PYTHON): $torch_help"
[ -z "$reason" ] || die "$(tail -n 1 <<<"$reason") ($PYTHON)"
# torch.compile came in torch 2.0 (Debian 12's torch is 1.13), and its CPU backend compiles C++ kernels.
no_compile=""
if ! "$PYTHON" -c 'import sys, torch; sys.exit(0 if hasattr(torch, "compile") else 1)' 2>/dev/null; then
  no_compile="torch $("$PYTHON" -c 'import torch; print(torch.__version__)' 2>/dev/null) has no torch.compile, which came in 2.0"
elif [ "$device" = cpu ] && ! command -v "${CXX:-g++}" >/dev/null; then
  no_compile="torch.compile on the CPU compiles C++, and there is no ${CXX:-g++}"
fi

mkdir -p "$out/runs" "$out/parity"
out="$(cd "$out" && pwd)"
log="$out/compare.log"
: >"$log"
say() { echo "$*" | tee -a "$log"; }

# run NAME TIMEOUT CMD...: one step, its output in runs/NAME.log (and compare.log), one status line here.
# With --budget, a step gets at most what is left (less 20 s kept for the table) and none when under 10 s;
# the budget counts from the script's start (SECONDS), the torch check above included.
failures=0
deadline=$((budget ? budget - 20 : 1 << 62))
run() {
  local name="$1" limit="$2"; shift 2
  local start=$SECONDS status=0
  if ((deadline - SECONDS < 10)); then
    say "$(printf '%-28s SKIPPED (out of time)' "$name")"; failures=$((failures + 1)); return 1
  fi
  ((limit <= deadline - SECONDS)) || limit=$((deadline - SECONDS))
  echo "== $name: $*" >>"$log"
  timeout --kill-after=15 "$limit" "$@" >"$out/runs/$name.log" 2>&1 || status=$?
  cat "$out/runs/$name.log" >>"$log"
  if ((status == 0)); then
    say "$(printf '%-28s ok     %4d s' "$name" $((SECONDS - start)))"
  else
    if ((status == 124)); then status="timeout after $limit s"; else status="exit $status"; fi
    say "$(printf '%-28s FAILED %4d s (%s): %s' "$name" $((SECONDS - start)) "$status" \
      "$(grep -v '^\s*$' "$out/runs/$name.log" | tail -n 1 | cut -c1-160)")"
    failures=$((failures + 1))
    return 1
  fi
}

# ---- data: the given folder, or the synthetic one in CIFAR-10's binary layout that both programs read,
# from cutrain's cache (named by the generator's version: an older generator's copy is never reused)
if [ -z "$data" ]; then
  run make-synthetic 600 "$cutrain" make-synthetic --train "$train_n" --test "$test_n" ||
    die "could not make the synthetic dataset (see $out/runs/make-synthetic.log)"
  data="$(tail -n 1 "$out/runs/make-synthetic.log")"
fi
[ -d "$data" ] || die "--data $data: no such folder"

cutrain_launch=("$cutrain")
torch_launch=("$PYTHON" "$here/pytorch_reference.py")
if ((nproc > 1)); then
  cutrain_launch=("$bin/cutrun" --standalone --nproc-per-node "$nproc" "$cutrain")
  torch_launch=("$PYTHON" -m torch.distributed.run --standalone --nproc-per-node "$nproc" "$here/pytorch_reference.py")
fi
common=(--data "$data" --epochs "$epochs" --batch-size "$batch" --stem "$stem" --seed 0 --device "$device"
        --log-every "$log_every" "${recipe[@]}" "${switches[@]}")
say "compare: $nproc process(es) on $device, resnet18 $stem stem, batch $batch per process, $epochs epochs, data $data" \
  "${recipe[*]} ${switches[*]}"

# ---- correctness first: same initial weights, same fixed batch, fp32
if ((parity)); then
  p="$out/parity"
  rm -f "$p/parity.json"
  if run torch-first-step 300 "$PYTHON" "$here/pytorch_reference.py" --data "$data" --stem "$stem" \
       --batch-size "$batch" --device "$device" --export-init "$p/init.safetensors" \
       --dump-first-step "$p/torch-first-step.safetensors" --dump-fp64 "$p/torch-first-step-fp64.safetensors" &&
     run cutrain-first-step 300 "$cutrain" train --data "$data" --stem "$stem" --batch-size "$batch" \
       --device "$device" --precision fp32 --init-from "$p/init.safetensors" \
       --dump-first-step "$p/cutrain-first-step.safetensors"; then
    run parity-grads 120 "$PYTHON" "$here/check_parity.py" grads "$p/torch-first-step.safetensors" \
      "$p/cutrain-first-step.safetensors" --fp64 "$p/torch-first-step-fp64.safetensors" --json "$p/parity.json" || true
  fi
fi

# ---- the runs, alternating programs, those the targets name first (a --budget may cut the last);
# each writes runs/NAME.rK.jsonl
fast_data=(--data-on-gpu)
[ "$torch_data" = gpu ] || fast_data=()
summary_args=()
for ((r = 1; r <= repeats; r++)); do
  for config in cutrain-bf16 torch-eager-bf16-cl cutrain-fp32 torch-compile-bf16-cl torch-eager-fp32; do
    metrics="$out/runs/$config.r$r.jsonl"
    checkpoints="$out/runs/ckpt-fp32.r$r"
    case "$config" in
      cutrain-fp32) cmd=("${cutrain_launch[@]}" train "${common[@]}" --precision fp32 --save "$checkpoints")
                    rm -rf "$checkpoints" ;;  # the checkpoint check takes the newest file there
      cutrain-bf16) cmd=("${cutrain_launch[@]}" train "${common[@]}" --precision bf16) ;;
      torch-eager-fp32) cmd=("${torch_launch[@]}" "${common[@]}") ;;
      torch-eager-bf16-cl) cmd=("${torch_launch[@]}" "${common[@]}" --amp bf16 --channels-last "${fast_data[@]}") ;;
      torch-compile-bf16-cl) cmd=("${torch_launch[@]}" "${common[@]}" --amp bf16 --channels-last "${fast_data[@]}"
                                  --compile "$compile_mode") ;;
    esac
    if [ "$config" = cutrain-bf16 ] && [ "$device" = cpu ]; then  # cutrain's CPU path computes in fp32 alone
      say "$(printf '%-28s SKIPPED (needs a GPU: cutrain computes bf16 on CUDA only)' "$config.r$r")"
      continue
    fi
    if [ "$config" = torch-compile-bf16-cl ] && [ -n "$no_compile" ]; then
      say "$(printf '%-28s SKIPPED (%s)' "$config.r$r" "$no_compile")"
      continue
    fi
    rm -f "$metrics"  # cutrain appends to a metrics file
    run "$config.r$r" "$limit" "${cmd[@]}" --metrics "$metrics" && summary_args+=("$config=$metrics") || true
  done
done

# ---- a cutrain checkpoint, evaluated by cutrain and by torchvision
if ((parity)); then
  checkpoint="$(ls -t "$out"/runs/ckpt-fp32.r1/*.safetensors 2>/dev/null | grep -v '\.optim\.' | head -n 1 || true)"
  if [ -z "$checkpoint" ]; then
    say "checkpoint check skipped: cutrain-fp32 wrote no checkpoint"
  elif run cutrain-eval 300 "$cutrain" eval --data "$data" --checkpoint "$checkpoint" --device "$device" \
         --precision fp32; then
    acc="$(sed -n 's/^test accuracy: *\([0-9.]*\)%.*/\1/p' "$out/runs/cutrain-eval.log" | head -n 1)"
    if [ -n "$acc" ]; then
      run parity-checkpoint 300 "$PYTHON" "$here/check_parity.py" checkpoint --data "$data" \
        --checkpoint "$checkpoint" --stem "$stem" --cutrain-acc "$acc" --json "$out/parity/parity.json" || true
    else
      say "checkpoint check skipped: no 'test accuracy: X%' line in runs/cutrain-eval.log"
    fi
  fi
fi

# ---- the table
((${#summary_args[@]})) || die "no run finished; see $log"
parity_args=()
[ -f "$out/parity/parity.json" ] && parity_args=(--parity "$out/parity/parity.json")
if [ "$device" = cpu ]; then
  gpu="CPU ($(nproc) cores)"
else
  gpu="$("$PYTHON" -c 'import torch; print(torch.cuda.get_device_name(0))' 2>/dev/null ||
         nvidia-smi --query-gpu=name --format=csv,noheader -i 0 2>/dev/null || echo "unnamed GPU")"
fi
echo | tee -a "$log"
"$PYTHON" "$here/summarize.py" "${summary_args[@]}" "${parity_args[@]}" --warmup-steps "$warmup" --out "$out" \
  --note "gpu=$gpu" --note "device=$device" --note "nproc=$nproc" --note "epochs=$epochs" --note "data=$data" |
  tee "$out/table.txt" | tee -a "$log"
((failures == 0)) || { echo "compare.sh: $failures step(s) failed; see $log" >&2; exit 1; }
