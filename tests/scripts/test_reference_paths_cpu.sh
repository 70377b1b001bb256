# Every path of the PyTorch reference that compare.sh runs, on the CPU and tiny (width 8, batch 4, 16 images):
# eager, channels_last, bf16 autocast, torch.compile (inductor's CPU backend, default and max-autotune) and DDP
# over Gloo with 2 processes started by torch's own launcher. From the same initial weights and on the same
# batches (--cutrain-augment), the fp32 paths' losses agree with eager's step by step; bf16's stays near them; the
# compiled ones log inductor's C++ kernels (TORCH_LOGS=output_code), so a run that compiled nothing fails.
# Inductor compiles its C++ kernels on the first run (about 75 s for both modes on two idle cores); its cache,
# beside the project's environment (scripts/python_env.sh), cuts a later run's compilation to about 15 s. It
# compiles in this process (one compile thread): a pool of worker processes, each importing torch, costs more
# on two cores than it saves.
source "$(dirname "$0")/common.sh"
require_python "numpy, torch, torchvision"
export OMP_NUM_THREADS=1 TORCHINDUCTOR_COMPILE_THREADS=1
export TORCHINDUCTOR_CACHE_DIR="$(dirname "$cutrain_venv")/inductor"
cd "$scratch"
write_cifar d data_batch_1.bin:16 data_batch_2.bin:0 data_batch_3.bin:0 data_batch_4.bin:0 data_batch_5.bin:0
recipe=(--data d --device cpu --workers 0 --batch-size 4 --width 8 --epochs 1 --max-steps 2 --log-every 1
        --cutrain-augment --init-from init.safetensors)
"$py" "$repo/bench/pytorch_reference.py" --width 8 --export-init init.safetensors >/dev/null || fail "--export-init"
path() {  # path NAME ARGS...: one run of the reference, its metrics in NAME.jsonl, its seconds in seconds.txt
  local name="$1" start=$SECONDS; shift
  "$@" "${recipe[@]}" --metrics "$name.jsonl" >"$name.log" 2>&1 || fail "$name: $(tail -n 3 "$name.log")"
  echo "$name $((SECONDS - start))" >>seconds.txt
}
ref=("$py" "$repo/bench/pytorch_reference.py")
path eager "${ref[@]}"
path channels_last "${ref[@]}" --channels-last
path bf16 "${ref[@]}" --amp bf16 --channels-last
path compile env TORCH_LOGS=output_code "${ref[@]}" --compile
path max_autotune env TORCH_LOGS=output_code "${ref[@]}" --compile max-autotune --max-steps 1
for name in compile max_autotune; do  # inductor's C++ kernels, in its output code (logged from its cache too)
  grep -q "cpp_fused_.* = async_compile.cpp" "$name.log" || fail "$name: no C++ kernel of inductor's in the output code logged"
done
path ddp "$py" -m torch.distributed.run --standalone --nproc-per-node 2 "$repo/bench/pytorch_reference.py"
"$py" - <<'PY' || fail "the paths disagree"
import json
def run(name):
    records = [json.loads(l) for l in open(f"{name}.jsonl")]
    return [r["loss"] for r in records if r["kind"] == "step"], records[-1]
eager, _ = run("eager")
assert len(eager) == 2, eager
for name, tolerance in [("channels_last", 1e-4), ("compile", 1e-4), ("max_autotune", 1e-4), ("bf16", 0.05)]:
    losses, summary = run(name)
    assert all(abs(a - b) <= tolerance * abs(b) for a, b in zip(losses, eager)), (name, losses, eager)
    assert summary["kind"] == "summary" and summary["world_size"] == 1, (name, summary)
assert run("compile")[1]["compile"] == "default" and run("max_autotune")[1]["compile"] == "max-autotune"
assert run("bf16")[1]["precision"] == "bf16" and run("channels_last")[1]["channels_last"]
losses, summary = run("ddp")
assert summary["world_size"] == 2 and len(losses) == 2 and all(0 < l < 10 for l in losses), (losses, summary)
PY
echo "ok: eager, channels_last, bf16 autocast, compile, max-autotune and DDP over Gloo agree (seconds:" \
  "$(tr '\n' ' ' <seconds.txt | sed 's/ $//'))"
