# scripts/plot_metrics.py draws a PNG from hand-made metrics files (two runs overlaid), and refuses a
# file that is not metrics in one line.
source "$(dirname "$0")/common.sh"
require_python matplotlib
for run in a b; do
  for s in 1 2 3 4; do
    echo "{\"kind\":\"step\",\"epoch\":$(((s + 1) / 2)),\"step\":$s,\"steps_per_epoch\":2,\"global_step\":$s,\"loss\":2.$s,\"acc\":0.$s,\"lr\":0.002,\"images_per_s\":100$s,\"ms_per_step\":2$s}"
  done >"$scratch/$run.jsonl"
  echo '{"kind":"epoch","epoch":1,"global_step":2,"loss":2.1,"acc":0.2,"lr":0.002,"images_per_s":1000,"epoch_time_s":1,"test_acc":0.3}' >>"$scratch/$run.jsonl"
  echo '{"kind":"epoch","epoch":2,"global_step":4,"loss":1.9,"acc":0.4,"lr":0.002,"images_per_s":1100,"epoch_time_s":1}' >>"$scratch/$run.jsonl"
done
"$py" "$repo/scripts/plot_metrics.py" "$scratch/a.jsonl" "$scratch/b.jsonl" --labels cutrain,pytorch -o "$scratch/c.png" ||
  fail "plot_metrics.py: exit $?"
[ "$(head -c 8 "$scratch/c.png" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ] || fail "c.png is not a PNG"
# A run resumed from step 2 repeats steps 3 and 4 after its "resume" record: the last of each counts.
{ cat "$scratch/a.jsonl"; echo '{"kind":"resume","epoch":2,"global_step":2,"checkpoint":"c"}'; sed -n 3,4p "$scratch/a.jsonl" |
  sed 's/"loss":2\./"loss":1./'; } >"$scratch/resumed.jsonl"
steps=$("$py" -c "import sys; sys.path.insert(0, '$repo/bench'); from summarize import read_metrics
print(' '.join(f\"{r['global_step']}:{r['loss']}\" for r in read_metrics('$scratch/resumed.jsonl') if r['kind'] == 'step'))")
[ "$steps" = "1:2.1 2:2.2 3:1.3 4:1.4" ] || fail "the steps of a resumed run: $steps"
"$py" "$repo/scripts/plot_metrics.py" "$scratch/resumed.jsonl" -o "$scratch/r.png" || fail "plot_metrics.py on a resumed run: exit $?"
echo "not json" >"$scratch/bad.jsonl"
one_line_error "plot_metrics.py on a bad file" 1 "$py" "$repo/scripts/plot_metrics.py" "$scratch/bad.jsonl" -o "$scratch/d.png"
one_line_error "plot_metrics.py --labels count" 2 "$py" "$repo/scripts/plot_metrics.py" "$scratch/a.jsonl" --labels x,y
echo "ok: a PNG of $(stat -c %s "$scratch/c.png") bytes"
