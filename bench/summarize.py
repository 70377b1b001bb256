#!/usr/bin/env python3
"""The comparison table, results.json and bar chart, from the runs' metrics files (JSON lines).

    summarize.py cutrain-bf16=runs/cutrain-bf16.1.jsonl torch-eager-bf16-cl=runs/torch-eager-bf16-cl.1.jsonl \\
                 [--parity parity.json] [--out DIR] [--warmup-steps 50]

A run NAME=FILE may be given several times (repeated runs): its step records are pooled. Runs named
cutrain* are cutrain's; every other run is a PyTorch configuration, and its ratio is cutrain's images/s
(the cutrain run of the same precision) over its own. Per run:
  images/s, ms/step  median over the step records after the warm-up steps (each record is one logging
                     interval; the first steps hold cuDNN's autotuning, torch.compile and worker start-up)
  epoch s            median epoch time, the first epoch left out when there are more
  peak memory        the largest peak_memory_bytes reported
  test acc           the final test accuracy (the mean over repeated runs)
  to target          with --target-accuracy runs: the training time to the target (median over the repeats
                     that reached it, evaluation left out), and how many repeats reached it
and, against each PyTorch run, cutrain's ratio of images/s and, with a target, of time to target (the PyTorch
run's time over cutrain's: above 1, cutrain got there sooner).
Only the standard library is needed, and matplotlib for the chart (skipped, saying so, without it).
"""
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cli  # noqa: E402

PROG = "summarize.py"


def read_metrics(path):
    """A metrics file -> list of records, the last of each step (last_of_each_step). Raises ValueError naming the
    file and line."""
    return last_of_each_step(read_records(path))


def read_runs(path):
    """A metrics file -> the records of each run in it (split_runs), each the last of each step."""
    return [last_of_each_step(run) for run in split_runs(read_records(path))]


def read_records(path):
    """A metrics file -> every record in it. Raises ValueError naming the file and line."""
    try:
        with open(path) as f:
            lines = f.readlines()
    except OSError as e:
        raise ValueError(f"{path}: cannot read: {e.strerror}") from None
    records = []
    for n, line in enumerate(lines, 1):
        if line.strip():
            try:
                records.append(json.loads(line))
            except ValueError:
                raise ValueError(f"{path}:{n}: not a JSON object") from None
    return records


def split_runs(records):
    """The records of a file that several runs appended to -> a list of each run's records, in order. A run
    begins at a "run" record (cutrain's first), unless a "resume" record follows it before any step: that
    process went on with the run before it. In a file without "run" records (older ones, the PyTorch
    reference's), a run begins where a step is not past the step before it and no "resume" came between."""
    runs = []
    last_step = None  # the global_step of the last step record
    resumed = False   # a "resume" record since that step
    opened = False    # the last run began at a "run" record, and no step has come since
    for r in records:
        kind = r.get("kind")
        if kind == "run":
            runs.append([])
            opened, resumed = True, False
        elif kind == "resume":
            if opened and len(runs) > 1:
                runs[-2].extend(runs.pop())
            resumed = True
        elif kind == "step":
            if not runs or (not opened and not resumed and last_step is not None and r["global_step"] <= last_step):
                runs.append([])
            opened, resumed, last_step = False, False, r["global_step"]
        if not runs:
            runs.append([])
        runs[-1].append(r)
    return runs


def last_of_each_step(records):
    """A resumed run repeats the steps since its checkpoint (after a "resume" record): of the step,
    eval and epoch records of one step, the last is the one that counts."""
    def key(r):
        return (r.get("kind"), r["global_step"]) if r.get("kind") in ("step", "eval", "epoch") \
            and "global_step" in r else None
    last = {key(r): i for i, r in enumerate(records) if key(r) is not None}
    return [r for i, r in enumerate(records) if key(r) is None or last[key(r)] == i]


