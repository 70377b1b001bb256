# The rehearsal of the first GPU run: scripts/gpu-check.sh --emulated against the emulated build, with two
# quick [emu] tests (the emulated build's own tests run them all). Every step must pass, or be n/a where it
# needs the real GPU, the fused rows (--fusion on) must be there, and the table must come last.
source "$(dirname "$0")/common.sh"
[ -x "$bin/cutrain" ] && [ -x "$bin/cutrain_tests" ] || skip "$bin: no emulated build"
status=0
bash "$repo/scripts/gpu-check.sh" --emulated --out "$scratch/out" \
  --tests "a CUDA device is visible,the learning rate of every schedule*" >"$scratch/stdout" 2>&1 || status=$?
summary="$scratch/out/summary.txt"
[ -f "$summary" ] || fail "no summary.txt: $(tail -n 5 "$scratch/stdout")"
[ "$status" = 0 ] || fail "exit status $status: $(cat "$summary")"
expect_row() { grep -qE "$1" "$summary" || fail "no row /$1/ in: $(cat "$summary")"; }
expect_row '^gpu-check summary: emulated GPU'
expect_row '^preflight: driver +n/a .*none to check: the emulated device needs no driver and nvidia-smi is not run'
expect_row '^preflight: python +ok '
expect_row '^versions +ok '
expect_row '^\[gpu\] a CUDA device is visible +ok .*passed'
expect_row '^\[gpu\] tests: how many ran +n/a .*2 of 2 ran: 2 in one process \(exit 0\)$'
expect_row '^train +ok .*test accuracy'
for row in "fp32 eager" "fp32 graph" "bf16 eager" "bf16 graph"; do expect_row "^bench-step $row +ok .*ms/step"; done
expect_row '^bench-step bf16 graph --cudnn-benchmark +ok .*ms/step'
expect_row '^matrix +ok .*fastest .*ms/step'
expect_row '^matrix --fusion on +ok .*fastest (cooperative|split), .*ms/step'
expect_row '^fusion +ok +[0-9]+s +fastest on [0-9.]+ ms \((cooperative|split), [12] stream\(s\), (eager|graph)\), fastest off '
expect_row '^  split, 1 stream\(s\), graph: +off +[0-9.]+, on +[0-9.]+: [-+][0-9.]+%$'
expect_row '^choices +ok +[0-9]+s +1 rank, graph: fastest '
expect_row '^  2 rank\(s\), emulated plan: +fastest cooperative 1 and cooperative 2 alike \(cooperative 1 stream\(s\) [0-9.]+, '
expect_row '^layers +ok .*forward .* ms per step layer by layer'
expect_row '^layers --fusion on +ok .*ms per step layer by layer'
expect_row '^layers: .* ms per step layer by layer \(batch norm cooperative, fusion on\)$'
expect_row '^  two streams against one'
expect_row '^batch norm in all .*cooperative .*split .*cudnn'
expect_row '^plan +ok +[0-9]+s +predicted'
expect_row '^compare --quick +n/a .*needs the real GPU'
expect_row '^targets +ok .*table below'
expect_row "^  torch-eager-bf16-cl .*>= 2.0x +\\?$"  # no PyTorch figures without the real GPU
tables="$scratch/out/tables.txt"
[ -f "$tables" ] || fail "no tables.txt beside the summary"
for heading in targets matrix matrix-fusion fusion choices layers layers-fusion; do grep -qx "==== $heading" "$tables" || fail "no $heading table in tables.txt"; done
grep -q '^  layer4.1.bn2 ' "$tables" || fail "tables.txt: the per-layer table is cut short"
grep -q '^batch norm by shape' "$tables" || fail "tables.txt: no table of batch norm by shape"
grep -qE '^  layer4\.1\.bn1 +bn\+relu\+conv 3x3/1 ' "$tables" || fail "tables.txt: no fused unit in the layers with --fusion on"
grep -q '^  cudnn: --fusion on does not apply' "$tables" || fail "tables.txt: the fused matrix does not say why cuDNN's batch norm has no rows"
[ "$(tail -n 1 "$scratch/stdout")" = "$(tail -n 1 "$summary")" ] || fail "the table is not the last thing printed"
echo "ok: $(grep -c ' ok ' "$summary") steps passed"
