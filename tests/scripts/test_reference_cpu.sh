# The PyTorch reference itself, on the CPU, where a python3 has torch and torchvision (Debian's
# python3-torch does; CI usually has none and skips): a few steps write cutrain's metrics schema, the
# GPU-style resident data path runs too, and --export-init / --dump-first-step write torchvision's
# names, which check_parity.py reads back (the gradients against themselves, the weights in torchvision).
source "$(dirname "$0")/common.sh"
require_python "numpy, torch, torchvision"
export OMP_NUM_THREADS=1
ref=("$py" "$repo/bench/pytorch_reference.py" --device cpu --workers 0 --batch-size 16 --warmup-steps 1)
write_cifar "$scratch/d" data_batch_1.bin:40 data_batch_2.bin:40 data_batch_3.bin:16 data_batch_4.bin:0 data_batch_5.bin:0
"${ref[@]}" --data "$scratch/d" --epochs 2 --max-steps 7 --log-every 2 --eval-every 1 --metrics "$scratch/m.jsonl" \
  >"$scratch/out.txt" 2>&1 || fail "training: $(tail -n 3 "$scratch/out.txt")"
grep -q '^== step: \[  2/6\] \[1/2\] | loss: [0-9.]* | acc: [0-9.]*% | [0-9]* img/s | [0-9.]* ms/step$' "$scratch/out.txt" ||
  fail "step line shape: $(grep -m1 '== step' "$scratch/out.txt")"
"${ref[@]}" --data "$scratch/d" --epochs 1 --max-steps 2 --data-on-gpu --amp bf16 --channels-last \
  --metrics "$scratch/g.jsonl" >"$scratch/out2.txt" 2>&1 || fail "resident data, bf16: $(tail -n 3 "$scratch/out2.txt")"
"$py" - "$scratch/m.jsonl" "$scratch/g.jsonl" <<'PY'
import json, sys
records = [json.loads(l) for l in open(sys.argv[1])]
steps = [r for r in records if r["kind"] == "step"]
epochs = [r for r in records if r["kind"] == "epoch"]
(summary,) = [r for r in records if r["kind"] == "summary"]
# 96 images, batch 16: 6 steps per epoch; 7 steps in all: epoch 2 stops after one step.
assert [r["global_step"] for r in steps] == [2, 4, 6, 7], steps
assert set(steps[0]) == {"kind", "epoch", "step", "steps_per_epoch", "global_step", "loss", "acc", "lr",
                         "images_per_s", "ms_per_step"}, steps[0]
assert steps[0]["steps_per_epoch"] == 6 and 0 <= steps[0]["acc"] <= 1 and steps[0]["lr"] == 0.002
assert [e["epoch"] for e in epochs] == [1, 2] and all("test_acc" in e and "epoch_time_s" in e for e in epochs)
for key in ("wall_time_s", "mean_images_per_s", "best_test_acc", "final_test_acc", "peak_memory_bytes",
            "world_size", "precision", "stem", "batch_size"):
    assert key in summary, key
assert summary["precision"] == "fp32" and summary["world_size"] == 1 and summary["batch_size"] == 16
g = [json.loads(l) for l in open(sys.argv[2])]
assert g[-1]["kind"] == "summary" and g[-1]["precision"] == "bf16" and g[-1]["data_on_gpu"], g[-1]
PY
"${ref[@]}" --data "$scratch/d" --export-init "$scratch/init.safetensors" \
  --dump-first-step "$scratch/first.safetensors" --dump-fp64 "$scratch/first64.safetensors" >/dev/null ||
  fail "export/dump: exit $?"
"$py" - "$scratch" <<'PY'
import sys, torchvision, torch, numpy as np
import safetensors_io, cifar10
folder = sys.argv[1]
init, first = safetensors_io.load(f"{folder}/init.safetensors"), safetensors_io.load(f"{folder}/first.safetensors")
tv = torchvision.models.resnet18(num_classes=10).state_dict()
assert set(init) == set(tv), set(init) ^ set(tv)
assert init["conv1.weight"].shape == (64, 3, 3, 3) and init["bn1.num_batches_tracked"].dtype == np.int64
params = {n for n, _ in torchvision.models.resnet18(num_classes=10).named_parameters()}
assert set(first) == {"loss"} | {"grad." + n for n in params}, set(first) ^ ({"loss"} | {"grad." + n for n in params})
assert first["loss"].shape == (1,) and 1.0 < first["loss"][0] < 5.0, first["loss"]
assert first["grad.fc.weight"].shape == (10, 512)
first64 = safetensors_io.load(f"{folder}/first64.safetensors")
assert set(first64) == set(first) and first64["grad.fc.weight"].dtype == np.float64
assert abs(first64["loss"][0] - first["loss"][0]) < 1e-4, (first64["loss"], first["loss"])
PY
[ $? = 0 ] || fail "exported files"
"$py" "$repo/bench/check_parity.py" grads "$scratch/first.safetensors" "$scratch/first.safetensors" \
  --fp64 "$scratch/first64.safetensors" >/dev/null || fail "a dump against itself, float64 as yardstick"
acc="$("$py" "$repo/bench/check_parity.py" checkpoint --data "$scratch/d" --checkpoint "$scratch/init.safetensors" \
  --cutrain-acc 0 --tolerance 100 | sed -n 's/.*torchvision \([0-9.]*\)%.*/\1/p')"
[ -n "$acc" ] || fail "check_parity.py checkpoint printed no accuracy"
echo "ok: metrics schema, resident-data bf16 path, torchvision names in the exported weights and gradients (acc $acc%)"
