#!/usr/bin/env python3
"""Training curves from metrics files (JSON lines written by `cutrain train --metrics` or the PyTorch
reference), several runs overlaid:

    scripts/plot_metrics.py run1.jsonl run2.jsonl -o curves.png [--labels cutrain,pytorch]

Top row against the global step (one point per logged step): loss, train accuracy, images/s.
Bottom row against the epoch: loss, train accuracy and test accuracy (dashed), images/s.
Needs matplotlib (Debian's python3-matplotlib).
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench"))
import cli  # noqa: E402  (bench/cli.py: the one-line errors)
from summarize import read_metrics  # noqa: E402  (bench/summarize.py: a metrics file's records)

PROG = "plot_metrics.py"


def read_run(path):
    """-> (step records, epoch records). Raises ValueError naming the file (and line)."""
    records = read_metrics(path)
    steps = [r for r in records if r.get("kind") == "step"]
    epochs = [r for r in records if r.get("kind") == "epoch"]
    if not steps and not epochs:
        raise ValueError(f"{path}: no step or epoch records")
    return steps, epochs


def plot(runs, output):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 3, figsize=(15, 8))
    for (label, (steps, epochs)), colour in zip(runs.items(), plt.rcParams["axes.prop_cycle"].by_key()["color"] * 9):
        x = [r["global_step"] for r in steps]
        axes[0, 0].plot(x, [r["loss"] for r in steps], ".-", color=colour, label=label)
        axes[0, 1].plot(x, [100 * r["acc"] for r in steps], ".-", color=colour, label=label)
        axes[0, 2].plot(x, [r["images_per_s"] for r in steps], ".-", color=colour, label=label)
        e = [r["epoch"] for r in epochs]
        axes[1, 0].plot(e, [r["loss"] for r in epochs], "o-", color=colour, label=label)
        axes[1, 1].plot(e, [100 * r["acc"] for r in epochs], "o-", color=colour, label=f"{label} train")
        tested = [r for r in epochs if r.get("test_acc") is not None]
        axes[1, 1].plot([r["epoch"] for r in tested], [100 * r["test_acc"] for r in tested], "s--", color=colour,
                        label=f"{label} test")
        axes[1, 2].plot(e, [r["images_per_s"] for r in epochs], "o-", color=colour, label=label)
    titles = [["loss", "train accuracy (%)", "images/s"], ["loss", "accuracy (%)", "images/s"]]
    for row, xlabel in enumerate(["global step", "epoch"]):
        for col in range(3):
            ax = axes[row, col]
            ax.set_title(f"{titles[row][col]} per {xlabel.split()[-1]}")
            ax.set_xlabel(xlabel)
            ax.grid(alpha=0.3)
            ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(output, dpi=100)
    plt.close(fig)


def main():
    p = cli.Parser(prog=PROG, description=__doc__.split("\n\n")[0])
    p.add_argument("metrics", nargs="+", metavar="METRICS.jsonl")
    p.add_argument("-o", "--output", default="curves.png", help="PNG to write (default curves.png)")
    p.add_argument("--labels", help="comma-separated names of the runs (default: the file names)")
    args = p.parse_args()
    labels = args.labels.split(",") if args.labels else \
        [os.path.basename(m).removesuffix(".jsonl") for m in args.metrics]
    if len(labels) != len(args.metrics):
        p.error(f"--labels names {len(labels)} runs, but {len(args.metrics)} files are given")
    if len(set(labels)) != len(labels):
        labels = [f"{i + 1}: {label}" for i, label in enumerate(labels)]
    try:
        runs = {label: read_run(path) for label, path in zip(labels, args.metrics)}
    except ValueError as e:
        cli.fail(PROG, str(e))
    try:
        import matplotlib  # noqa: F401
    except ImportError as e:
        cli.fail(PROG, f"matplotlib not importable ({e}); install python3-matplotlib or use /usr/bin/python3")
    plot(runs, args.output)
    print(f"{PROG}: {len(runs)} run(s) -> {args.output}")


if __name__ == "__main__":
    main()
