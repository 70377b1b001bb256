# bench/speed_targets.py on a hand-made matrix and results.json: the fastest row is the one with the smallest
# ms/step, wherever it is in the table; the ratios are cutrain's images/s over PyTorch's; each verdict follows
# its target; a missing comparison says so; and bad input is one line. Standard library only.
source "$(dirname "$0")/common.sh"
matrix="$scratch/matrix.txt"
# Rows as bench-step --matrix prints them: batch norm, streams, graph, ms/step, fastest, slowest, images/s,
# % of peak, plan ms. The fastest is split, 1 stream, graph: 2.00 ms, 128000 images/s, 43.1% of the peak.
cat >"$matrix" <<'TXT'
bench-step --matrix: ResNet-18 cifar stem, width 64, bf16, batch 256, 32x32 images, on NVIDIA H200
  each row: the median of 20 timed steps after 5 warm-up; 852.20 GFLOP per step; % of a peak of 989 TFLOP/s
  batch norm   streams  graph   ms/step   fastest   slowest   images/s % of peak  plan ms
  cooperative        2  eager      3.00      2.90      3.50      85333      28.7        -
  cooperative        2  graph      2.50      2.40      2.60     102400      34.5        -
  split              1  graph      2.00      1.90      2.10     128000      43.1        -
  cudnn              2  graph      2.20      2.10      2.30     116364      39.2        -
  two streams against one (median ms/step; a positive figure is the time two streams save):
    cooperative   eager 3.00 against 3.10 ms: +3.2%  graph 2.50 against 2.60 ms: +3.8%
matrix: fastest split, 1 stream, graph, 2.00 ms/step
TXT
# PyTorch eager at 64000 images/s (cutrain 2.00x: the target met exactly), compile at 102400 (1.25x: missed).
cat >"$scratch/results.json" <<'JSON'
{"runs": {"cutrain-bf16": {"images_per_s": 90000.0, "ms_per_step": 2.84},
          "torch-eager-bf16-cl": {"images_per_s": 64000.0, "ms_per_step": 4.0},
          "torch-compile-bf16-cl": {"images_per_s": 102400.0, "ms_per_step": 2.5}}}
JSON
t=(python3 "$repo/bench/speed_targets.py")
"${t[@]}" "$matrix" --results "$scratch/results.json" >"$scratch/table" || fail "speed_targets.py: exit $?"
cat "$scratch/table"
row() { grep -qE "$1" "$scratch/table" || fail "no row /$1/"; }
row '^  cutrain split, 1 stream, graph +2\.00 +128000 +- +- +-$'
row '^  torch-eager-bf16-cl +4\.00 +64000 +2\.00x +>= 2\.0x +yes$'
row '^  torch-compile-bf16-cl +2\.50 +102400 +1\.25x +>= 1\.3x +no$'
row '^  cutrain: share of the bf16 peak +43\.1% +>= 35% +yes$'
! grep -q "missing" "$scratch/table" || fail "a complete comparison reported missing figures"

# Without the comparison: the PyTorch rows are open, the peak's still judged, and the table says why.
"${t[@]}" "$matrix" --results "$scratch/absent.json" >"$scratch/open" || fail "without results.json: exit $?"
grep -qE '^  torch-eager-bf16-cl +- +- +- +>= 2\.0x +\?$' "$scratch/open" || fail "open eager row: $(cat "$scratch/open")"
grep -q "PyTorch's figures are missing (.*absent.json" "$scratch/open" || fail "no reason for the missing figures"

# Bad input: one line, exit 1.
echo "no table here" >"$scratch/empty.txt"
status=0
"${t[@]}" "$scratch/empty.txt" >"$scratch/out" 2>"$scratch/err" || status=$?
[ "$status" = 1 ] || fail "a matrix log without rows: exit $status"
[ "$(cat "$scratch/err")" = "speed_targets.py: error: $scratch/empty.txt: no rows of bench-step --matrix in it" ] ||
  fail "its message: $(cat "$scratch/err")"
echo "ok: speed_targets.py"
