#!/usr/bin/env bash
# accuracy.sh: does cutrain reach the accuracy PyTorch reaches? Both programs, side by side, over seeds.
#
# One short run of either program moves by several points from seed to seed, so one run each proves
# nothing. For each seed s = 0 .. S-1, the PyTorch reference exports the initial weights it draws from
# seed s and trains from them; cutrain then trains from that very file. Same data, model, batch, schedule,
# epochs and precision; the programs' own data order and augmentation draws, as two honest
# implementations of the recipe would have. Then one table (bench/accuracy_table.py): the test accuracy
# after each epoch as mean +- standard deviation over the seeds for both, the difference of the final
# means, and whether it lies within the seed-to-seed spread (2 standard errors of the difference).
#
# On the CPU the defaults are the README's CPU quickstart (Note [The CPU recipe] in scripts/cpu_recipe.sh,
# which they are read from): a seed of both programs takes about three minutes on two cores. On a GPU
# they are the reference recipe on the data given (width 64, batch 256, 20 epochs, lr 0.002).
set -euo pipefail

usage() {
  local train test
  train="$(cpu_recipe_value --synthetic-train)" test="$(cpu_recipe_value --synthetic-test)"
  cat <<EOF
usage: bench/accuracy.sh [options]
  --seeds S          seeds per program (default 3)
  --device D         cpu or cuda (default: cuda when PyTorch sees one, else cpu)
  --data DIR         CIFAR-10 binary folder (default: cutrain's synthetic default, --train/--test images)
  --train N, --test M  sizes of the synthetic default (cpu: $train, $test; cuda: 50000, 10000)
  --epochs E         (cpu: $(cpu_recipe_value --epochs); cuda: 20)
  --width W          base width of ResNet-18 (cpu: $(cpu_recipe_value --width); cuda: 64)
  --batch-size B     (cpu: $(cpu_recipe_value --batch-size); cuda: 256)
  --lr LR            (cpu: $(cpu_recipe_value --lr); cuda: 0.002)
  --lr-schedule S    constant, cosine, onecycle or step (cpu: $(cpu_recipe_value --lr-schedule); cuda: constant)
  --warmup-epochs E  linear warm-up (cpu: $(cpu_recipe_value --warmup-epochs); cuda: 0)
  --precision P      fp32 (default) or bf16 (cutrain --precision bf16, PyTorch --amp bf16; GPU only)
  --tta T            none (default) or flip
  --lr-milestones F,F, --lr-gamma G, --clip-grad-norm N, --norm-weight-decay WD, --label-smoothing S,
  --normalize-mean M,M,M, --normalize-std S,S,S, --model-ema, --model-ema-steps N, --model-ema-decay D
                     the options of torchvision's reference script, the same for both programs (default: none)
  --out DIR          where the logs, metrics, initial weights and accuracy.json go (default accuracy-out)
  --bin DIR          where cutrain is (default build/bin)
  -h, --help         this text
Environment: PYTHON is the interpreter with torch, torchvision and numpy (default: the project's
environment, made by scripts/setup.sh --with-tests, where it exists, else python3).
EOF
}

here="$(cd "$(dirname "$0")" && pwd)"
source "$here/../scripts/cli.sh"
source "$here/../scripts/python_env.sh"
source "$here/../scripts/cpu_recipe.sh"
seeds=3 device="" data="" train_n="" test_n="" epochs="" width="" batch="" lr="" schedule="" warmup=""
precision=fp32 tta=none out=accuracy-out bin=build/bin
options=() switches=()  # the options of torchvision's reference script, given to both programs
while (($#)); do
  case "$1" in
    --seeds) seeds="$(value_of "$@")"; shift ;;
    --device) device="$(value_of "$@")"; shift ;;
    --data) data="$(value_of "$@")"; shift ;;
    --train) train_n="$(value_of "$@")"; shift ;;
    --test) test_n="$(value_of "$@")"; shift ;;
    --epochs) epochs="$(value_of "$@")"; shift ;;
    --width) width="$(value_of "$@")"; shift ;;
    --batch-size) batch="$(value_of "$@")"; shift ;;
    --lr) lr="$(value_of "$@")"; shift ;;
    --lr-schedule) schedule="$(value_of "$@")"; shift ;;
    --warmup-epochs) warmup="$(value_of "$@")"; shift ;;
    --precision) precision="$(value_of "$@")"; shift ;;
    --tta) tta="$(value_of "$@")"; shift ;;
    --out) out="$(value_of "$@")"; shift ;;
    --bin) bin="$(value_of "$@")"; shift ;;
    --model-ema) switches+=("$1") ;;
    -h|--help) usage; exit 0 ;;
    *) reference_script_option "$1" || bad_usage "unknown option '$1'"
       options+=("$1" "$(value_of "$@")"); shift ;;
  esac
  shift
