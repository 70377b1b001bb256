# The PyTorch reference's learning rate per step (bench/lr_schedule.py) is cutrain's (kernels/lr_schedule.h):
# every schedule, with a warm-up, step by step, against the rates cutrain's step records logged. No torch.
source "$(dirname "$0")/common.sh"
[ -x "$bin/cutrain" ] || skip "no cutrain binary in $bin"
cd "$scratch"
"$bin/cutrain" make-synthetic --out data --train 64 --test 16 --difficulty 0 >/dev/null
for schedule in constant cosine onecycle step; do
  # 64 images, batch 8: 8 steps per epoch, 3 epochs; warm-up 0.5 epochs = 4 steps
  "$bin/cutrain" train --data data --device cpu --width 2 --batch-size 8 --workers 1 --epochs 3 --lr 0.1 \
    --lr-schedule "$schedule" --warmup-epochs 0.5 --log-every 1 --eval-every 0 --metrics "$schedule.jsonl" \
    >"$schedule.log" 2>&1 || fail "cutrain --lr-schedule $schedule: $(tail -n 3 "$schedule.log")"
done
python3 - <<'PY' || fail "the rates differ"
import json
import lr_schedule
for kind in lr_schedule.KINDS:
    steps = [r for r in map(json.loads, open(f"{kind}.jsonl")) if r["kind"] == "step"]
    assert len(steps) == 24, (kind, len(steps))
    for r in steps:  # a record at global step g logs the rate of step g - 1 (0-based), the last it ran
        expected = lr_schedule.lr_at(kind, 0.1, 24, 4, r["global_step"] - 1)
        assert abs(r["lr"] - expected) <= 1e-6 * expected, (kind, r["global_step"], r["lr"], expected)
    print(f"{kind}: 24 steps agree, {steps[0]['lr']:.4g} .. {steps[-1]['lr']:.4g}")
PY
# --lr-milestones and --lr-gamma, against PyTorch's MultiStepLR with milestones floor(m * 24) (its closed form,
# gamma ** bisect_right(milestones, t)) and against the twin; steps 4, 12 and 21 of 24.
"$bin/cutrain" train --data data --device cpu --width 2 --batch-size 8 --workers 1 --epochs 3 --lr 0.1 \
  --lr-schedule step --lr-milestones 0.2,0.5,0.9 --lr-gamma 0.5 --log-every 1 --eval-every 0 \
  --metrics milestones.jsonl >milestones.log 2>&1 || fail "cutrain --lr-milestones: $(tail -n 3 milestones.log)"
python3 - <<'PY' || fail "the rates of --lr-milestones differ"
import bisect
import json
import lr_schedule
steps = [r for r in map(json.loads, open("milestones.jsonl")) if r["kind"] == "step"]
assert len(steps) == 24, len(steps)
for r in steps:
    t = r["global_step"] - 1
    multistep = 0.1 * 0.5 ** bisect.bisect_right([4, 12, 21], t)
    twin = lr_schedule.lr_at("step", 0.1, 24, 0, t, milestones=(0.2, 0.5, 0.9), gamma=0.5)
    assert abs(r["lr"] - multistep) <= 1e-6 * multistep and twin == multistep, (t, r["lr"], multistep, twin)
print("step, milestones 0.2,0.5,0.9, gamma 0.5: 24 steps agree with MultiStepLR")
PY
echo "ok: the reference's schedules are cutrain's, step by step"