def summarize_run(name, paths, warmup_steps):
    """Figures of one configuration from its metrics files (one per repeat)."""
    steps, epochs, summaries = [], [], []
    for path in paths:
        records = read_metrics(path)
        steps += [r for r in records if r.get("kind") == "step"]
        epochs += [r for r in records if r.get("kind") == "epoch"]
        summaries += [r for r in records if r.get("kind") == "summary"]
        if not any(r.get("kind") == "step" for r in records):
            raise ValueError(f"{path}: no step records (was the run cut short?)")
    timed = [r for r in steps if r["global_step"] > warmup_steps] or steps
    later_epochs = [r for r in epochs if r["epoch"] > 1] or epochs
    accs = [s["final_test_acc"] for s in summaries if s.get("final_test_acc") is not None] \
        or [r["test_acc"] for r in epochs[-1:] if r.get("test_acc") is not None]
    peaks = [r.get("peak_memory_bytes") for r in epochs + summaries]
    peaks = [p for p in peaks if p]
    info = summaries[-1] if summaries else {}
    target_times = [s["time_to_target_s"] for s in summaries if s.get("time_to_target_s") is not None]
    return {
        "program": "cutrain" if name.startswith("cutrain") else "pytorch",
        "precision": info.get("precision"),
        "world_size": info.get("world_size"),
        "batch_size": info.get("batch_size"),
        "stem": info.get("stem"),
        "repeats": len(paths),
        "steps": max(r["global_step"] for r in steps),
        "timed_intervals": len(timed),
        "images_per_s": statistics.median(r["images_per_s"] for r in timed),
        "ms_per_step": statistics.median(r["ms_per_step"] for r in timed),
        "epoch_time_s": statistics.median(r["epoch_time_s"] for r in later_epochs) if later_epochs else None,
        "peak_memory_bytes": max(peaks) if peaks else None,
        "test_acc": statistics.fmean(accs) if accs else None,
        "target_acc": info.get("target_acc"),
        "time_to_target_s": statistics.median(target_times) if target_times else None,
        "target_reached": len(target_times),
    }


def ratios(runs):
    """For each PyTorch run: cutrain's images/s (same precision) over its images/s, and its time to target over
    cutrain's where both reached it."""
    out = {}
    for name, run in runs.items():
        if run["program"] != "pytorch":
            continue
        mates = [n for n, r in runs.items() if r["program"] == "cutrain" and r["precision"] == run["precision"]]
        if mates:
            mate = runs[mates[0]]
            out[name] = {"cutrain_run": mates[0], "speedup": mate["images_per_s"] / run["images_per_s"]}
            if mate["time_to_target_s"] and run["time_to_target_s"]:
                out[name]["time_to_target_speedup"] = run["time_to_target_s"] / mate["time_to_target_s"]
    return out


def format_table(runs, speedups, parity):
    def num(v, fmt):
        return "-" if v is None else format(v, fmt)

    def to_target(r):
        if r["time_to_target_s"] is None:
            return "not reached"
        shortfall = "" if r["target_reached"] == r["repeats"] else f" ({r['target_reached']}/{r['repeats']})"
        return f"{r['time_to_target_s']:.1f} s{shortfall}"

    targets = sorted({r["target_acc"] for r in runs.values() if r["target_acc"] is not None})
    header = f"{'run':<26} {'prec':>4} {'images/s':>10} {'ms/step':>8} {'epoch s':>8} {'peak MiB':>9} " \
             f"{'test acc':>8} {'cutrain x':>9}"
    if targets:
        header += f" {'to ' + '/'.join(f'{100 * t:g}%' for t in targets):>16} {'time x':>7}"
    lines = [header, "-" * len(header)]
    for name, r in runs.items():
        mib = None if r["peak_memory_bytes"] is None else r["peak_memory_bytes"] / 2**20
        acc = None if r["test_acc"] is None else 100 * r["test_acc"]
        ratio = f"{speedups[name]['speedup']:.2f}x" if name in speedups else "-"
        line = (f"{name:<26} {r['precision'] or '-':>4} {num(r['images_per_s'], ',.0f'):>10} "
                f"{num(r['ms_per_step'], '.2f'):>8} {num(r['epoch_time_s'], '.2f'):>8} {num(mib, ',.0f'):>9} "
                f"{num(acc, '.2f') + '%' if acc is not None else '-':>8} {ratio:>9}")
        if targets:
            time_ratio = speedups.get(name, {}).get("time_to_target_speedup")
            line += f" {to_target(r) if r['target_acc'] is not None else '-':>16} " \
                    f"{'-' if time_ratio is None else f'{time_ratio:.2f}x':>7}"
        lines.append(line)
    for check in parity.values():
        lines.append(f"{check['name']}: {check['detail']} -> {'PASS' if check['passed'] else 'FAIL'}")
    return "\n".join(lines)


