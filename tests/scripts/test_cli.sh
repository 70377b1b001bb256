# Argument handling of the bench scripts, with no GPU and no torch needed: --help answers with a usage
# text and status 0; an unknown flag is a one-line error and a non-zero status; a missing GPU or torch is a
# one-line error naming it.
source "$(dirname "$0")/common.sh"
commands=(
  "bash $repo/bench/compare.sh"
  "bash $repo/bench/accuracy.sh"
  "bash $repo/scripts/gpu-check.sh"
  "bash $repo/scripts/package-prebuilt.sh"
  "python3 $repo/bench/pytorch_reference.py"
  "python3 $repo/bench/summarize.py"
  "python3 $repo/bench/accuracy_table.py"
  "python3 $repo/bench/check_parity.py"
  "python3 $repo/bench/torchvision_interop.py"
  "python3 $repo/scripts/plot_metrics.py"
)
for c in "${commands[@]}"; do
  read -ra cmd <<<"$c"
  "${cmd[@]}" --help >"$scratch/help" 2>&1 || fail "$c --help: exit status $?"
  grep -qi "usage" "$scratch/help" || fail "$c --help: no usage text"
  one_line_error "$c --no-such-flag" 2 "${cmd[@]}" --no-such-flag
done
one_line_error "compare.sh --nproc 0" 2 bash "$repo/bench/compare.sh" --nproc 0
one_line_error "compare.sh --nproc (no value)" 2 bash "$repo/bench/compare.sh" --nproc
one_line_error "compare.sh --target-accuracy 94" 2 bash "$repo/bench/compare.sh" --target-accuracy 94
one_line_error "compare.sh --tta crop" 2 bash "$repo/bench/compare.sh" --tta crop
one_line_error "accuracy.sh --lr-schedule linear" 2 bash "$repo/bench/accuracy.sh" --lr-schedule linear
one_line_error "pytorch_reference.py --target-accuracy 94" 2 python3 "$repo/bench/pytorch_reference.py" --data x \
  --target-accuracy 94
one_line_error "pytorch_reference.py --batch-size 0" 2 python3 "$repo/bench/pytorch_reference.py" --data x --batch-size 0
# The options of torchvision's reference script take cutrain's ranges, and refuse what they would not apply to.
for bad in "--clip-grad-norm -1" "--norm-weight-decay 2" "--label-smoothing nan" "--normalize-std 0.2,0,0.2" \
           "--normalize-mean 0.5,0.5" "--lr-schedule step --lr-milestones 0.75,0.5" "--lr-schedule step --lr-gamma 2" \
           "--lr-gamma 0.5" "--lr-milestones 0.5" "--model-ema-steps 4" "--model-ema --model-ema-steps 0" \
           "--no-model-ema --model-ema-decay 0.9"; do
  read -ra flags <<<"$bad"
  one_line_error "pytorch_reference.py $bad" 2 python3 "$repo/bench/pytorch_reference.py" --data x "${flags[@]}"
done
grep -q "^pytorch_reference.py: error: --model-ema-decay: applies with --model-ema only (see --help)$" "$scratch/stderr" ||
  fail "pytorch_reference.py --model-ema-decay without --model-ema: $(cat "$scratch/stderr")"

# No GPU / no torch: a stub cutrain gets compare.sh past its binary check to the torch and GPU check.
mkdir -p "$scratch/bin"
printf '#!/bin/sh\nexit 0\n' >"$scratch/bin/cutrain"
chmod +x "$scratch/bin/cutrain"
torch_cuda="$(python_with torch 2>/dev/null)"
if [ -n "$torch_cuda" ] && "$torch_cuda" -c 'import sys, torch; sys.exit(not torch.cuda.is_available())'; then
  echo "note: a CUDA device is present; the no-GPU errors are not checked"
else
  one_line_error "compare.sh without GPU" 1 bash "$repo/bench/compare.sh" --bin "$scratch/bin" --out "$scratch/o"
  grep -qE "no CUDA device|torch not importable" "$scratch/stderr" || fail "compare.sh: $(cat "$scratch/stderr")"
  one_line_error "pytorch_reference.py --device cuda" 1 python3 "$repo/bench/pytorch_reference.py" --data x --device cuda
  grep -qE "no CUDA device|torch not importable" "$scratch/stderr" || fail "pytorch_reference.py: $(cat "$scratch/stderr")"
fi
# An interpreter without torch (python3 without its site packages): each bench script says how to get it, in
# one line, before it runs anything, and cpu_step.sh --cutrain-only prints cutrain's column alone.
printf '#!/bin/sh\nexec python3 -S "$@"\n' >"$scratch/bare-python"
chmod +x "$scratch/bare-python"
printf '#!/bin/sh\necho "  12.5 ms/step"\n' >"$scratch/bin/cutrain"
for script in compare.sh accuracy.sh cpu_step.sh; do
  PYTHON="$scratch/bare-python" one_line_error "$script without torch" 1 bash "$repo/bench/$script" --bin "$scratch/bin"
  grep -q "torch not importable: .*scripts/setup.sh --with-tests installs the project's PyTorch" "$scratch/stderr" ||
    fail "$script without torch: $(cat "$scratch/stderr")"
done
PYTHON="$scratch/bare-python" bash "$repo/bench/cpu_step.sh" --bin "$scratch/bin" --cutrain-only --rounds 1 --threads 1 \
  >"$scratch/cutrain-only" 2>&1 || fail "cpu_step.sh --cutrain-only: $(cat "$scratch/cutrain-only")"
grep -qE '^batch 32, width 64 +1 +12.5 +- +-$' "$scratch/cutrain-only" || fail "cpu_step.sh --cutrain-only: $(cat "$scratch/cutrain-only")"
one_line_error "compare.sh --bin (nothing there)" 1 bash "$repo/bench/compare.sh" --bin "$scratch/nothing"
one_line_error "accuracy.sh --bin (nothing there)" 1 bash "$repo/bench/accuracy.sh" --bin "$scratch/nothing"
prepare=(bash "$repo/scripts/prepare-cifar10.sh")
one_line_error "prepare-cifar10.sh on a missing archive" 1 "${prepare[@]}" "$scratch/none.tar.gz" "$scratch/c"
echo "not the archive" >"$scratch/wrong.tar.gz"
one_line_error "prepare-cifar10.sh on a wrong archive" 1 "${prepare[@]}" "$scratch/wrong.tar.gz" "$scratch/c"
grep -q "MD5" "$scratch/stderr" || fail "prepare-cifar10.sh: $(cat "$scratch/stderr")"
if ! nvidia-smi -L >/dev/null 2>&1; then
  one_line_error "gpu-check.sh without GPU" 1 bash "$repo/scripts/gpu-check.sh" --out "$scratch/g"
  grep -q "no CUDA device" "$scratch/stderr" || fail "gpu-check.sh: $(cat "$scratch/stderr")"
fi
echo "ok: ${#commands[@]} scripts answer --help and refuse a bad flag in one line; no-GPU errors are one line"
