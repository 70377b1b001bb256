# cpu_recipe.sh: the CPU-sized recipe, stated once. scripts/quickstart.sh trains it where there is no
# GPU, and bench/accuracy.sh measures it over seeds with both programs (its defaults on the CPU).
#
# Note [The CPU recipe]
# ~~~~~~~~~~~~~~~~~~~~~
# ResNet-18 at a quarter of its width on 5,000 of the synthetic images, 5 epochs at batch 64, with a
# one-cycle learning rate (PyTorch's OneCycleLR: 0.002 rising on a cosine to 0.05 by epoch 1.5, then
# falling to nearly 0): about a minute of training on two idle cores. The synthetic task starts on a
# plateau at chance (a loss of ln 10), and how long a run stays there depends on the initial weights:
# about one seed in ten of either program is still near chance after epoch 2 and ends far below the
# others. The learning rates, warm-ups and batch sizes tried so far move the stalls to other seeds but
# do not remove them (bench/README.md, "Accuracy over seeds").
cpu_recipe=(--width 16 --synthetic-train 5000 --synthetic-test 1000 --epochs 5 --batch-size 64 --lr 0.05
            --lr-schedule onecycle --warmup-epochs 0)

# cpu_recipe_value FLAG: the recipe's value of FLAG.
cpu_recipe_value() {
  local i
  for ((i = 0; i < ${#cpu_recipe[@]}; i += 2)); do
    [[ ${cpu_recipe[i]} == "$1" ]] && { printf '%s' "${cpu_recipe[i + 1]}"; return 0; }
  done
  return 1
}
