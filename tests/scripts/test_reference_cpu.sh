# The PyTorch reference itself, on the CPU, with torch and torchvision (the project's environment,
# scripts/setup.sh --with-tests: torch 2.11): a few steps write cutrain's metrics schema on
# cutrain's clock and learning-rate schedule, at another width; evaluation every N steps, with --tta flip,
# to a target; the GPU-style resident data path runs too, and --export-init / --dump-first-step write
# torchvision's names, which check_parity.py reads back (the gradients against themselves, the weights in
# torchvision).
source "$(dirname "$0")/common.sh"
require_python "numpy, torch, torchvision"
export OMP_NUM_THREADS=1
ref=("$py" "$repo/bench/pytorch_reference.py" --device cpu --workers 0 --batch-size 16)
write_cifar "$scratch/d" data_batch_1.bin:40 data_batch_2.bin:40 data_batch_3.bin:16 data_batch_4.bin:0 data_batch_5.bin:0
"${ref[@]}" --data "$scratch/d" --epochs 2 --max-steps 7 --log-every 2 --eval-every 1 --metrics "$scratch/m.jsonl" \
  --lr-schedule cosine --warmup-epochs 0.5 --width 4 --export-init "$scratch/init4.safetensors" \
  >"$scratch/out.txt" 2>&1 || fail "training: $(tail -n 3 "$scratch/out.txt")"
"${ref[@]}" --data "$scratch/d" --epochs 2 --log-every 3 --eval-every-steps 3 --tta flip --target-accuracy 1 \
  --width 4 --init-from "$scratch/init4.safetensors" --metrics "$scratch/t.jsonl" >"$scratch/out3.txt" 2>&1 ||
  fail "to a target: $(tail -n 3 "$scratch/out3.txt")"
grep -q "^target 100.00% test accuracy not reached in 2 epochs (best " "$scratch/out3.txt" ||
  fail "no line about the unreached target: $(tail -n 2 "$scratch/out3.txt")"
grep -qE '^== step: \[  2/6\] \[1/2\] \| loss: [0-9.]+ \| grad norm: [0-9.]+ \| train acc: [0-9.]+% \| [0-9]+ img/s \| [0-9.]+ ms/step \| data: [0-9.]+ ms/step \| max mem: [1-9][0-9]* MiB \| lr: [0-9.e-]+ \| elapsed: [0-9]+:[0-9]{2}:[0-9]{2} \| eta: [0-9]+:[0-9]{2}:[0-9]{2}$' "$scratch/out.txt" ||
  fail "step line shape: $(grep -m1 '== step' "$scratch/out.txt")"
grep -qE '^== epoch 1/2 \| loss: [0-9.]+ \| train acc: [0-9.]+% \| test acc: [0-9.]+% \| [0-9.]+ s \| [0-9]+ img/s$' "$scratch/out.txt" ||
  fail "epoch line shape: $(grep -m1 '== epoch' "$scratch/out.txt")"
"${ref[@]}" --data "$scratch/d" --epochs 1 --max-steps 2 --data-on-gpu --amp bf16 --channels-last --width 4 \
  --metrics "$scratch/g.jsonl" >"$scratch/out2.txt" 2>&1 || fail "resident data, bf16: $(tail -n 3 "$scratch/out2.txt")"
"$py" - "$scratch/m.jsonl" "$scratch/g.jsonl" "$scratch/t.jsonl" <<'PY'
import json, sys
import lr_schedule
records = [json.loads(l) for l in open(sys.argv[1])]
steps = [r for r in records if r["kind"] == "step"]
epochs = [r for r in records if r["kind"] == "epoch"]
(summary,) = [r for r in records if r["kind"] == "summary"]
# 96 images, batch 16: 6 steps per epoch; 7 steps in all: epoch 2 stops after one step.
assert [r["global_step"] for r in steps] == [2, 4, 6, 7], steps
assert set(steps[0]) == {"kind", "epoch", "step", "steps_per_epoch", "global_step", "loss", "grad_norm", "acc", "lr",
                         "images_per_s", "ms_per_step", "data_ms_per_step", "peak_memory_bytes", "elapsed_s", "eta_s",
                         "time"}, steps[0]
