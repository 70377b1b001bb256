# bench/summarize.py on hand-made metrics files: the medians after warm-up, the ratios against the cutrain
# run of the same precision, repeated runs pooled, time to target, results.json, and one-line errors for bad
# files.
source "$(dirname "$0")/common.sh"
python3 - "$scratch" <<'PY'
import json, sys
folder = sys.argv[1]

def run(path, rates, precision, test_acc, peak, epoch_times, time_to_target=None):
    """Step records every 10 steps with the given images/s (ms/step = 256 / rate), then epochs and a summary
    (of a run to a 90% target when time_to_target is given: its time, or 0 for a run that missed it)."""
    with open(path, "w") as f:
        for i, rate in enumerate(rates, 1):
            f.write(json.dumps({"kind": "step", "epoch": 1, "step": 10 * i, "steps_per_epoch": 100,
                                "global_step": 10 * i, "loss": 2.0, "acc": 0.2, "lr": 0.002,
                                "images_per_s": rate, "ms_per_step": 256e3 / rate}) + "\n")
        for e, t in enumerate(epoch_times, 1):
            f.write(json.dumps({"kind": "epoch", "epoch": e, "global_step": 100 * e, "loss": 1.0, "acc": 0.5,
                                "lr": 0.002, "images_per_s": 1.0, "epoch_time_s": t, "test_acc": test_acc,
                                "peak_memory_bytes": peak}) + "\n")
        target = {}
        if time_to_target is not None:
            target = {"target_acc": 0.9, "target_reached": time_to_target > 0,
                      "time_to_target_s": time_to_target if time_to_target > 0 else None}
        f.write(json.dumps({"kind": "summary", "wall_time_s": 9.0, "mean_images_per_s": 1.0, "best_test_acc": test_acc,
                            "final_test_acc": test_acc, "peak_memory_bytes": peak, "world_size": 1,
                            "precision": precision, "stem": "cifar", "batch_size": 256, **target}) + "\n")

# warm-up (global steps 10..30 with --warmup-steps 30) is slow and must not count
run(f"{folder}/c16.jsonl", [100, 100, 100, 4000, 4200, 4000, 3800], "bf16", 0.90, 3 * 2**30, [9.0, 2.0, 2.2], 100.0)
run(f"{folder}/c32.jsonl", [100, 100, 100, 2000, 2000, 2000], "fp32", 0.91, 2**30, [3.0, 4.0], 0)
run(f"{folder}/t16a.jsonl", [100, 100, 100, 1000, 1000], "bf16", 0.89, 2**31, [20.0, 8.0], 300.0)
run(f"{folder}/t16b.jsonl", [100, 100, 100, 3000], "bf16", 0.87, 2**31, [20.0, 8.0], 0)
run(f"{folder}/t32.jsonl", [100, 100, 100, 500, 500, 500], "fp32", 0.91, 2**30, [30.0, 16.0], 40.0)
with open(f"{folder}/parity.json", "w") as f:
    json.dump({"first_step": {"name": "first-step gradients", "passed": True, "detail": "max 1e-5"}}, f)
with open(f"{folder}/bad.jsonl", "w") as f:
    f.write('{"kind": "step"}\nnot json\n')
with open(f"{folder}/empty.jsonl", "w") as f:
    f.write(json.dumps({"kind": "summary"}) + "\n")
PY
s="$repo/bench/summarize.py"
python3 "$s" cutrain-bf16="$scratch/c16.jsonl" cutrain-fp32="$scratch/c32.jsonl" torch-bf16="$scratch/t16a.jsonl" \
  torch-bf16="$scratch/t16b.jsonl" torch-fp32="$scratch/t32.jsonl" --warmup-steps 30 --parity "$scratch/parity.json" \
  --out "$scratch/out" --note gpu=test >"$scratch/table" || fail "summarize.py: exit $?"
cat "$scratch/table"
grep -q "first-step gradients: max 1e-5 -> PASS" "$scratch/table" || fail "parity line missing"
python3 - "$scratch/out/results.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
runs, speedups = r["runs"], r["speedups"]
def near(a, b): return abs(a - b) <= 1e-9 * max(1, abs(b))
assert near(runs["cutrain-bf16"]["images_per_s"], 4000), runs["cutrain-bf16"]   # median of 4000 4200 4000 3800
assert near(runs["cutrain-bf16"]["ms_per_step"], 64.0), runs["cutrain-bf16"]
assert near(runs["cutrain-bf16"]["epoch_time_s"], 2.1), runs["cutrain-bf16"]     # first epoch left out
assert runs["torch-bf16"]["repeats"] == 2 and near(runs["torch-bf16"]["images_per_s"], 1000)  # pooled 1000 1000 3000
assert near(runs["torch-bf16"]["test_acc"], 0.88), runs["torch-bf16"]            # mean over repeats
assert runs["cutrain-bf16"]["peak_memory_bytes"] == 3 * 2**30
assert set(speedups) == {"torch-bf16", "torch-fp32"}, speedups
assert speedups["torch-bf16"]["cutrain_run"] == "cutrain-bf16" and near(speedups["torch-bf16"]["speedup"], 4.0)
assert speedups["torch-fp32"]["cutrain_run"] == "cutrain-fp32" and near(speedups["torch-fp32"]["speedup"], 4.0)
assert r["parity"]["first_step"]["passed"] and r["notes"]["gpu"] == "test" and r["warmup_steps"] == 30
# time to target: the median over the repeats that reached it; a ratio only where both runs reached it
assert runs["torch-bf16"]["time_to_target_s"] == 300.0 and runs["torch-bf16"]["target_reached"] == 1
assert runs["cutrain-fp32"]["time_to_target_s"] is None and runs["cutrain-fp32"]["target_reached"] == 0
assert near(speedups["torch-bf16"]["time_to_target_speedup"], 3.0), speedups
assert "time_to_target_speedup" not in speedups["torch-fp32"], speedups
PY
grep -qE "^torch-bf16 +bf16 +1,000 .* 4\.00x +300\.0 s \(1/2\) +3\.00x$" "$scratch/table" ||
  fail "table row for torch-bf16: $(grep torch-bf16 "$scratch/table")"
grep -qE "^cutrain-fp32 .* not reached +-$" "$scratch/table" || fail "table row for cutrain-fp32: $(grep cutrain-fp32 "$scratch/table")"
grep -q " to 90% " "$scratch/table" || fail "no time-to-target column: $(head -n 1 "$scratch/table")"
one_line_error "summarize.py on a bad line" 1 python3 "$s" x="$scratch/bad.jsonl"
grep -q "bad.jsonl:2" "$scratch/stderr" || fail "the bad line is not named: $(cat "$scratch/stderr")"
one_line_error "summarize.py without step records" 1 python3 "$s" x="$scratch/empty.jsonl"
one_line_error "summarize.py on a missing file" 1 python3 "$s" x="$scratch/missing.jsonl"
one_line_error "summarize.py NAME without =FILE" 2 python3 "$s" just-a-name
echo "ok: medians, pooled repeats, ratios, results.json and errors"
