# cutrain's training against PyTorch's, step by step, on the CPU: from the same initial weights and on the
# same batches (the reference draws cutrain's crops and flips, bench/augment_draws.py, in the sampler order
# both share), 24 steps over 3 epochs with a per-step warm-up and cosine schedule, Nesterov momentum and a
# weight decay large enough to show on batch norm's parameters, and an evaluation after each epoch, which must
# leave training undisturbed. check_parity.py steps compares every step's
# loss and every tensor of the final state_dict (running statistics and num_batches_tracked too), against the
# drift of a twin: PyTorch itself in channels_last, another set of fp32 kernels. Turning Nesterov off, or
# leaving batch norm out of the weight decay, fails it many times over (bench/README.md, "Parity").
# The same 24 steps again with the options of torchvision's reference script that both programs take: the
# gradient clipped (to half its norm or less), label smoothing, batch norm's own weight decay, the step
# schedule at other milestones, another normalization, and the EMA of the weights, whose final tensors are
# compared too.
# Needs torch and torchvision: the project's environment (scripts/setup.sh --with-tests) has torch 2.11.
source "$(dirname "$0")/common.sh"
cutrain_and_torch
"$bin/cutrain" make-synthetic --out data --train 256 --test 32 >/dev/null

recipe=(--data "$scratch/data" --device cpu --width 8 --batch-size 32 --epochs 3 --lr 0.002 --lr-schedule cosine
        --warmup-epochs 1 --weight-decay 0.05 --seed 5 --log-every 1 --eval-every 1)
# steps_agree NAME FLAGS...: the 24 steps of PyTorch, its twin and cutrain with the recipe and FLAGS, in folder NAME.
steps_agree() {
  local name="$1"; shift
  mkdir "$name" && cd "$name"
  local ref=("$py" "$repo/bench/pytorch_reference.py" "${recipe[@]}" "$@" --workers 0 --cutrain-augment)
  "${ref[@]}" --export-init init.safetensors --metrics torch.jsonl --export-final torch.safetensors >torch.log 2>&1 ||
    fail "$name: PyTorch's steps: $(tail -n 3 torch.log)"
  "${ref[@]}" --channels-last --init-from init.safetensors --metrics twin.jsonl --export-final twin.safetensors \
    >twin.log 2>&1 || fail "$name: PyTorch's steps in channels_last: $(tail -n 3 twin.log)"
  "$bin/cutrain" train "${recipe[@]}" "$@" --workers 1 --init-from init.safetensors --metrics cutrain.jsonl \
    --save ckpt >cutrain.log 2>&1 || fail "$name: cutrain's steps: $(tail -n 3 cutrain.log)"
  "$py" "$repo/bench/check_parity.py" steps init.safetensors --torch torch.jsonl torch.safetensors \
    --twin twin.jsonl twin.safetensors --cutrain cutrain.jsonl ckpt/checkpoint-00000024.safetensors >steps.log 2>&1 ||
    fail "$name: $(tail -n 3 steps.log)"
  echo "$name: $(cat steps.log)"
  cd ..
}

steps_agree recipe
echo "PASS: 24 steps of cutrain and of PyTorch agree, loss by loss and tensor by tensor"

steps_agree options --clip-grad-norm 0.5 --label-smoothing 0.1 --norm-weight-decay 0.01 --lr-schedule step \
  --lr-milestones 0.25,0.6 --lr-gamma 0.5 --normalize-mean 0.5,0.45,0.4 --normalize-std 0.25,0.2,0.3 \
  --model-ema --model-ema-steps 2 --model-ema-decay 0.99
cd options
# The gradient was clipped at every step, so the check above had clipping to see: cutrain's step lines report
# the norm before clipping, as clip_grad_norm_ returns it.
"$py" - <<'PY' || fail "options: the gradient's norm was not always above --clip-grad-norm"
import json
norms = [r["grad_norm"] for r in map(json.loads, open("cutrain.jsonl")) if r["kind"] == "step"]
assert len(norms) == 24 and min(norms) > 1.0, norms
PY
"$py" "$repo/bench/check_parity.py" steps init.safetensors --torch torch.jsonl torch.ema.safetensors \
  --twin twin.jsonl twin.ema.safetensors --cutrain cutrain.jsonl ckpt/checkpoint-00000024.ema.safetensors \
  >ema.log 2>&1 || fail "options, the EMA of the weights: $(tail -n 3 ema.log)"
echo "options, the EMA of the weights: $(cat ema.log)"
echo "PASS: with clipping, label smoothing, batch norm's weight decay, the step schedule's milestones, another" \
  "normalization and the EMA of the weights too"
