#!/usr/bin/env python3
"""Test accuracy of two programs over seeds, epoch by epoch, from their runs' metrics files (JSON lines).

    accuracy_table.py cutrain=runs/cutrain-seed0.jsonl pytorch=runs/pytorch-seed0.jsonl \\
                      cutrain=runs/cutrain-seed1.jsonl pytorch=runs/pytorch-seed1.jsonl ... [--json FILE]

Each NAME=FILE is one seed's run; exactly two names. Per epoch, each program's test accuracy (the epoch
records' test_acc) as mean +- sample standard deviation over its seeds, and the difference of the means. The
final difference is within the seed-to-seed spread when it is at most 2 standard errors of the difference of
two means, 2 sqrt(s1^2/n1 + s2^2/n2): about the band in which two programs with the same mean accuracy land
19 times out of 20. Welch's t-test on the final accuracies gives t, its degrees of freedom and the two-sided p
(the chance of a difference at least this large between two programs with the same mean). Then the two
distributions: each seed's final accuracy, and how many seeds of each program were still near chance (within
5 points of 1/classes, --classes) after epoch 2. Only the standard library is needed.
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


def incomplete_beta(a, b, x):
    """The regularized incomplete beta function I_x(a, b), by its continued fraction (Numerical Recipes 6.4)."""
    if x <= 0 or x >= 1:
        return 0.0 if x <= 0 else 1.0
    if x > (a + 1) / (a + b + 2):  # the fraction converges fast below this point: use the symmetry
        return 1.0 - incomplete_beta(b, a, 1.0 - x)
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log(1 - x)) / a
    c, d, f = 1.0, 0.0, 1.0  # Lentz's method for 1/(1 + d1/(1 + d2/(1 + ...)))
    for i in range(400):
        m = i // 2
        if i == 0:
            numerator = 1.0
        elif i % 2 == 0:
            numerator = m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m))
        else:
            numerator = -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))
        d = 1.0 + numerator * d
        d = 1.0 / (d if abs(d) > 1e-300 else 1e-300)
        c = 1.0 + numerator / c
        c = c if abs(c) > 1e-300 else 1e-300
        f *= c * d
        if abs(c * d - 1.0) < 1e-14:
            break
    return front * (f - 1.0)


def welch(a_values, b_values):
    """Welch's t-test of two samples' means -> {t, df, p} (p two-sided), or None when either has one value
    or both have no spread."""
    na, nb = len(a_values), len(b_values)
    if na < 2 or nb < 2:
        return None
    va, vb = statistics.variance(a_values) / na, statistics.variance(b_values) / nb
    if va + vb == 0:
        return None
    t = (statistics.fmean(a_values) - statistics.fmean(b_values)) / math.sqrt(va + vb)
    df = (va + vb) ** 2 / (va**2 / (na - 1) + vb**2 / (nb - 1))
    return {"t": t, "df": df, "p": incomplete_beta(df / 2, 0.5, df / (df + t * t))}


def compare(runs, classes=10):
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
    finals = {name: [accs[last["epoch"]] for accs, _ in rs] for name, rs in runs.items()}
    near_chance = {name: sum(1 for accs, _ in rs if accs.get(2) is not None and accs[2] <= 1 / classes + 0.05)
                   for name, rs in runs.items()} if 2 in epochs else None
    times = {name: [s["training_time_s"] for _, s in rs if s.get("training_time_s") is not None]
             for name, rs in runs.items()}
    return {
        "programs": [a, b],
        "seeds": {a: len(a_runs), b: len(b_runs)},
        "epochs": rows,
        "final_difference": last["difference"],
        "spread": spread,
        "within_spread": None if spread is None else abs(last["difference"]) <= spread,
        "welch": welch(finals[a], finals[b]),
        "final_accuracies": finals,
        "near_chance_after_epoch_2": near_chance,
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
    w = result["welch"]
    lines.append("Welch's t-test: one seed per program or no spread: no test" if w is None else
                 f"Welch's t-test: t = {w['t']:+.3f}, {w['df']:.1f} degrees of freedom, p = {w['p']:.3f} "
                 f"({'significant' if w['p'] < 0.05 else 'not significant'} at 0.05)")
    for name in (a, b):
        lines.append(f"{name} per seed: " + " ".join(f"{100 * v:.2f}" for v in result["final_accuracies"][name]))
    near = result["near_chance_after_epoch_2"]
    if near is not None:
        lines.append(f"near chance after epoch 2: {a} {near[a]} of {seeds[a]} seeds, {b} {near[b]} of {seeds[b]}")
    times = result["mean_training_time_s"]
    if all(times.values()):
        lines.append(f"mean training time: {a} {times[a]:.1f} s, {b} {times[b]:.1f} s")
    return "\n".join(lines)


def main(argv=None):
    p = cli.Parser(prog=PROG, description=__doc__.split("\n\n")[0])
    p.add_argument("runs", nargs="+", metavar="NAME=FILE", help="one seed's run of a program (two names)")
    p.add_argument("--json", metavar="FILE", help="write the figures there too")
    p.add_argument("--classes", type=int, default=10, help="classes of the data: chance is 1/classes (default 10)")
    args = p.parse_args(argv)
    files = cli.named_files(p, args.runs)
    if len(files) != 2:
        p.error(f"expected runs of exactly two programs, got {len(files)}: {', '.join(files)}")
    try:
        result = compare({name: [read_run(path) for path in paths] for name, paths in files.items()}, args.classes)
    except ValueError as e:
        cli.fail(PROG, str(e))
    print(format_table(result))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()