done
for ((i = 0; i < ${#options[@]}; i += 2)); do check_number_form "${options[i]}" "${options[i + 1]}"; done
for n in "$seeds" ${train_n:+"$train_n"} ${test_n:+"$test_n"} ${epochs:+"$epochs"} ${width:+"$width"} \
         ${batch:+"$batch"}; do
  [[ "$n" =~ ^[1-9][0-9]*$ ]] || bad_usage "'$n' is not a positive integer"
done
for x in ${lr:+"$lr"} ${warmup:+"$warmup"}; do
  [[ "$x" =~ ^[0-9]*\.?[0-9]+([eE][-+]?[0-9]+)?$ ]] || bad_usage "'$x' is not a number"
done
[[ -z "$device" || "$device" =~ ^(cuda|cpu)$ ]] || bad_usage "--device must be cuda or cpu"
[[ -z "$schedule" || "$schedule" =~ ^(constant|cosine|onecycle|step)$ ]] ||
  bad_usage "--lr-schedule must be constant, cosine, onecycle or step"
[[ "$precision" =~ ^(fp32|bf16)$ ]] || bad_usage "--precision must be fp32 or bf16"
[[ "$tta" =~ ^(none|flip)$ ]] || bad_usage "--tta must be none or flip"

PYTHON="$(default_python)"
cutrain="$bin/cutrain"
[ -x "$cutrain" ] || die "$cutrain: not found or not executable (build first, or pass --bin DIR)"
found="$("$PYTHON" - "$device" 2>&1 <<'EOF' || true
import sys
try:
    import numpy, torch, torchvision
except ImportError as e:
    sys.exit(f"torch not importable: {e}")
if sys.argv[1] == "cuda" and not torch.cuda.is_available():
    sys.exit("no CUDA device: torch.cuda.is_available() is False")
print("cuda" if torch.cuda.is_available() and sys.argv[1] != "cpu" else "cpu")
EOF
)"
[[ "$found" != *"torch not importable"* ]] || die "$(tail -n 1 <<<"$found") ($PYTHON): $torch_help"
[[ "$found" =~ ^(cpu|cuda)$ ]] || die "$(tail -n 1 <<<"$found") ($PYTHON)"
device="$found"
[ "$precision" = fp32 ] || [ "$device" = cuda ] || bad_usage "--precision bf16 needs a GPU"
if [ "$device" = cpu ]; then
  : "${train_n:=$(cpu_recipe_value --synthetic-train)}" "${test_n:=$(cpu_recipe_value --synthetic-test)}"
  : "${epochs:=$(cpu_recipe_value --epochs)}" "${width:=$(cpu_recipe_value --width)}"
  : "${batch:=$(cpu_recipe_value --batch-size)}" "${lr:=$(cpu_recipe_value --lr)}"
  : "${schedule:=$(cpu_recipe_value --lr-schedule)}" "${warmup:=$(cpu_recipe_value --warmup-epochs)}"
  workers=2
else
  : "${train_n:=50000}" "${test_n:=10000}" "${epochs:=20}" "${width:=64}" "${batch:=256}" "${lr:=0.002}"
  : "${schedule:=constant}" "${warmup:=0}"
  workers=4
fi

mkdir -p "$out/runs"
out="$(cd "$out" && pwd)"
log="$out/accuracy.log"
: >"$log"
say() { echo "$*" | tee -a "$log"; }

# step NAME CMD...: one run, its output in runs/NAME.log (and accuracy.log); stops the script when it fails.
step() {
  local name="$1" start=$SECONDS; shift
  echo "== $name: $*" >>"$log"
  if ! "$@" >"$out/runs/$name.log" 2>&1; then
    cat "$out/runs/$name.log" >>"$log"
    die "$name failed: $(grep -v '^\s*$' "$out/runs/$name.log" | tail -n 1 | cut -c1-200) (see $out/runs/$name.log)"
  fi
  cat "$out/runs/$name.log" >>"$log"
  say "$(printf '%-14s ok %5d s' "$name" $((SECONDS - start)))"
}

if [ -z "$data" ]; then  # cutrain's cached synthetic default, named by the generator's version
  step make-synthetic "$cutrain" make-synthetic --train "$train_n" --test "$test_n"
  data="$(tail -n 1 "$out/runs/make-synthetic.log")"
fi
[ -d "$data" ] || die "--data $data: no such folder"

recipe=(--data "$data" --device "$device" --width "$width" --epochs "$epochs" --batch-size "$batch" --lr "$lr"
        --lr-schedule "$schedule" --warmup-epochs "$warmup" --tta "$tta" --eval-every 1 --workers "$workers"
        "${options[@]}" "${switches[@]}")
torch_precision=()
[ "$precision" = bf16 ] && torch_precision=(--amp bf16)
say "accuracy: $seeds seed(s) on $device, resnet18 width $width, $epochs epochs, batch $batch, lr $lr ($schedule)," \
  "$precision, data $data" "${options[*]}" "${switches[*]}"
table_args=()
for ((s = 0; s < seeds; s++)); do
  init="$out/init-seed$s.safetensors"
  rm -f "$out/runs/pytorch-seed$s.jsonl" "$out/runs/cutrain-seed$s.jsonl"  # cutrain appends to a metrics file
  step "pytorch-seed$s" "$PYTHON" "$here/pytorch_reference.py" "${recipe[@]}" "${torch_precision[@]}" --seed "$s" \
    --export-init "$init" --metrics "$out/runs/pytorch-seed$s.jsonl"
  step "cutrain-seed$s" "$cutrain" train "${recipe[@]}" --precision "$precision" --seed "$s" --init-from "$init" \
    --metrics "$out/runs/cutrain-seed$s.jsonl"
  table_args+=("cutrain=$out/runs/cutrain-seed$s.jsonl" "pytorch=$out/runs/pytorch-seed$s.jsonl")
done

echo | tee -a "$log"
"$PYTHON" "$here/accuracy_table.py" "${table_args[@]}" --json "$out/accuracy.json" | tee "$out/table.txt" |
  tee -a "$log"
