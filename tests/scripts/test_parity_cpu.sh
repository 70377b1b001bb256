# cutrain against PyTorch itself, on the CPU, the two checks of bench/compare.sh:
#  1. from the same initial weights (exported by the PyTorch script) and the same fixed batch, the
#     first step's loss and every gradient agree, judged against PyTorch's own float64 step;
#  2. a cutrain checkpoint (imagenet stem: torchvision's resnet18 unchanged) loads into torchvision
#     with strict=True and scores the test accuracy `cutrain eval` printed;
#  3. so does a narrow cifar-stem one trained to about 50% with test-time augmentation (--tta flip), two
#     independent implementations: where the mirror changes predictions, a flip of the wrong axis (55%)
#     or none (53%) would not score the 52% the right one scores;
#  4. both checkpoints make the round trip of bench/torchvision_interop.py, through the `safetensors` package:
#     into torchvision (strict=True, torchvision's transforms, which make exactly the inputs that cutrain and
#     check_parity.py normalise) at cutrain's accuracy, out as a torch.save'd
#     state_dict, and back into a cutrain checkpoint that holds the same tensors and scores the same.
# Needs torch, torchvision and safetensors (scripts/setup.sh --with-tests installs them).
source "$(dirname "$0")/common.sh"
cutrain_and_torch
require_python "numpy, torch, torchvision, safetensors"
interop=("$py" "$repo/bench/torchvision_interop.py")

# round_trip CHECKPOINT DATA ACC STEM: check 4 above, for one checkpoint that `cutrain eval` scored ACC%.
round_trip() {
  local checkpoint="$1" data="$2" acc="$3" stem="$4" tv back
  tv="$("${interop[@]}" evaluate "$checkpoint" --data "$data" | sed -n "s/^test accuracy: \([0-9.]*\)% (torchvision resnet18, $stem stem, .*/\1/p")"
  [ -n "$tv" ] || fail "torchvision_interop.py evaluate $checkpoint printed no '$stem stem' accuracy"
  "$py" -c "import sys; sys.exit(abs($tv - $acc) > 1.6)" ||  # 64 test images: within one image
    fail "$stem stem: torchvision scores $tv%, cutrain $acc%"
  "$py" - "$checkpoint" "$stem.pth" <<'PY2' || fail "$stem stem: the checkpoint as a torchvision state_dict"
import sys, torch, torchvision_interop
torch.save(torchvision_interop.load_cutrain_checkpoint(sys.argv[1]).state_dict(), sys.argv[2])
PY2
  "${interop[@]}" convert "$stem.pth" "$stem-back.safetensors" >/dev/null || fail "$stem stem: convert"
  "$py" - "$checkpoint" "$stem-back.safetensors" <<'PY2' || fail "$stem stem: the converted checkpoint differs"
import sys
import numpy as np
from safetensors import safe_open
from safetensors.numpy import load_file
original, back = load_file(sys.argv[1]), load_file(sys.argv[2])
assert set(original) == set(back), set(original) ^ set(back)
for name, t in original.items():
    assert t.dtype == back[name].dtype and np.array_equal(t, back[name]), name
with safe_open(sys.argv[1], "np") as f, safe_open(sys.argv[2], "np") as g:
    assert g.metadata() == {k: f.metadata()[k] for k in ("format", "stem", "num_classes", "width")}, g.metadata()
PY2
  back="$("$bin/cutrain" eval --data "$data" --checkpoint "$stem-back.safetensors" --device cpu |
         sed -n 's/^test accuracy: *\([0-9.]*\)%.*/\1/p')"
  [ "$back" = "$acc" ] || fail "$stem stem: the converted checkpoint scores '$back'% in cutrain, the original $acc%"
}
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
narrow_acc="$("$bin/cutrain" eval --data clean --checkpoint narrow/checkpoint-00000128.safetensors --device cpu |
              sed -n 's/^test accuracy: *\([0-9.]*\)%.*/\1/p')"
"$py" - <<'PY' || fail "torchvision_interop.transform() does not make the inputs cutrain normalises"
import numpy as np, torch
from PIL import Image
import cifar10, torchvision_interop
images, _ = cifar10.load_split("data", train=False)
ours = torch.stack([torchvision_interop.transform()(Image.fromarray(x)) for x in images[:16]]).numpy()
assert np.allclose(ours, cifar10.normalize(images[:16]), atol=1e-6), np.abs(ours - cifar10.normalize(images[:16])).max()
PY
round_trip "$checkpoint" data "$acc" imagenet
round_trip narrow/checkpoint-00000128.safetensors clean "$narrow_acc" cifar
cat grads.log checkpoint.log tta.log
echo "PASS: cutrain and PyTorch agree on the first step and on a checkpoint's accuracy, with and without TTA" \
  "($acc% and $tta%); both stems' checkpoints make the round trip through torchvision and safetensors"
