# cutrain against PyTorch itself, on the CPU, the two checks of bench/compare.sh:
#  1. from the same initial weights (exported by the PyTorch script) and the same fixed batch, the
#     first step's loss and every gradient agree, judged against PyTorch's own float64 step;
#  2. a cutrain checkpoint (imagenet stem: torchvision's resnet18 unchanged) loads into torchvision
#     with strict=True and scores the test accuracy `cutrain eval` printed;
#  3. so does a narrow cifar-stem one trained to about 50% with test-time augmentation (--tta flip), two
#     independent implementations: where the mirror changes predictions, a flip of the wrong axis (55%)
#     or none (53%) would not score the 52% the right one scores.
# Needs Debian's python3-torch and python3-torchvision (scripts/setup.sh installs them).
source "$(dirname "$0")/common.sh"
cutrain_and_torch
"$bin/cutrain" make-synthetic --out data --train 256 --test 64 >/dev/null

"$py" "$repo/bench/pytorch_reference.py" --data data --stem cifar --batch-size 32 --device cpu \
  --export-init init.safetensors --dump-first-step torch.safetensors --dump-fp64 torch64.safetensors \
  >torch.log 2>&1 || fail "PyTorch's first step: $(tail -n 3 torch.log)"
"$bin/cutrain" train --data data --stem cifar --batch-size 32 --device cpu --precision fp32 \
  --init-from init.safetensors --dump-first-step cutrain.safetensors >cutrain.log 2>&1 ||
  fail "cutrain's first step: $(tail -n 3 cutrain.log)"
"$py" "$repo/bench/check_parity.py" grads torch.safetensors cutrain.safetensors --fp64 torch64.safetensors \
  >grads.log 2>&1 || fail "first-step parity: $(tail -n 5 grads.log)"

"$bin/cutrain" train --data data --stem imagenet --batch-size 32 --epochs 2 --lr 0.05 --device cpu \
  --eval-every 0 --save ckpt >train.log 2>&1 || fail "training: $(tail -n 3 train.log)"
checkpoint="$(ls ckpt/checkpoint-*.safetensors | grep -v '\.optim\.' | tail -n 1)"
acc="$("$bin/cutrain" eval --data data --checkpoint "$checkpoint" --device cpu |
       sed -n 's/^test accuracy: *\([0-9.]*\)%.*/\1/p')"
[ -n "$acc" ] || fail "cutrain eval printed no 'test accuracy: X%' line"
"$py" "$repo/bench/check_parity.py" checkpoint --data data --checkpoint "$checkpoint" --stem imagenet \
  --cutrain-acc "$acc" >checkpoint.log 2>&1 || fail "checkpoint in torchvision: $(tail -n 5 checkpoint.log)"
"$bin/cutrain" make-synthetic --out clean --train 1024 --test 64 --difficulty 0 >/dev/null
"$bin/cutrain" train --data clean --width 8 --batch-size 32 --epochs 4 --lr 0.05 --device cpu --eval-every 0 \
  --save narrow >narrow.log 2>&1 || fail "training the narrow model: $(tail -n 3 narrow.log)"
tta="$("$bin/cutrain" eval --data clean --checkpoint narrow/checkpoint-00000128.safetensors --device cpu --tta flip |
       sed -n 's/^test accuracy: *\([0-9.]*\)%.*(test-time augmentation: flip)$/\1/p')"
[ -n "$tta" ] || fail "cutrain eval --tta flip printed no 'test accuracy: X% ... (test-time augmentation: flip)' line"
"$py" "$repo/bench/check_parity.py" checkpoint --data clean --checkpoint narrow/checkpoint-00000128.safetensors \
  --stem cifar --tta flip --cutrain-acc "$tta" >tta.log 2>&1 || fail "--tta flip in both programs: $(tail -n 5 tta.log)"
cat grads.log checkpoint.log tta.log
echo "PASS: cutrain and PyTorch agree on the first step and on a checkpoint's accuracy, with and without TTA" \
  "($acc% and $tta%)"
