# bench/safetensors_io.py reads a file laid out by hand from the format's description (F32, BF16, I64,
# a 0-d tensor) and round-trips its own files; bench/check_parity.py grads passes equal dumps, fails a
# gradient off by more than --rtol (naming it), and refuses mismatched files in one line.
source "$(dirname "$0")/common.sh"
require_python numpy
"$py" - "$scratch" <<'PY'
import json, struct, sys, numpy as np, safetensors_io
folder = sys.argv[1]
# By hand: header length (u64 LE), JSON header, then the bytes. bf16 1.5 = 0x3FC0, -2.0 = 0xC000.
header = {"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
          "b": {"dtype": "BF16", "shape": [2, 1], "data_offsets": [8, 12]},
          "n": {"dtype": "I64", "shape": [], "data_offsets": [12, 20]},
          "__metadata__": {"format": "pt"}}
text = json.dumps(header).encode()
data = struct.pack("<2f", 0.25, -3.0) + struct.pack("<2H", 0x3FC0, 0xC000) + struct.pack("<q", 7)
with open(f"{folder}/hand.safetensors", "wb") as f:
    f.write(struct.pack("<Q", len(text)) + text + data)
t = safetensors_io.load(f"{folder}/hand.safetensors")
assert t["a"].tolist() == [0.25, -3.0] and t["b"].tolist() == [[1.5], [-2.0]] and t["b"].dtype == np.float32
assert t["n"].shape == () and int(t["n"]) == 7 and t["n"].dtype == np.int64
# Round trip through this module's writer.
x = {"w": np.arange(24, dtype=np.float32).reshape(2, 3, 2, 2), "k": np.array(5, dtype=np.int64)}
safetensors_io.save(x, f"{folder}/rt.safetensors")
y = safetensors_io.load(f"{folder}/rt.safetensors")
assert y["w"].shape == (2, 3, 2, 2) and np.array_equal(x["w"], y["w"]) and y["k"].shape == () and int(y["k"]) == 5
(n,) = struct.unpack("<Q", open(f"{folder}/rt.safetensors", "rb").read(8))
assert n % 8 == 0, n   # data 8-byte aligned
# A truncated file and a header that points past the data are one-line errors.
open(f"{folder}/short.safetensors", "wb").write(b"\x10\0\0")
blob = open(f"{folder}/rt.safetensors", "rb").read()
open(f"{folder}/cut.safetensors", "wb").write(blob[:-10])
for bad in ("short", "cut"):
    try:
        safetensors_io.load(f"{folder}/{bad}.safetensors")
        raise AssertionError(f"{bad}: no error")
    except ValueError as e:
        assert f"{bad}.safetensors" in str(e) and "\n" not in str(e), e
# Gradient dumps as both programs write them.
rng = np.random.default_rng(0)
ref = {"loss": np.array([2.3], np.float32), "grad.conv1.weight": rng.normal(size=(64, 3, 3, 3)).astype(np.float32),
       "grad.fc.bias": rng.normal(size=(10,)).astype(np.float32)}
safetensors_io.save(ref, f"{folder}/torch.safetensors")
near = dict(ref, **{"grad.conv1.weight": ref["grad.conv1.weight"] * np.float32(1 + 5e-4)})
safetensors_io.save(near, f"{folder}/near.safetensors")
far = dict(ref, **{"grad.fc.bias": ref["grad.fc.bias"] * np.float32(1 + 2e-3)})
safetensors_io.save(far, f"{folder}/far.safetensors")
safetensors_io.save({k: v for k, v in ref.items() if k != "grad.fc.bias"}, f"{folder}/missing.safetensors")
safetensors_io.save(dict(ref, **{"grad.fc.bias": np.zeros((10, 1), np.float32)}), f"{folder}/shape.safetensors")
# A float64 yardstick 1% away from PyTorch's fp32 dump on conv1 only: cutrain may then err up to 2% there.
exact = {k: v.astype(np.float64) for k, v in ref.items()}
exact["grad.conv1.weight"] = exact["grad.conv1.weight"] * 1.01
safetensors_io.save(exact, f"{folder}/fp64.safetensors")
safetensors_io.save(dict(ref, **{"grad.conv1.weight": ref["grad.conv1.weight"] * np.float32(0.995)}),
                    f"{folder}/within.safetensors")   # 1.5% off fp64 on conv1: within 2 x 1%
safetensors_io.save(dict(ref, **{"grad.conv1.weight": ref["grad.conv1.weight"] * np.float32(0.985)}),
                    f"{folder}/beyond.safetensors")   # 2.5% off fp64 on conv1: beyond
