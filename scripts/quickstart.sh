#!/usr/bin/env bash
# README's first command: installs what is needed, builds, and trains ResNet-18 on the embedded
# default, a synthetic CIFAR-format dataset (made once, cached in ~/.cache/cutrain).
#
# With a GPU it runs the reference recipe as is (20 epochs, batch 256, bf16). Without one it runs
# a CPU-sized version (scripts/cpu_recipe.sh) that trains in a little over a minute on two idle cores
# (after the first build, which takes about three) and visibly learns: a narrower network (width 16), a
# fifth of the data, three epochs with a one-cycle learning rate.
# Extra arguments go to `cutrain train`, e.g. scripts/quickstart.sh --data path/to/cifar-10-batches-bin
# It builds only the trainer (the tests are scripts/test.sh's), and ends with the commands that
# evaluate the run, plot it and resume it.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh --target cutrain
mkdir -p runs
# Each run of the quickstart is a new one in runs/quickstart, unless it is told to --resume.
case " $* " in *" --resume"*) ;; *) set -- --new-run "$@" ;; esac
if build/bin/cutrain info | grep -q '^cuda:'; then
  build/bin/cutrain train --metrics runs/quickstart.jsonl --save runs/quickstart "$@"
else
  source scripts/cpu_recipe.sh
  echo "quickstart: no GPU on this machine, so a CPU-sized run (scripts/cpu_recipe.sh): ${cpu_recipe[*]}"
  build/bin/cutrain train --device cpu "${cpu_recipe[@]}" --log-every 10 \
    --metrics runs/quickstart.jsonl --save runs/quickstart "$@"
fi
# After a finished run, or one stopped by Ctrl-C (which saves and exits 0).
cat <<'NEXT'
quickstart: what next:
  build/bin/cutrain eval --checkpoint runs/quickstart/checkpoint-last.safetensors   # its test accuracy, per class
  scripts/plot_metrics.py runs/quickstart.jsonl -o runs/quickstart.png              # its curves
  scripts/quickstart.sh --resume auto                                               # go on after a stop
NEXT
