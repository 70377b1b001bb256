#!/usr/bin/env python3
"""cutrain's fastest configuration against PyTorch eager and torch.compile, beside the project's targets.

    speed_targets.py MATRIX_LOG [--results results.json]

MATRIX_LOG is the output of `cutrain bench-step --matrix`; its fastest row (the smallest median ms/step)
is cutrain's figure. results.json is bench/compare.sh's (bench/summarize.py): the images/s of its
torch-eager-bf16-cl and torch-compile-bf16-cl runs. The ratio is cutrain's images/s over PyTorch's, and
the targets are:
  >= 2.0x PyTorch eager (bf16, channels_last), >= 1.3x torch.compile, >= 35% of the GPU's bf16 peak.
The two sides are not timed alike: bench-step times the step alone on a fixed batch, where compare.sh's
PyTorch runs are trainings with their data on the GPU, so the ratio flatters cutrain by whatever a
training spends beside the step. Without results.json (no GPU, or compare did not finish) the PyTorch
rows say so, and the peak's row still stands. Only the standard library is needed.
"""
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cli  # noqa: E402

PROG = "speed_targets.py"
TARGETS = {"torch-eager-bf16-cl": 2.0, "torch-compile-bf16-cl": 1.3}
PEAK_TARGET = 35.0  # percent of the bf16 peak

# A row of bench-step --matrix: batch norm, streams, graph, ms/step, fastest, slowest, images/s, % of peak, plan ms
ROW = re.compile(r"^  (\w+) +(\d+) +(eager|graph) +([0-9.]+) +[0-9.]+ +[0-9.]+ +([0-9.]+) +([0-9.]+) +\S+$")


def fastest_row(text):
    """The matrix's row with the smallest median ms/step, as a dict; raises ValueError without rows."""
    rows = []
    for line in text.splitlines():
        m = ROW.match(line)
        if m:
            rows.append({"config": f"{m[1]}, {m[2]} stream{'s' if m[2] != '1' else ''}, {m[3]}",
                         "ms_per_step": float(m[4]), "images_per_s": float(m[5]), "peak_percent": float(m[6])})
    if not rows:
        raise ValueError("no rows of bench-step --matrix in it")
    return min(rows, key=lambda r: r["ms_per_step"])


def table(best, runs):
    """The lines of the table: cutrain's row, one per PyTorch configuration, and the peak's."""
    lines = ["the best configuration against PyTorch (bf16; ratio: cutrain's images/s over the other's)",
             f"  {'run':<40} {'ms/step':>8} {'images/s':>10} {'ratio':>7} {'target':>8} {'met':>4}",
             f"  {'cutrain ' + best['config']:<40} {best['ms_per_step']:>8.2f} {best['images_per_s']:>10.0f} "
             f"{'-':>7} {'-':>8} {'-':>4}"]
    for name, target in TARGETS.items():
        run = runs.get(name)
        if run is None:
            lines.append(f"  {name:<40} {'-':>8} {'-':>10} {'-':>7} {f'>= {target}x':>8} {'?':>4}")
            continue
        ratio = best["images_per_s"] / run["images_per_s"]
        lines.append(f"  {name:<40} {run['ms_per_step']:>8.2f} {run['images_per_s']:>10.0f} {ratio:>6.2f}x "
                     f"{f'>= {target}x':>8} {'yes' if ratio >= target else 'no':>4}")
    share = best["peak_percent"]
    lines.append(f"  {'cutrain: share of the bf16 peak':<40} {'':>8} {'':>10} {share:>6.1f}% "
                 f"{f'>= {PEAK_TARGET:g}%':>8} {'yes' if share >= PEAK_TARGET else 'no':>4}")
    return lines


def main(argv=None):
    p = cli.Parser(prog=PROG, description=__doc__.split("\n\n")[0])
    p.add_argument("matrix", metavar="MATRIX_LOG", help="the output of cutrain bench-step --matrix")
    p.add_argument("--results", metavar="FILE", help="bench/compare.sh's results.json")
    args = p.parse_args(argv)
    try:
        with open(args.matrix) as f:
            best = fastest_row(f.read())
    except (OSError, ValueError) as e:
        cli.fail(PROG, f"{args.matrix}: {e}")
    runs, missing = {}, "no --results given"
    if args.results:
        try:
            with open(args.results) as f:
                runs = json.load(f)["runs"]
            missing = ", ".join(n for n in TARGETS if n not in runs)
        except (OSError, ValueError, KeyError, TypeError) as e:
            missing = f"{args.results}: {e}"
    print("\n".join(table(best, runs)))
    if missing:
        print(f"  PyTorch's figures are missing ({missing}): bench/compare.sh --quick gives them on a GPU")


if __name__ == "__main__":
    main()
