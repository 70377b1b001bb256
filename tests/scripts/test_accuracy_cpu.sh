# bench/accuracy.sh end to end on the CPU, as small as it goes (2 seeds, 2 epochs of 96 images at width 4):
# both programs train from each seed's exported initial weights, with the options of torchvision's reference
# script given, and the table and accuracy.json come out.
# Needs torch and torchvision: the project's environment (scripts/setup.sh --with-tests) has torch 2.11.
source "$(dirname "$0")/common.sh"
require_python "numpy, torch, torchvision"
[ -x "$bin/cutrain" ] || skip "no cutrain binary in $bin"
export OMP_NUM_THREADS=1 XDG_CACHE_HOME="$scratch/cache" PYTHON="$py"
bash "$repo/bench/accuracy.sh" --bin "$bin" --out "$scratch/out" --device cpu --seeds 2 --train 96 --test 32 \
  --epochs 2 --width 4 --batch-size 16 --label-smoothing 0.1 --model-ema >"$scratch/log" 2>&1 ||
  fail "accuracy.sh: $(tail -n 3 "$scratch/log")"
cat "$scratch/log"
o="$scratch/out"
ls "$XDG_CACHE_HOME"/cutrain/synthetic-v*-96-32/test_batch.bin >/dev/null || fail "not cutrain's cached synthetic data"
grep -qE "^ +2 +[0-9.]+ ± [0-9.]+% +[0-9.]+ ± [0-9.]+% +[-+][0-9.]+ pts$" "$o/table.txt" || fail "no epoch-2 row"
grep -qE "^final: cutrain .*(within|OUTSIDE) the seed-to-seed spread" "$o/table.txt" || fail "no final line"
"$py" - "$o" <<'PY' || fail "runs or accuracy.json"
import json, sys
import safetensors_io
o = sys.argv[1]
r = json.load(open(f"{o}/accuracy.json"))
assert r["seeds"] == {"cutrain": 2, "pytorch": 2} and [e["epoch"] for e in r["epochs"]] == [1, 2], r
init = [safetensors_io.load(f"{o}/init-seed{s}.safetensors")["conv1.weight"] for s in (0, 1)]
assert init[0].shape == (4, 3, 3, 3) and (init[0] != init[1]).any(), "each seed draws its own weights"
for s in (0, 1):
    command = [l for l in open(f"{o}/accuracy.log") if l.startswith(f"== cutrain-seed{s}: ")][0]
    assert f"--init-from {o}/init-seed{s}.safetensors" in command and "--width 4" in command, command
    for program in ("cutrain", "pytorch"):
        command = [l for l in open(f"{o}/accuracy.log") if l.startswith(f"== {program}-seed{s}: ")][0]
        assert "--label-smoothing 0.1" in command and " --model-ema" in command, command
PY
one_line_error "accuracy.sh --seeds 0" 2 bash "$repo/bench/accuracy.sh" --seeds 0
one_line_error "accuracy.sh --lr-milestones 0.5,x" 2 bash "$repo/bench/accuracy.sh" --lr-milestones 0.5,x
echo "ok: accuracy.sh trains both programs from the same weights per seed, with the same options, and prints the table"
