# plan_choices.sh (sourced by package-prebuilt.sh and gpu-check.sh): the emulated plan's estimate for each batch
# norm and stream choice, on one rank and on two.
#
# plan_choices CUTRAIN: one line per choice, "plan choice: R rank(s), BATCHNORM, S stream(s): estimated Z ms/step",
# from CUTRAIN's `bench-step --plan` (the emulated build's, bf16, batch 256, full width). The estimate sums each
# operation's roofline time one after another (emu/plan/step_plan.h): it weighs the batch norms by the bytes they
# move, but credits neither two streams' overlap nor the cooperative kernel's hold on the whole GPU, and leaves
# the collectives out, so it cannot say which stream choice wins, nor what a running all-reduce costs either
# batch norm: the GPU's matrix must.
plan_choices() {
  local ranks batchnorm streams estimate
  for ranks in 1 2; do
    for batchnorm in cooperative split; do
      for streams in 1 2; do
        estimate="$("$1" bench-step --plan --stem cifar --precision bf16 --batch-size 256 --world-size "$ranks" \
          --batchnorm "$batchnorm" --streams "$streams" | sed -nE 's/^plan: .*estimated ([0-9.]+) ms\/step.*/\1/p')" ||
          return 1
        echo "plan choice: $ranks rank(s), $batchnorm, $streams stream(s): estimated $estimate ms/step"
      done
    done
  done
}
