# The PyTorch reference's options of torchvision's classification reference script, each against what PyTorch
# defines, on the CPU, on tiny data, with the batches known (--cutrain-augment):
#  1. one step with --clip-grad-norm, --label-smoothing, --norm-weight-decay 0 and --normalize-mean/-std is the
#     step computed by hand: the loss of the smoothed targets on the inputs normalized so, the total 2-norm
#     of its gradient (the step line's grad norm), the gradient scaled by min(1, MAX / (norm + 1e-6)), and SGD
#     with Nesterov momentum that decays every parameter but batch norm's;
#  2. --lr-schedule step with --lr-milestones and --lr-gamma follows PyTorch's MultiStepLR at floor(m x steps);
#  3. --model-ema, with a warm-up epoch, is PyTorch's AveragedModel of the weights and buffers with the EMA of
#     get_ema_multi_avg_fn at torchvision's adjusted decay, fed the model after the steps whose index in their
#     epoch is a multiple of --model-ema-steps, restarted during the warm-up: after 12 steps it equals the one
#     computed from the model's weights after steps 5, 7, 9 and 11; its test accuracy in the metrics is that of
#     its weights, evaluated by hand;
#  4. --dump-first-step takes --label-smoothing and --normalize-mean/-std, as cutrain's does.
source "$(dirname "$0")/common.sh"
require_python "numpy, torch, torchvision"
export OMP_NUM_THREADS=1
cd "$scratch"
write_cifar d data_batch_1.bin:64 data_batch_2.bin:0 data_batch_3.bin:0 data_batch_4.bin:0 data_batch_5.bin:0
# 64 images, batch 16: 4 steps per epoch. Width 8, as the other reference tests: at width 4 PyTorch 2.11's
# first-step dump corrupted its heap with oneDNN's AVX2 kernels (ONEDNN_MAX_CPU_ISA=AVX2, or a CPU without AVX-512).
ref=("$py" "$repo/bench/pytorch_reference.py" --data d --device cpu --workers 0 --width 8 --batch-size 16 --seed 3
     --cutrain-augment --log-every 1 --normalize-mean 0.5,0.4,0.3 --normalize-std 0.2,0.25,0.3)
"${ref[@]}" --epochs 1 --max-steps 1 --lr 0.1 --weight-decay 0.05 --norm-weight-decay 0 --clip-grad-norm 0.05 \
  --label-smoothing 0.2 --eval-every 0 --export-init init.safetensors --export-final one.safetensors \
  --metrics one.jsonl >one.log 2>&1 || fail "one step: $(tail -n 3 one.log)"
"$py" - <<'PY' || fail "one step with --clip-grad-norm, --label-smoothing, --norm-weight-decay, --normalize-*"
import json
import numpy as np, torch, torch.nn as nn, torch.nn.functional as F
from torch.utils.data import DistributedSampler
import augment_draws, cifar10, reference_trainer, safetensors_io
images, labels = cifar10.load_split("d", train=True)
sampler = DistributedSampler(range(len(labels)), num_replicas=1, rank=0, shuffle=True, seed=3)
sampler.set_epoch(0)
idx = np.fromiter(sampler, np.int64)[:16]
x = torch.from_numpy(augment_draws.augment(images, idx, 0, 3, (0.5, 0.4, 0.3), (0.2, 0.25, 0.3)))
y = torch.from_numpy(labels[idx])
model = reference_trainer.build_model("cifar", width=8)
reference_trainer.load_weights(model, "init.safetensors")
log_p = F.log_softmax(model(x), dim=1)
eps = 0.2  # the target: (1 - eps) on the label, eps / K on every class
loss = ((1 - eps) * -log_p.gather(1, y[:, None])[:, 0] + eps * -log_p.mean(1)).mean()
loss.backward()
params = dict(model.named_parameters())
norm = float(np.sqrt(sum(float((p.grad.double() ** 2).sum()) for p in params.values())))
scale = min(1.0, 0.05 / (norm + 1e-6))
assert scale < 0.1, scale  # the clipping is at work
bn = {f"{m}.{k}" for m, module in model.named_modules() if isinstance(module, nn.BatchNorm2d)
      for k in ("weight", "bias")}
(step,) = [r for r in map(json.loads, open("one.jsonl")) if r["kind"] == "step"]
assert abs(step["loss"] - loss.item()) <= 1e-6 * loss.item(), (step["loss"], loss.item())
assert abs(step["grad_norm"] - norm) <= 1e-5 * norm, (step["grad_norm"], norm)  # before clipping, as cutrain's
got = safetensors_io.load("one.safetensors")
for name, p in params.items():
    d = scale * p.grad.double() + (0.0 if name in bn else 0.05) * p.detach().double()
    update = (-0.1 * (d + 0.9 * d)).numpy()  # Nesterov, momentum 0.9: the first step's buffer is d
    expected = p.detach().double().numpy() + update
    # Within 1e-4 of the update, and the rounding of fp32 weights (batch norm's weights of 1 move by 1e-5 here).
    allowed = 1e-4 * np.abs(update).max() + 2 * np.spacing(np.abs(expected).astype(np.float32))
    assert (np.abs(got[name] - expected) <= allowed).all(), (name, np.abs(got[name] - expected).max())
print(f"one step: loss {loss.item():.6f}, grad norm {norm:.4f} clipped by {scale:.4f}, {len(params)} parameters agree")
PY

"${ref[@]}" --epochs 2 --lr 0.1 --lr-schedule step --lr-milestones 0.25,0.6 --lr-gamma 0.5 --eval-every 0 \
  --metrics step.jsonl >step.log 2>&1 || fail "--lr-milestones: $(tail -n 3 step.log)"
