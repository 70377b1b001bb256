#!/usr/bin/env bash
# README's first command: installs what is needed, builds, and trains ResNet-18 on the embedded
# default, a synthetic CIFAR-format dataset (made once, cached in ~/.cache/cutrain).
#
# With a GPU it runs the reference recipe as is (20 epochs, batch 256, bf16). Without one it runs
# a CPU-sized version that trains in about two and a half minutes on two idle cores (after the
# first build, which takes about three) and visibly learns: a narrower network (width 16), a tenth
# of the data, five epochs with a one-cycle learning rate.
# Extra arguments go to `cutrain train`, e.g. scripts/quickstart.sh --data path/to/cifar-10-batches-bin
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
mkdir -p runs
# Each run of the quickstart is a new one in runs/quickstart, unless it is told to --resume.
case " $* " in *" --resume"*) ;; *) set -- --new-run "$@" ;; esac
if build/bin/cutrain info | grep -q '^cuda:'; then
  exec build/bin/cutrain train --metrics runs/quickstart.jsonl --save runs/quickstart "$@"
fi
echo "quickstart: no GPU on this machine, so a CPU-sized run (width 16, 5000 images, 5 epochs)"
exec build/bin/cutrain train --device cpu --width 16 --synthetic-train 5000 --synthetic-test 1000 \
  --epochs 5 --batch-size 64 --lr 0.05 --lr-schedule onecycle --log-every 10 \
  --metrics runs/quickstart.jsonl --save runs/quickstart "$@"
