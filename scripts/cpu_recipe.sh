# cpu_recipe.sh: the CPU-sized recipe, stated once. scripts/quickstart.sh trains it where there is no
# GPU, and bench/accuracy.sh measures it over seeds with both programs (its defaults on the CPU).
#
# Note [The CPU recipe]
# ~~~~~~~~~~~~~~~~~~~~~
# ResNet-18 at a quarter of its width on 10,000 of the synthetic images, 3 epochs at batch 64, with a
# one-cycle learning rate (PyTorch's OneCycleLR: 0.002 rising on a cosine to 0.05 by epoch 0.9, then
# falling to nearly 0): a little over a minute of training on two idle cores. The synthetic task starts
# on a plateau at chance (a loss of ln 10), and how long a run stays there depends on the initial
# weights and on the run's draws: a few runs are still near chance after 10,000 images. With 5,000
# images an epoch (5 epochs), about one seed in ten was then near chance after epoch 2 and ended far
# below the others, and no learning rate, warm-up or batch size tried removed that; with 10,000 an
# epoch, every run of 20 seeds of either program has left the plateau by the end of epoch 2, and the
# mean is higher (bench/README.md, "Accuracy over seeds").
cpu_recipe=(--width 16 --synthetic-train 10000 --synthetic-test 1000 --epochs 3 --batch-size 64 --lr 0.05
            --lr-schedule onecycle --warmup-epochs 0)

# cpu_recipe_value FLAG: the recipe's value of FLAG.
cpu_recipe_value() {
  local i
  for ((i = 0; i < ${#cpu_recipe[@]}; i += 2)); do
    [[ ${cpu_recipe[i]} == "$1" ]] && { printf '%s' "${cpu_recipe[i + 1]}"; return 0; }
  done
  return 1
}