def chart_title(run, notes):
    """What the runs ran on, from a run's figures and compare.sh's notes (device, gpu, nproc): "batch 256 per
    GPU, 8 x NVIDIA H200", or on the CPU "batch 32 per process, 1 process on CPU (2 cores)"."""
    nproc = notes.get("nproc", "1")
    where = notes.get("gpu", "GPU")
    if notes.get("device") == "cpu":
        setup = f"batch {run['batch_size']} per process, {nproc} process{'' if nproc == '1' else 'es'} on {where}"
    else:
        setup = f"batch {run['batch_size']} per GPU, {nproc} x {where}"
    return f"cutrain vs PyTorch: ResNet-18 ({run['stem']} stem), {setup}"


def draw_chart(runs, speedups, notes, path):
    """Horizontal bars of images/s, cutrain's in one colour, each PyTorch bar labelled with cutrain's ratio."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        print(f"{PROG}: chart skipped: matplotlib not importable ({e})")
        return False
    names = list(runs)
    values = [runs[n]["images_per_s"] for n in names]
    colours = ["tab:green" if runs[n]["program"] == "cutrain" else "tab:blue" for n in names]
    fig, ax = plt.subplots(figsize=(8, 0.6 * len(names) + 1.5))
    bars = ax.barh(names[::-1], values[::-1], color=colours[::-1])
    for bar, name in zip(bars, names[::-1]):
        label = f" {runs[name]['images_per_s']:,.0f}"
        if name in speedups:
            label += f"  (cutrain {speedups[name]['speedup']:.2f}x)"
        ax.text(bar.get_width(), bar.get_y() + bar.get_height() / 2, label, va="center", fontsize=8)
    ax.set_xlabel("images/s (median after warm-up)")
    ax.set_xlim(0, max(values) * 1.45)
    ax.set_title(chart_title(next(iter(runs.values())), notes), fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def main(argv=None):
    p = cli.Parser(prog=PROG, description=__doc__.split("\n\n")[0])
    p.add_argument("runs", nargs="+", metavar="NAME=FILE", help="a run's name and metrics file")
    p.add_argument("--warmup-steps", type=int, default=50, help="steps left out of the medians (default 50)")
    p.add_argument("--parity", metavar="FILE", help="check_parity.py's JSON results to include")
    p.add_argument("--out", metavar="DIR", help="write results.json and compare.png there")
    p.add_argument("--note", action="append", default=[], metavar="KEY=VALUE",
                   help="extra facts for results.json (e.g. gpu=NVIDIA H200)")
    args = p.parse_args(argv)
    files = cli.named_files(p, args.runs)
    try:
        runs = {name: summarize_run(name, paths, args.warmup_steps) for name, paths in files.items()}
        parity = read_parity(args.parity) if args.parity else {}
    except ValueError as e:
        cli.fail(PROG, str(e))
    speedups = ratios(runs)
    print(format_table(runs, speedups, parity))
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        notes = dict(n.partition("=")[::2] for n in args.note)
        results = {"runs": runs, "speedups": speedups, "parity": parity, "warmup_steps": args.warmup_steps,
                   "notes": notes}
        with open(os.path.join(args.out, "results.json"), "w") as f:
            json.dump(results, f, indent=2)
        chart = os.path.join(args.out, "compare.png")
        drawn = draw_chart(runs, speedups, notes, chart)
        print(f"results: {os.path.join(args.out, 'results.json')}" + (f", {chart}" if drawn else ""))


def read_parity(path):
    """check_parity.py's results: {check: {"name", "passed", "detail", ...}}; absent checks are fine."""
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        raise ValueError(f"{path}: cannot read parity results: {e}") from None


if __name__ == "__main__":
    main()
