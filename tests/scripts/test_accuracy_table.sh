# bench/accuracy_table.py on hand-made metrics files: per-epoch mean and sample standard deviation over seeds,
# the difference of the final means judged against 2 standard errors of the difference (within, and outside),
# Welch's t-test on the final accuracies (t = 2, 10 degrees of freedom is p = 0.0734 in any table), the
# per-seed finals and the seeds near chance after epoch 2, and one-line errors for bad input. Standard library only.
source "$(dirname "$0")/common.sh"
python3 - "$scratch" <<'PY'
import json, sys
folder = sys.argv[1]

def run(path, accs, training_time):
    with open(path, "w") as f:
        for epoch, acc in enumerate(accs, 1):
            f.write(json.dumps({"kind": "epoch", "epoch": epoch, "test_acc": acc}) + "\n")
        f.write(json.dumps({"kind": "summary", "training_time_s": training_time}) + "\n")

# Final accuracies: a 0.70 0.72 0.74 (mean 0.72, std 0.02), b 0.69 0.70 0.71 (mean 0.70, std 0.01):
# difference 0.02, spread 2 sqrt(0.02^2/3 + 0.01^2/3) = 0.02582: within. c 0.62 0.63 0.64: 0.09, outside.
for i, (a, b, c) in enumerate(zip([0.70, 0.72, 0.74], [0.69, 0.70, 0.71], [0.62, 0.63, 0.64])):
    run(f"{folder}/a{i}.jsonl", [0.3 + i / 100, a], 10.0 + i)
    run(f"{folder}/b{i}.jsonl", [0.3, b], 20.0)
    run(f"{folder}/c{i}.jsonl", [0.3, c], 20.0)
with open(f"{folder}/noeval.jsonl", "w") as f:
    f.write(json.dumps({"kind": "epoch", "epoch": 1, "test_acc": None}) + "\n")
PY
t=(python3 "$repo/bench/accuracy_table.py")
"${t[@]}" cutrain="$scratch/a0.jsonl" pytorch="$scratch/b0.jsonl" cutrain="$scratch/a1.jsonl" \
  pytorch="$scratch/b1.jsonl" cutrain="$scratch/a2.jsonl" pytorch="$scratch/b2.jsonl" --json "$scratch/r.json" \
  >"$scratch/within" || fail "accuracy_table.py: exit $?"
cat "$scratch/within"
grep -qE "^ +2 +72\.00 ± 2\.00% +70\.00 ± 1\.00% +\+2\.00 pts$" "$scratch/within" || fail "epoch 2 row"
grep -qE "^ +1 +31\.00 ± 1\.00% +30\.00 ± 0\.00% +\+1\.00 pts$" "$scratch/within" || fail "epoch 1 row"
grep -q "difference +2.00 points, within the seed-to-seed spread (2 standard errors of the difference: 2.58 points)" \
  "$scratch/within" || fail "final line: $(grep final "$scratch/within")"
grep -q "mean training time: cutrain 11.0 s, pytorch 20.0 s" "$scratch/within" || fail "training time line"
# a: s^2/n = 0.0004/3, b: 0.0001/3: t = 0.02/sqrt(0.0005/3) = 1.549, df = 2.94 (Welch-Satterthwaite).
grep -q "Welch's t-test: t = +1.549, 2.9 degrees of freedom, p = 0.22[0-9] (not significant at 0.05)" \
  "$scratch/within" || fail "Welch line: $(grep Welch "$scratch/within")"
grep -q "^cutrain per seed: 70.00 72.00 74.00$" "$scratch/within" || fail "per-seed line"
grep -q "^near chance after epoch 2: cutrain 0 of 3 seeds, pytorch 0 of 3$" "$scratch/within" || fail "near-chance line"
python3 -c "
import sys
sys.path.insert(0, sys.argv[1])
from accuracy_table import incomplete_beta
p = incomplete_beta(5, 0.5, 10 / (10 + 2 * 2))  # two-sided p of t = 2 with 10 degrees of freedom
assert abs(p - 0.07339) < 1e-4, p
" "$repo/bench" || fail "Student's t p-value"
python3 -c "
import json, sys
r = json.load(open(sys.argv[1]))
assert r['within_spread'] is True and abs(r['spread'] - 0.0258199) < 1e-6 and r['seeds'] == {'cutrain': 3, 'pytorch': 3}, r
" "$scratch/r.json" || fail "accuracy.json"
"${t[@]}" cutrain="$scratch/a0.jsonl" pytorch="$scratch/c0.jsonl" cutrain="$scratch/a1.jsonl" \
  pytorch="$scratch/c1.jsonl" cutrain="$scratch/a2.jsonl" pytorch="$scratch/c2.jsonl" >"$scratch/outside" ||
  fail "accuracy_table.py: exit $?"
grep -q "difference +9.00 points, OUTSIDE the seed-to-seed spread" "$scratch/outside" ||
  fail "a 9-point gap passed: $(grep final "$scratch/outside")"
grep -q "Welch's t-test: t = +6.971, .* (significant at 0.05)" "$scratch/outside" ||
  fail "a 9-point gap not significant: $(grep Welch "$scratch/outside")"
one_line_error "three programs" 2 "${t[@]}" a="$scratch/a0.jsonl" b="$scratch/b0.jsonl" c="$scratch/c0.jsonl"
one_line_error "no test accuracy" 1 "${t[@]}" a="$scratch/a0.jsonl" b="$scratch/noeval.jsonl"
grep -q "noeval.jsonl: no epoch with a test accuracy" "$scratch/stderr" || fail "$(cat "$scratch/stderr")"
one_line_error "a missing file" 1 "${t[@]}" a="$scratch/a0.jsonl" b="$scratch/missing.jsonl"
echo "ok: mean ± std per epoch, the spread verdict both ways, accuracy.json, one-line errors"
