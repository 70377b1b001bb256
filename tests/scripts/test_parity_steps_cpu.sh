# cutrain's training against PyTorch's, step by step, on the CPU: from the same initial weights and on the
# same batches (the reference draws cutrain's crops and flips, bench/augment_draws.py, in the sampler order
# both share), 24 steps over 3 epochs with a per-step warm-up and cosine schedule, Nesterov momentum and a
# weight decay large enough to show on batch norm's parameters, and an evaluation after each epoch, which must
# leave training undisturbed. check_parity.py steps compares every step's
# loss and every tensor of the final state_dict (running statistics and num_batches_tracked too), against the
# drift of a twin: PyTorch itself in channels_last, another set of fp32 kernels. Turning Nesterov off, or
# leaving batch norm out of the weight decay, fails it many times over (bench/README.md, "Parity").
# Needs torch and torchvision: the project's environment (scripts/setup.sh --with-tests) has torch 2.11.
source "$(dirname "$0")/common.sh"
cutrain_and_torch
"$bin/cutrain" make-synthetic --out data --train 256 --test 32 >/dev/null

recipe=(--data data --device cpu --width 8 --batch-size 32 --epochs 3 --lr 0.002 --lr-schedule cosine
        --warmup-epochs 1 --weight-decay 0.05 --seed 5 --log-every 1 --eval-every 1)
ref=("$py" "$repo/bench/pytorch_reference.py" "${recipe[@]}" --workers 0 --cutrain-augment)
"${ref[@]}" --export-init init.safetensors --metrics torch.jsonl --export-final torch.safetensors >torch.log 2>&1 ||
  fail "PyTorch's steps: $(tail -n 3 torch.log)"
"${ref[@]}" --channels-last --init-from init.safetensors --metrics twin.jsonl --export-final twin.safetensors \
  >twin.log 2>&1 || fail "PyTorch's steps in channels_last: $(tail -n 3 twin.log)"
"$bin/cutrain" train "${recipe[@]}" --workers 1 --init-from init.safetensors --metrics cutrain.jsonl --save ckpt \
  >cutrain.log 2>&1 || fail "cutrain's steps: $(tail -n 3 cutrain.log)"
"$py" "$repo/bench/check_parity.py" steps init.safetensors --torch torch.jsonl torch.safetensors \
  --twin twin.jsonl twin.safetensors --cutrain cutrain.jsonl ckpt/checkpoint-00000024.safetensors >steps.log 2>&1 ||
  fail "$(tail -n 3 steps.log)"
cat steps.log
echo "PASS: 24 steps of cutrain and of PyTorch agree, loss by loss and tensor by tensor"
