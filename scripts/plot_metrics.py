#!/usr/bin/env python3
"""Training curves from metrics files (JSON lines written by `cutrain train --metrics` or the PyTorch
reference), several runs overlaid:

    scripts/plot_metrics.py run1.jsonl run2.jsonl -o curves.png [--labels cutrain,pytorch]

Top row against the global step (one point per logged step): loss, train accuracy, images/s and the
learning rate. Bottom row against the epoch, ticked on whole epochs: loss and accuracy, train (solid) and
test (dashed), images/s and the epoch's time. A file that several runs appended to is drawn as one line per
run ("label, run 2"), so that a run started afresh does not draw back to step 0; a resumed run is one run,
its repeated steps drawn once (bench/summarize.py read_runs).
Needs matplotlib (Debian's python3-matplotlib).
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench"))
import cli  # noqa: E402  (bench/cli.py: the one-line errors)
from summarize import read_runs  # noqa: E402  (bench/summarize.py: a metrics file's runs)

PROG = "plot_metrics.py"


def read_file(path, label):
    """-> {run label: (step records, epoch records)}, one entry per run in the file. Raises ValueError naming
    the file (and line)."""
    runs = [([r for r in run if r.get("kind") == "step"], [r for r in run if r.get("kind") == "epoch"])
            for run in read_runs(path)]
    runs = [(steps, epochs) for steps, epochs in runs if steps or epochs]
    if not runs:
        raise ValueError(f"{path}: no step or epoch records")
    if len(runs) == 1:
        return {label: runs[0]}
    return {f"{label}, run {i + 1}": run for i, run in enumerate(runs)}


# The panels: (row, column) -> (title, y label); the top row is against the global step, the bottom one
# against the epoch.
PANELS = {
    (0, 0): ("loss per step", "loss"),
    (0, 1): ("train accuracy per step", "accuracy (%)"),
    (0, 2): ("images/s per step", "images/s"),
    (0, 3): ("learning rate per step", "learning rate"),
    (1, 0): ("loss per epoch (test dashed)", "loss"),
    (1, 1): ("accuracy per epoch (test dashed)", "accuracy (%)"),
    (1, 2): ("images/s per epoch", "images/s"),
    (1, 3): ("time per epoch", "seconds"),
}


def figure(runs):
    """The curves of `runs` ({label: (step records, epoch records)}) as a matplotlib figure."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    fig, axes = plt.subplots(2, 4, figsize=(20, 8))
    for (label, (steps, epochs)), colour in zip(runs.items(), plt.rcParams["axes.prop_cycle"].by_key()["color"] * 9):
        x = [r["global_step"] for r in steps]
        for col, y in enumerate([[r["loss"] for r in steps], [100 * r["acc"] for r in steps],
                                 [r["images_per_s"] for r in steps], [r["lr"] for r in steps]]):
            axes[0, col].plot(x, y, ".-", color=colour, label=label)
        e = [r["epoch"] for r in epochs]
        for col, key, scale in [(0, "loss", 1), (1, "acc", 100)]:
            axes[1, col].plot(e, [scale * r[key] for r in epochs], "o-", color=colour, label=f"{label} train")
            tested = [r for r in epochs if r.get(f"test_{key}") is not None]
            if tested:
                axes[1, col].plot([r["epoch"] for r in tested], [scale * r[f"test_{key}"] for r in tested], "s--",
                                  color=colour, label=f"{label} test")
        axes[1, 2].plot(e, [r["images_per_s"] for r in epochs], "o-", color=colour, label=label)
        axes[1, 3].plot(e, [r["epoch_time_s"] for r in epochs], "o-", color=colour, label=label)
    for (row, col), (title, ylabel) in PANELS.items():
        ax = axes[row, col]
        ax.set_title(title)
        ax.set_xlabel("global step" if row == 0 else "epoch")
        ax.set_ylabel(ylabel)
        if row == 1:
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def main():
    p = cli.Parser(prog=PROG, description=__doc__.split("\n\n")[0])
    p.add_argument("metrics", nargs="+", metavar="METRICS.jsonl")
    p.add_argument("-o", "--output", default="curves.png", help="PNG to write (default curves.png)")
    p.add_argument("--labels", help="comma-separated names of the files' runs (default: the file names)")
    args = p.parse_args()
    labels = args.labels.split(",") if args.labels else \
        [os.path.basename(m).removesuffix(".jsonl") for m in args.metrics]
    if len(labels) != len(args.metrics):
        p.error(f"--labels names {len(labels)} runs, but {len(args.metrics)} files are given")
    if len(set(labels)) != len(labels):
        labels = [f"{i + 1}: {label}" for i, label in enumerate(labels)]
    runs = {}
    try:
        for label, path in zip(labels, args.metrics):
            runs.update(read_file(path, label))
    except ValueError as e:
        cli.fail(PROG, str(e))
    cli.use_python_with("matplotlib", PROG)
    import matplotlib.pyplot as plt
    fig = figure(runs)
    fig.savefig(args.output, dpi=100)
    plt.close(fig)
    print(f"{PROG}: {len(runs)} run(s) -> {args.output}")


if __name__ == "__main__":
    main()
