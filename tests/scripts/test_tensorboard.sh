# `cutrain train --tensorboard DIR` read back by TensorBoard's own reader (tensorboard.backend.event_processing,
# from the project's environment): every scalar at every step where the metrics JSONL has a record, with the
# same values (stored as float32): train/loss, train/accuracy, train/grad_norm, train/lr and train/images_per_s at
# each logged step, test/accuracy and test/loss at each evaluation. tests/test_app_tensorboard.cpp checks the records' bytes.
source "$(dirname "$0")/common.sh"
require_python "tensorboard.backend.event_processing.event_accumulator"
[ -x "$bin/cutrain" ] || skip "no cutrain binary in $bin"
cd "$scratch"
"$bin/cutrain" make-synthetic --out data --train 64 --test 32 >/dev/null
"$bin/cutrain" train --data data --device cpu --width 4 --batch-size 16 --epochs 2 --log-every 3 --eval-every-steps 2 \
  --lr-schedule cosine --metrics m.jsonl --tensorboard tb >train.log 2>&1 || fail "training: $(tail -n 3 train.log)"
"$py" - <<'PY' || fail "TensorBoard's reader disagrees with the metrics"
import glob, json
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
(path,) = glob.glob("tb/events.out.tfevents.*")
events = EventAccumulator(path)
events.Reload()
records = [json.loads(line) for line in open("m.jsonl")]
expected = {}
for r in records:
    if r["kind"] == "step":
        for tag, key in [("train/loss", "loss"), ("train/accuracy", "acc"), ("train/grad_norm", "grad_norm"),
                         ("train/lr", "lr"), ("train/images_per_s", "images_per_s")]:
            expected.setdefault(tag, []).append((r["global_step"], r[key]))
    elif r["kind"] == "eval":
        expected.setdefault("test/accuracy", []).append((r["global_step"], r["test_acc"]))
        expected.setdefault("test/loss", []).append((r["global_step"], r["test_loss"]))
assert sorted(events.Tags()["scalars"]) == sorted(expected), events.Tags()["scalars"]
for tag, points in expected.items():
    got = [(e.step, e.value) for e in events.Scalars(tag)]
    assert [s for s, _ in got] == [s for s, _ in points], (tag, got, points)
    assert all(abs(g - v) <= 1e-6 * max(abs(v), 1e-30) for (_, g), (_, v) in zip(got, points)), (tag, got, points)
# 4 steps an epoch, 8 in all: logged at 1 (the first, at once), 3, 4 (epoch end), 7 and 8; evaluated every 2 steps
assert [s for s, _ in expected["train/loss"]] == [1, 3, 4, 7, 8], expected["train/loss"]
assert [s for s, _ in expected["test/accuracy"]] == [2, 4, 6, 8], expected["test/accuracy"]
lrs = [v for _, v in expected["train/lr"]]
assert lrs == sorted(lrs, reverse=True) and lrs[0] > lrs[-1], lrs  # cosine: falling
PY
echo "ok: TensorBoard reads back every scalar of the metrics, at the same steps"