PY
c=("$py" "$repo/bench/check_parity.py" grads "$scratch/torch.safetensors")
"${c[@]}" "$scratch/torch.safetensors" --json "$scratch/p.json" | grep -q "PASS" || fail "equal dumps do not pass"
"${c[@]}" "$scratch/near.safetensors" | grep -q "PASS" || fail "5e-4 relative error does not pass at rtol 1e-3"
status=0
"${c[@]}" "$scratch/far.safetensors" --json "$scratch/p.json" >"$scratch/far.txt" || status=$?
[ "$status" = 1 ] && grep -q "FAIL" "$scratch/far.txt" && grep -q "grad.fc.bias" "$scratch/far.txt" ||
  fail "2e-3 relative error: status $status, $(cat "$scratch/far.txt")"
"$py" -c "import json, sys; r = json.load(open(sys.argv[1]))['first_step']; assert not r['passed'] and \
  abs(r['relative_errors']['grad.fc.bias'] - 2e-3) < 1e-5, r" "$scratch/p.json" || fail "parity.json"
"${c[@]}" "$scratch/within.safetensors" --fp64 "$scratch/fp64.safetensors" | grep -q PASS ||
  fail "within 2 x PyTorch's own error against fp64 does not pass"
status=0
"${c[@]}" "$scratch/beyond.safetensors" --fp64 "$scratch/fp64.safetensors" >"$scratch/beyond.txt" || status=$?
[ "$status" = 1 ] && grep -q "worst grad.conv1.weight" "$scratch/beyond.txt" ||
  fail "beyond 2 x PyTorch's own error against fp64: status $status, $(cat "$scratch/beyond.txt")"
one_line_error "a missing tensor" 1 "${c[@]}" "$scratch/missing.safetensors"
grep -q "grad.fc.bias" "$scratch/stderr" || fail "the missing tensor is not named: $(cat "$scratch/stderr")"
one_line_error "a shape mismatch" 1 "${c[@]}" "$scratch/shape.safetensors"
one_line_error "no such file" 1 "${c[@]}" "$scratch/none.safetensors"

# N steps: metrics with a step line per step, final weights against the initial ones; the twin drifts a
# little from PyTorch, cutrain may drift up to 4 times as far (losses: the twin's largest drift so far).
"$py" - "$scratch" <<'PY'
import json, sys, numpy as np, safetensors_io
folder = sys.argv[1]
rng = np.random.default_rng(1)
init = {"conv1.weight": rng.normal(size=(8, 3, 3, 3)).astype(np.float32), "bn1.weight": np.ones(8, np.float32),
        "bn1.num_batches_tracked": np.array(6, np.int64)}
update = {k: rng.normal(size=v.shape).astype(np.float32) * np.float32(0.01) for k, v in init.items() if k != "bn1.num_batches_tracked"}
def run(name, losses, scale=None, tracked=6):
    with open(f"{folder}/{name}.jsonl", "w") as f:
        for t, loss in enumerate(losses, 1):
            f.write(json.dumps({"kind": "step", "global_step": t, "loss": loss}) + "\n")
        f.write(json.dumps({"kind": "summary"}) + "\n")
    final = {k: init[k] + update[k] * np.float32((scale or {}).get(k, 1.0)) for k in update}
    final["bn1.num_batches_tracked"] = np.array(tracked, np.int64)
    safetensors_io.save(final, f"{folder}/{name}.safetensors")
safetensors_io.save(init, f"{folder}/init.safetensors")
losses = [2.30, 2.25, 2.20, 2.10]
run("torch", losses)
run("twin", [2.30, 2.2500001, 2.2001, 2.1], {"conv1.weight": 1.001, "bn1.weight": 1.01})
run("same", [2.30, 2.2500002, 2.2003, 2.1003], {"conv1.weight": 0.997, "bn1.weight": 1.03})
run("loss_off", [2.30, 2.2500002, 2.2003, 2.1006])             # step 4: 6e-4 off, limit 4 x 1e-4
run("bn_off", losses, {"bn1.weight": 1.05})                     # 5% off, limit 4 x 1%
run("tracked_off", losses, tracked=5)
run("short", losses[:3])
PY
s=("$py" "$repo/bench/check_parity.py" steps "$scratch/init.safetensors" --torch "$scratch/torch.jsonl"
   "$scratch/torch.safetensors" --twin "$scratch/twin.jsonl" "$scratch/twin.safetensors" --cutrain)
"${s[@]}" "$scratch/same.jsonl" "$scratch/same.safetensors" --json "$scratch/p.json" | grep -q PASS ||
  fail "steps within 4 x the twin's drift do not pass"
for off in loss_off:"worst step 4" bn_off:"worst bn1.weight" tracked_off:"worst bn1.num_batches_tracked"; do
  status=0
  "${s[@]}" "$scratch/${off%%:*}.jsonl" "$scratch/${off%%:*}.safetensors" >"$scratch/off.txt" || status=$?
  [ "$status" = 1 ] && grep -q "${off#*:}" "$scratch/off.txt" || fail "${off%%:*}: status $status, $(cat "$scratch/off.txt")"
done
one_line_error "a run of fewer steps" 1 "${s[@]}" "$scratch/short.jsonl" "$scratch/short.safetensors"
echo "ok: safetensors by hand and round trip; gradient and step parity pass, fail and refuse as they should"
