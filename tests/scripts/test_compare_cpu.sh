# bench/compare.sh --device cpu --quick against stand-ins (a cutrain in build/bin of a copy of the repository,
# a PyTorch reference and an interpreter that pretend), started from another folder: it finds the binaries
# relative to the repository, skips what cannot run on the CPU, saying why (cutrain's bf16; torch.compile
# where torch has none), counts no failure for them, and labels the table's setting as a CPU's, not a GPU's.
source "$(dirname "$0")/common.sh"
copy="$scratch/repo"
mkdir -p "$copy/scripts" "$copy/bench" "$copy/build/bin"
cp "$repo/scripts/cli.sh" "$repo/scripts/python_env.sh" "$copy/scripts/"
cp "$repo/bench/compare.sh" "$repo/bench/summarize.py" "$repo/bench/cli.py" "$copy/bench/"
stub() { printf '#!/usr/bin/env bash\n%s\n' "$2" >"$1"; chmod +x "$1"; }
# Both stand-ins write what a run of 16 steps writes: step records, then the summary. Each writes its
# command line to argv.txt first.
write_metrics='echo "$(basename "$0") $*" >>"'"$scratch"'/argv.txt"; metrics=""; precision=fp32
while (($#)); do case "$1" in --metrics) metrics="$2" ;; --precision) precision="$2" ;; --amp) precision="$2" ;; esac; shift; done
for s in 4 8 12 16; do echo "{\"kind\": \"step\", \"global_step\": $s, \"images_per_s\": 100$s, \"ms_per_step\": 3$s}" >>"$metrics"; done
echo "{\"kind\": \"summary\", \"precision\": \"$precision\", \"stem\": \"cifar\", \"batch_size\": 32, \"world_size\": 1}" >>"$metrics"'
stub "$copy/build/bin/cutrain" "
case \"\$1\" in
  make-synthetic) mkdir -p '$scratch/data'; echo '$scratch/data' ;;
  train) shift; $write_metrics ;;
esac"
stub "$copy/bench/pytorch_reference.py" "$write_metrics"
# The interpreter: compare.sh's own questions to torch get the answers of a torch without a GPU, with
# torch.compile unless NO_COMPILE=1; everything else is python3 (summarize.py), or the reference's stand-in.
stub "$scratch/python" "
case \"\$1\" in
  -) cat >/dev/null; exit 0 ;;
  -c) case \"\$2\" in *hasattr*) exit \"\${NO_COMPILE:-0}\" ;; *__version__*) echo 1.13.1; exit 0 ;; *) exit 1 ;; esac ;;
  *pytorch_reference.py) exec bash \"\$@\" ;;
esac
exec python3 \"\$@\""
export PYTHON="$scratch/python"
require_python matplotlib
cd "$scratch"

compare() {  # compare OUT [FLAGS...]: the quick CPU comparison, without the parity checks, into OUT; its stdout in OUT.txt
  local out="$1" status=0
  shift
  bash "$copy/bench/compare.sh" --device cpu --quick --no-parity --out "$out" "$@" >"$out.txt" 2>&1 || status=$?
  [ "$status" = 0 ] || fail "compare.sh --device cpu: exit $status: $(tail -n 3 "$out.txt")"
}
compare with-compile
grep -qE '^cutrain-bf16\.r1 +SKIPPED \(needs a GPU: cutrain computes bf16 on CUDA only\)$' with-compile.txt ||
  fail "cutrain-bf16 is not skipped with its reason: $(cat with-compile.txt)"
for config in cutrain-fp32 torch-eager-fp32 torch-eager-bf16-cl torch-compile-bf16-cl; do
  grep -qE "^$config\.r1 +ok " with-compile.txt || fail "$config did not run: $(cat with-compile.txt)"
done
"$py" - "$scratch/with-compile/results.json" "$copy/bench" <<'PY' || fail "the CPU's labels (above)"
import json, sys
notes = json.load(open(sys.argv[1]))["notes"]
assert notes["device"] == "cpu" and notes["gpu"].startswith("CPU ("), notes
sys.path.insert(0, sys.argv[2])
from summarize import chart_title
title = chart_title({"stem": "cifar", "batch_size": 32}, notes)
assert "per GPU" not in title and "unknown" not in title and title.endswith("batch 32 per process, 1 process on "
                                                                          + notes["gpu"]), title
gpu = chart_title({"stem": "cifar", "batch_size": 256}, {"device": "cuda", "gpu": "NVIDIA H200", "nproc": "8"})
assert gpu.endswith("batch 256 per GPU, 8 x NVIDIA H200"), gpu
PY

NO_COMPILE=1 compare without-compile
grep -qE '^torch-compile-bf16-cl\.r1 +SKIPPED \(torch 1\.13\.1 has no torch\.compile, which came in 2\.0\)$' \
  without-compile.txt || fail "torch-compile-bf16-cl is not skipped with its reason: $(cat without-compile.txt)"
# The recipe's options reach both programs alike, and a list that is not one is refused in one line.
rm -f argv.txt
compare recipe --lr-schedule step --lr-milestones 0.5,0.75 --clip-grad-norm 0.5 --label-smoothing 0.1 --model-ema \
  --normalize-mean 0.5,0.5,0.5
for program in cutrain pytorch_reference.py; do
  grep -q "^$program " argv.txt || fail "$program did not run: $(cat argv.txt)"
done
while read -r program argv; do
  for flag in "--lr-schedule step" "--lr-milestones 0.5,0.75" "--clip-grad-norm 0.5" "--label-smoothing 0.1" \
    "--model-ema" "--normalize-mean 0.5,0.5,0.5"; do
    [[ " $argv " == *" $flag "* ]] || fail "$program did not get $flag: $argv"
  done
done <argv.txt
one_line_error "a list with a word" 2 bash "$copy/bench/compare.sh" --device cpu --lr-milestones 0.5,x
grep -q "comma-separated list of numbers" "$scratch/stderr" || fail "the list's line: $(cat "$scratch/stderr")"

echo "ok: $(grep -c " ok " with-compile.txt) runs; cutrain-bf16 skipped on the CPU, and torch-compile-bf16-cl without torch.compile, each saying why; the recipe's options reach both programs"
