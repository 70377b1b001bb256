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
echo "ok: the reference's schedules are cutrain's, step by step"
