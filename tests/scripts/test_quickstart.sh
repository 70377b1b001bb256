# scripts/quickstart.sh with stand-ins for setup, build and cutrain: it builds the trainer alone,
# trains the CPU recipe (scripts/cpu_recipe.sh) where there is no GPU, and ends with the commands that
# evaluate, plot and resume it, but only after a run that succeeded; a failed run's status is the
# quickstart's.
source "$(dirname "$0")/common.sh"
copy="$scratch/repo"
mkdir -p "$copy/scripts" "$copy/build/bin"
cp "$repo/scripts/quickstart.sh" "$repo/scripts/cpu_recipe.sh" "$copy/scripts/"
printf '#!/bin/sh\necho "setup: nothing to install"\n' >"$copy/scripts/setup.sh"
printf '#!/bin/sh\necho "$*" >"%s/build-args"\n' "$scratch" >"$copy/scripts/build.sh"
cat >"$copy/build/bin/cutrain" <<STUB
#!/bin/sh
[ "\$1" = info ] && { echo "cutrain test stand-in"; exit 0; }
echo "train: \$*" >"$scratch/train-args"
exit "\${STUB_EXIT:-0}"
STUB
chmod +x "$copy/scripts/"*.sh "$copy/build/bin/cutrain"

bash "$copy/scripts/quickstart.sh" >"$scratch/out" 2>&1 || fail "the quickstart failed: $(cat "$scratch/out")"
[ "$(cat "$scratch/build-args")" = "--target cutrain" ] ||
  fail "the quickstart built '$(cat "$scratch/build-args")', not the trainer alone (--target cutrain)"
source "$repo/scripts/cpu_recipe.sh"
grep -qF -- "--device cpu ${cpu_recipe[*]}" "$scratch/train-args" && grep -q -- "--new-run" "$scratch/train-args" ||
  fail "the CPU-sized run was not scripts/cpu_recipe.sh's, started as a new run: $(cat "$scratch/train-args")"
grep -qF -- "--lr $(cpu_recipe_value --lr) " "$scratch/train-args" || fail "cpu_recipe_value does not read the recipe"
for next in "quickstart: what next:" "build/bin/cutrain eval --checkpoint runs/quickstart/checkpoint-last.safetensors" \
            "scripts/plot_metrics.py runs/quickstart.jsonl -o runs/quickstart.png" "scripts/quickstart.sh --resume auto"; do
  grep -qF -- "$next" "$scratch/out" || fail "the quickstart's last lines do not say '$next': $(cat "$scratch/out")"
done

status=0
STUB_EXIT=3 bash "$copy/scripts/quickstart.sh" >"$scratch/out" 2>&1 || status=$?
[ "$status" = 3 ] || fail "a failed run gave the quickstart status $status, not its own 3"
! grep -q "what next" "$scratch/out" || fail "a failed run still printed what to do next"
echo "ok: the quickstart builds the trainer alone, trains, and then says how to evaluate, plot and resume"