"$py" - <<'PY' || fail "--lr-milestones and --lr-gamma against MultiStepLR"
import json, torch
steps = [r for r in map(json.loads, open("step.jsonl")) if r["kind"] == "step"]
opt = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1)
schedule = torch.optim.lr_scheduler.MultiStepLR(opt, milestones=[int(0.25 * 8), int(0.6 * 8)], gamma=0.5)
rates = []
for _ in range(8):
    rates.append(opt.param_groups[0]["lr"])
    opt.step()
    schedule.step()
assert [r["lr"] for r in steps] == rates, ([r["lr"] for r in steps], rates)
print("step schedule: the rates of MultiStepLR,", rates)
PY

ema_run=(--epochs 3 --warmup-epochs 1 --lr 0.05 --init-from init.safetensors)
"${ref[@]}" "${ema_run[@]}" --model-ema --model-ema-steps 2 --model-ema-decay 0.99 --export-final last.safetensors \
  --metrics ema.jsonl >ema.log 2>&1 || fail "--model-ema: $(tail -n 3 ema.log)"
grep -qE '^== epoch 3/3 \| loss: [0-9.]+ \| train acc: [0-9.]+% \| test acc: [0-9.]+% \| test acc \(EMA\): [0-9.]+% ' \
  ema.log || fail "epoch line with the average's accuracy: $(grep -m1 '== epoch 3' ema.log)"
for k in 5 7 9 11; do
  "${ref[@]}" "${ema_run[@]}" --max-steps "$k" --eval-every 0 --export-final "at$k.safetensors" >"at$k.log" 2>&1 ||
    fail "the model after step $k: $(tail -n 3 "at$k.log")"
done
"$py" - <<'PY' || fail "--model-ema against AveragedModel"
import json
import numpy as np, torch
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn
import cifar10, reference_trainer, safetensors_io

def model_from(path):
    model = reference_trainer.build_model("cifar", width=8)
    reference_trainer.load_weights(model, path)
    return model

# torchvision's decay: 1 - min(1, (1 - 0.99) * world 1 * batch 16 * steps 2 / epochs 3)
decay = 1 - min(1.0, 0.01 * (1 * 16 * 2 / 3))
# Updates after steps 1, 3 (epoch 1, the warm-up: each restarts the average), 5, 7, 9 and 11: the first after the
# warm-up copies.
average = AveragedModel(model_from("init.safetensors"), multi_avg_fn=get_ema_multi_avg_fn(decay), use_buffers=True)
for k in (5, 7, 9, 11):
    average.update_parameters(model_from(f"at{k}.safetensors"))
expected = average.module.state_dict()
got = safetensors_io.load("last.ema.safetensors")
assert set(got) == set(expected), set(got) ^ set(expected)
for name, t in expected.items():
    if t.is_floating_point():
        assert np.allclose(got[name], t.numpy(), rtol=1e-5, atol=1e-7), (name, np.abs(got[name] - t.numpy()).max())
    else:
        assert np.array_equal(got[name], t.numpy()), (name, got[name], t)
last = safetensors_io.load("last.safetensors")
assert not np.allclose(got["fc.weight"], last["fc.weight"], rtol=1e-3), "the average is the model"

# Each evaluation scores the average beside the model, as torchvision's evaluate(model_ema, ...) does.
test_x, test_y = cifar10.load_split("d", train=False)
x = torch.from_numpy(cifar10.normalize(test_x, (0.5, 0.4, 0.3), (0.2, 0.25, 0.3)))
def accuracy(path):
    with torch.no_grad():
        return (model_from(path).eval()(x).argmax(1).numpy() == test_y).mean()
records = [json.loads(line) for line in open("ema.jsonl")]
evals = [r for r in records if r["kind"] == "eval"]
epochs = [r for r in records if r["kind"] == "epoch"]
assert len(evals) == 3 and all("test_acc_ema" in r for r in evals + epochs), records
assert abs(evals[-1]["test_acc_ema"] - accuracy("last.ema.safetensors")) < 1e-9, evals[-1]
assert abs(evals[-1]["test_acc"] - accuracy("last.safetensors")) < 1e-9, evals[-1]
assert epochs[-1]["test_acc_ema"] == evals[-1]["test_acc_ema"], (epochs[-1], evals[-1])
print(f"EMA: decay {decay:.6f}, {len(expected)} tensors agree with AveragedModel; test accuracy "
      f"{evals[-1]['test_acc_ema']:.4f} (the model's {evals[-1]['test_acc']:.4f})")
PY

"${ref[@]}" --label-smoothing 0.2 --init-from init.safetensors --dump-first-step dump.safetensors >dump.log 2>&1 ||
  fail "--dump-first-step: $(tail -n 3 dump.log)"
"$py" - <<'PY' || fail "--dump-first-step with --label-smoothing and --normalize-*"
import torch
import torch.nn.functional as F
import cifar10, reference_trainer, safetensors_io
images, labels = cifar10.load_split("d", train=True)
model = reference_trainer.build_model("cifar", width=8)
reference_trainer.load_weights(model, "init.safetensors")
x = torch.from_numpy(cifar10.normalize(images[:16], (0.5, 0.4, 0.3), (0.2, 0.25, 0.3)))
log_p = F.log_softmax(model(x), dim=1)
y = torch.from_numpy(labels[:16])
loss = (0.8 * -log_p.gather(1, y[:, None])[:, 0] + 0.2 * -log_p.mean(1)).mean().item()
dumped = float(safetensors_io.load("dump.safetensors")["loss"][0])
assert abs(dumped - loss) <= 1e-6 * loss, (dumped, loss)
PY
echo "ok: --clip-grad-norm, --label-smoothing, --norm-weight-decay and --normalize-* in a step computed by hand;"\
  "--lr-milestones as MultiStepLR; --model-ema as AveragedModel, evaluated; --dump-first-step with them"
