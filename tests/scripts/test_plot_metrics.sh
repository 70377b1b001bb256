# scripts/plot_metrics.py draws a PNG from hand-made metrics files (two runs overlaid), one line per run of a
# file that several runs appended to, and refuses a file that is not metrics in one line.
source "$(dirname "$0")/common.sh"
require_python matplotlib
for run in a b; do
  for s in 1 2 3 4; do
    echo "{\"kind\":\"step\",\"epoch\":$(((s + 1) / 2)),\"step\":$s,\"steps_per_epoch\":2,\"global_step\":$s,\"loss\":2.$s,\"acc\":0.$s,\"lr\":0.002,\"images_per_s\":100$s,\"ms_per_step\":2$s}"
  done >"$scratch/$run.jsonl"
  echo '{"kind":"epoch","epoch":1,"global_step":2,"loss":2.1,"acc":0.2,"lr":0.002,"images_per_s":1000,"epoch_time_s":1,"test_acc":0.3,"test_loss":1.5}' >>"$scratch/$run.jsonl"
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
# Runs appended to one file: a second run started afresh is a line of its own (no line back to step 0), with
# or without "run" records; a "run" record that a "resume" follows goes on with the run before it.
run_record='{"kind":"run","command":"cutrain train","settings":{}}'
{ echo "$run_record"; cat "$scratch/a.jsonl"; echo "$run_record"; cat "$scratch/b.jsonl"; } >"$scratch/two.jsonl"
cat "$scratch/a.jsonl" "$scratch/b.jsonl" >"$scratch/two-old.jsonl"
{ echo "$run_record"; sed -n 1,2p "$scratch/a.jsonl"; echo "$run_record"
  echo '{"kind":"resume","epoch":2,"global_step":2,"checkpoint":"c"}'; sed -n 3,6p "$scratch/a.jsonl"; } >"$scratch/one.jsonl"
"$py" - "$repo" "$scratch" <<'PY' || fail "plot_metrics.py's figure (above)"
import sys
sys.path.insert(0, sys.argv[1] + "/scripts")
import plot_metrics
scratch = sys.argv[2]
for name, expected in [("two", ["x, run 1", "x, run 2"]), ("two-old", ["x, run 1", "x, run 2"]), ("one", ["x"])]:
    runs = plot_metrics.read_file(f"{scratch}/{name}.jsonl", "x")
    assert list(runs) == expected, (name, list(runs))
    fig = plot_metrics.figure(runs)
    fig.canvas.draw()
    axes = {ax.get_title(): ax for ax in fig.axes}
    for title, ax in axes.items():
        assert ax.get_xlabel() and ax.get_ylabel(), f"{title}: no axis label"
    for line in axes["loss per step"].get_lines():
        x = list(line.get_xdata())
        assert x == [1, 2, 3, 4], (name, line.get_label(), x)  # each run its own line, never back to step 0
    lr = axes["learning rate per step"].get_lines()
    assert [list(l.get_ydata()) for l in lr] == [[0.002] * 4] * len(expected), "no learning rate panel"
    ticks = axes["accuracy per epoch (test dashed)"].get_xticks()
    assert all(float(t).is_integer() for t in ticks), f"epoch ticks between whole epochs: {list(ticks)}"
    test = [l for l in axes["loss per epoch (test dashed)"].get_lines() if l.get_label().endswith(" test")]
    assert [list(l.get_ydata()) for l in test] == [[1.5]] * len(expected), "no test loss"
print("figure ok")
PY
echo "not json" >"$scratch/bad.jsonl"
one_line_error "plot_metrics.py on a bad file" 1 "$py" "$repo/scripts/plot_metrics.py" "$scratch/bad.jsonl" -o "$scratch/d.png"
one_line_error "plot_metrics.py --labels count" 2 "$py" "$repo/scripts/plot_metrics.py" "$scratch/a.jsonl" --labels x,y
# Started by an interpreter without matplotlib (as pyenv's or conda's python3, first on PATH, can be), it re-runs
# itself under one that has it: here the same /usr/bin/python3 without its site packages (-S).
if [ -x /usr/bin/python3 ] && /usr/bin/python3 -c "import matplotlib" 2>/dev/null; then
  env -u PYTHON /usr/bin/python3 -S "$repo/scripts/plot_metrics.py" "$scratch/a.jsonl" -o "$scratch/e.png" \
    >"$scratch/e.out" 2>&1 || fail "plot_metrics.py under python3 -S: $(cat "$scratch/e.out")"
  [ -s "$scratch/e.png" ] || fail "plot_metrics.py under python3 -S drew nothing"
fi
echo "ok: a PNG of $(stat -c %s "$scratch/c.png") bytes"