assert all(a["time"] <= b["time"] for a, b in zip(records, records[1:])), records
assert steps[-1]["eta_s"] == 0 and 0 < steps[0]["elapsed_s"] <= steps[-1]["elapsed_s"], steps
assert steps[0]["steps_per_epoch"] == 6 and 0 <= steps[0]["acc"] <= 1
# cutrain's cosine schedule over --epochs (12 steps), warm-up 0.5 epochs (3 steps), even though it stops at 7
for r in steps:
    assert abs(r["lr"] - lr_schedule.lr_at("cosine", 0.002, 12, 3, r["global_step"] - 1)) < 1e-12, r
    assert r["data_ms_per_step"] >= 0 and r["peak_memory_bytes"] > 0, r  # cutrain's fields: the resident set here
assert [e["epoch"] for e in epochs] == [1, 2] and all("test_acc" in e and "epoch_time_s" in e for e in epochs)
# a step line is its interval's mean, as cutrain's: epoch 1's three intervals of 2 steps average to the epoch's loss
assert abs(sum(r["loss"] for r in steps[:3]) / 3 - epochs[0]["loss"]) < 1e-5, (steps, epochs)
for key in ("wall_time_s", "training_time_s", "eval_time_s", "mean_images_per_s", "tta", "target_acc",
            "target_reached", "time_to_target_s", "target_epochs", "target_steps", "best_test_acc", "final_test_acc",
            "peak_memory_bytes", "world_size", "precision", "stem", "batch_size"):
    assert key in summary, key
assert summary["precision"] == "fp32" and summary["world_size"] == 1 and summary["batch_size"] == 16
assert summary["tta"] == "none" and summary["target_acc"] is None and summary["target_reached"] is None
# cutrain's clock: the logged intervals leave evaluation out, and the summary's images/s is theirs after the first
seconds = [16 * (r["global_step"] - p) / r["images_per_s"] for p, r in zip([0, 2, 4, 6], steps)]
evals = [r for r in records if r["kind"] == "eval"]
assert len(evals) == 2 and all(e["epoch_end"] for e in evals), evals
assert sum(seconds) <= summary["training_time_s"] + 1e-6, (seconds, summary)
assert abs(summary["eval_time_s"] - sum(e["eval_time_s"] for e in evals)) < 0.05, (evals, summary)
assert summary["training_time_s"] + summary["eval_time_s"] <= summary["wall_time_s"], summary
warm_rate = 16 * 5 / sum(seconds[1:])
assert abs(summary["mean_images_per_s"] - warm_rate) <= 1e-6 * warm_rate, (summary, warm_rate)
g = [json.loads(l) for l in open(sys.argv[2])]
assert g[-1]["kind"] == "summary" and g[-1]["precision"] == "bf16" and g[-1]["data_on_gpu"], g[-1]
# every 3 steps and at the end (6 steps per epoch), with test-time augmentation, not reaching 100%
t = [json.loads(l) for l in open(sys.argv[3])]
assert [r["global_step"] for r in t if r["kind"] == "eval"] == [3, 6, 9, 12], t
assert [r["epoch_end"] for r in t if r["kind"] == "eval"] == [False, True, False, True], t
assert t[-1]["tta"] == "flip" and t[-1]["target_acc"] == 1 and t[-1]["target_reached"] is False, t[-1]
assert t[-1]["time_to_target_s"] is None and t[-1]["best_test_acc"] < 1, t[-1]
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
"$py" - "$scratch/init4.safetensors" <<'PY' || fail "the width-4 weights"
import sys, safetensors_io
w = safetensors_io.load(sys.argv[1])
assert w["conv1.weight"].shape == (4, 3, 3, 3) and w["layer4.1.conv2.weight"].shape == (32, 32, 3, 3), w["conv1.weight"].shape
assert w["fc.weight"].shape == (10, 32) and w["layer2.0.downsample.0.weight"].shape == (8, 4, 1, 1)
PY
echo "ok: metrics schema on cutrain's clock and schedule, evaluation by steps with TTA to a target, width 4,"\
  "resident-data bf16 path, torchvision names in the exported weights and gradients (acc $acc%)"
