#!/usr/bin/env bash
# cpu_step.sh: cutrain's CPU training step beside PyTorch's, in milliseconds per step.
#
# Two configurations: full-width ResNet-18 at batch 32 (CIFAR stem), and the CPU quickstart's
# (width 16, batch 64; scripts/quickstart.sh). Each on one thread and on every core. For every
# (configuration, threads) pair the two programs run alternately, cutrain then PyTorch, --rounds
# times, so that a machine whose load changes treats them alike; the table gives the median of each
# and PyTorch's time over cutrain's (above 1: cutrain is faster). The machine's load average is
# printed before and after: on shared cores the figures are only as steady as it is.
set -euo pipefail

usage() {
  cat <<'EOF2'
usage: bench/cpu_step.sh [options]
  --rounds R     alternations of the two programs per row (default 3)
  --steps S      timed steps per run (default 3; 2 warm-up steps first)
  --threads LIST thread counts, comma-separated (default: 1 and every core)
  --bin DIR      where cutrain is (default: build/bin of this repository)
  --cutrain-only cutrain's column alone, without PyTorch
  -h, --help     this text
Environment: PYTHON is the interpreter with torch and torchvision (default: the project's environment).
EOF2
}

here="$(cd "$(dirname "$0")" && pwd)"
source "$here/../scripts/cli.sh"
source "$here/../scripts/python_env.sh"
rounds=3 steps=3 bin="$here/../build/bin" threads="1,$(nproc)" cutrain_only=0
while (($#)); do
  case "$1" in
    --rounds) rounds="$(value_of "$@")"; shift ;;
    --steps) steps="$(value_of "$@")"; shift ;;
    --threads) threads="$(value_of "$@")"; shift ;;
    --bin) bin="$(value_of "$@")"; shift ;;
    --cutrain-only) cutrain_only=1 ;;
    -h|--help) usage; exit 0 ;;
    *) bad_usage "unknown option '$1'" ;;
  esac
  shift
done
for n in "$rounds" "$steps" ${threads//,/ }; do
  [[ "$n" =~ ^[1-9][0-9]*$ ]] || bad_usage "'$n' is not a positive integer"
done
PYTHON="$(default_python)"
[ -x "$bin/cutrain" ] || die "$bin/cutrain: not found or not executable (build first, or pass --bin DIR)"
# The PyTorch side is checked before anything runs, not after cutrain's half of the table.
((cutrain_only)) || missing="$("$PYTHON" -c 'import torch, torchvision' 2>&1)" ||
  die "torch not importable: $(tail -n 1 <<<"$missing") ($PYTHON): $torch_help; --cutrain-only measures cutrain alone"

# median of the numbers on stdin
median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

echo "cpu_step: $(nproc) cores, $rounds rounds of $steps steps; load before: $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-28s %8s %14s %14s %8s\n' configuration threads "cutrain ms" "PyTorch ms" ratio
for config in "32 64" "64 16"; do
  read -r batch width <<<"$config"
  for t in ${threads//,/ }; do
    ours=() theirs=()
    for ((r = 0; r < rounds; r++)); do
      ours+=("$("$bin/cutrain" bench-step --device cpu --batch-size "$batch" --width "$width" --threads "$t" \
                --steps "$steps" --warmup 2 | sed -n 's| *\([0-9.]*\) ms/step.*|\1|p')")
      ((cutrain_only)) ||
        theirs+=("$("$PYTHON" "$here/torch_step.py" --batch-size "$batch" --width "$width" --threads "$t" \
                    --steps "$steps" --warmup 2 | sed -n 's|.*: \([0-9.]*\) ms/step.*|\1|p')")
    done
    a="$(printf '%s\n' "${ours[@]}" | median)"
    if ((cutrain_only)); then
      printf '%-28s %8d %14.1f %14s %8s\n' "batch $batch, width $width" "$t" "$a" - -
      continue
    fi
    b="$(printf '%s\n' "${theirs[@]}" | median)"
    printf '%-28s %8d %14.1f %14.1f %7.2fx\n' "batch $batch, width $width" "$t" "$a" "$b" \
      "$(awk -v a="$a" -v b="$b" 'BEGIN { print b / a }')"
  done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
