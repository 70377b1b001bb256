#!/usr/bin/env python3
"""Test accuracy of two programs over seeds, epoch by epoch, from their runs' metrics files (JSON lines).

    accuracy_table.py cutrain=runs/cutrain-seed0.jsonl pytorch=runs/pytorch-seed0.jsonl \\
                      cutrain=runs/cutrain-seed1.jsonl pytorch=runs/pytorch-seed1.jsonl ... [--json FILE]

Each NAME=FILE is one seed's run; exactly two names. Per epoch, each program's test accuracy (the epoch
records' test_acc) as mean +- sample standard deviation over its seeds, and the difference of the means. The
final difference is within the seed-to-seed spread when it is at most 2 standard errors of the difference of
two means, 2 sqrt(s1^2/n1 + s2^2/n2): about the band in which two programs with the same mean accuracy land
19 times out of 20. Only the standard library is needed.
"""
import json
import math
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cli  # noqa: E402

PROG = "accuracy_table.py"


def read_run(path):
    """One run's metrics -> ({epoch: test accuracy}, summary record or {}). Raises ValueError naming the file."""
    try:
        with open(path) as f:
            lines = [line for line in f if line.strip()]
    except OSError as e:
        raise ValueError(f"{path}: cannot read: {e.strerror}") from None
    accs, summary = {}, {}
    for n, line in enumerate(lines, 1):
        try:
            r = json.loads(line)
        except ValueError:
            raise ValueError(f"{path}:{n}: not a JSON object") from None
        if r.get("kind") == "epoch" and r.get("test_acc") is not None:
            accs[r["epoch"]] = r["test_acc"]
        elif r.get("kind") == "summary":
            summary = r
    if not accs:
        raise ValueError(f"{path}: no epoch with a test accuracy (was the run cut short, or --eval-every 0?)")
    return accs, summary


def mean_std(values):
    """(mean, sample standard deviation or None for one value)."""
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else None


def compare(runs):
    """runs: {name: [(accs, summary) per seed]} with two names -> the table's figures."""
    (a, a_runs), (b, b_runs) = runs.items()
    epochs = sorted(set.intersection(*(set(accs) for accs, _ in a_runs + b_runs)))
    if not epochs:
        raise ValueError("no epoch has a test accuracy in every run")
    rows = []
    for epoch in epochs:
        ma, sa = mean_std([accs[epoch] for accs, _ in a_runs])
        mb, sb = mean_std([accs[epoch] for accs, _ in b_runs])
        rows.append({"epoch": epoch, a: {"mean": ma, "std": sa}, b: {"mean": mb, "std": sb}, "difference": ma - mb})
    last = rows[-1]
    sa, sb = last[a]["std"], last[b]["std"]
    spread = None if sa is None or sb is None else 2 * math.sqrt(sa**2 / len(a_runs) + sb**2 / len(b_runs))
    times = {name: [s["training_time_s"] for _, s in rs if s.get("training_time_s") is not None]
             for name, rs in runs.items()}
    return {
        "programs": [a, b],
        "seeds": {a: len(a_runs), b: len(b_runs)},
        "epochs": rows,
        "final_difference": last["difference"],
        "spread": spread,
        "within_spread": None if spread is None else abs(last["difference"]) <= spread,
        "mean_training_time_s": {name: statistics.fmean(t) if t else None for name, t in times.items()},
    }


def format_table(result):
    a, b = result["programs"]

    def cell(figures):
        std = "" if figures["std"] is None else f" ± {100 * figures['std']:.2f}"
        return f"{100 * figures['mean']:.2f}{std}%"

    seeds = result["seeds"]
    lines = [f"test accuracy after each epoch: mean ± standard deviation over {seeds[a]} ({a}) and {seeds[b]} "
             f"({b}) seeds",
             f"{'epoch':>5}  {a:>18}  {b:>18}  {'difference':>11}"]
    for row in result["epochs"]:
        lines.append(f"{row['epoch']:>5}  {cell(row[a]):>18}  {cell(row[b]):>18}  "
                     f"{100 * row['difference']:>+8.2f} pts")
    verdict = "spread unknown: one seed per program gives no standard deviation"
    if result["spread"] is not None:
        where = "within" if result["within_spread"] else "OUTSIDE"
        verdict = (f"{where} the seed-to-seed spread (2 standard errors of the difference: "
                   f"{100 * result['spread']:.2f} points)")
    lines.append(f"final: {a} {cell(result['epochs'][-1][a])}, {b} {cell(result['epochs'][-1][b])}; difference "
                 f"{100 * result['final_difference']:+.2f} points, {verdict}")
    times = result["mean_training_time_s"]
    if all(times.values()):
        lines.append(f"mean training time: {a} {times[a]:.1f} s, {b} {times[b]:.1f} s")
    return "\n".join(lines)


def main(argv=None):
    p = cli.Parser(prog=PROG, description=__doc__.split("\n\n")[0])
    p.add_argument("runs", nargs="+", metavar="NAME=FILE", help="one seed's run of a program (two names)")
    p.add_argument("--json", metavar="FILE", help="write the figures there too")
    args = p.parse_args(argv)
    files = cli.named_files(p, args.runs)
    if len(files) != 2:
        p.error(f"expected runs of exactly two programs, got {len(files)}: {', '.join(files)}")
    try:
        result = compare({name: [read_run(path) for path in paths] for name, paths in files.items()})
    except ValueError as e:
        cli.fail(PROG, str(e))
    print(format_table(result))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()
