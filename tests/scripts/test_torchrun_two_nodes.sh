# torchrun on two hosts (two network namespaces, tests/scripts/two_hosts.sh), through its c10d rendezvous:
# `torchrun --nnodes 2 --nproc-per-node 2 --rdzv-backend c10d --rdzv-endpoint 169.254.77.1:29400` on each,
# 2 CPU ranks per node over Gloo, meeting at the agents' store (Note [torchrun's store] in
# dist/launch/torch_store.h): the checkpoint is the one-node 4-rank run's, bit for bit, every tensor.
source "$(dirname "$0")/common.sh"
require_python torch
[ -x "$bin/cutrain" ] || skip "no cutrain binary in $bin"
source "$(dirname "$0")/two_hosts.sh"
two_hosts "torchrun two-node test"

train=("$bin/cutrain" train --device cpu --width 8 --batch-size 4 --synthetic-train 64 --synthetic-test 8
  --epochs 1 --max-steps 3 --eval-every 0 --lr 0.002 --sync-bn --workers 1 --log-every 1)
checkpoint=checkpoint-00000003.safetensors

"$bin/cutrun" --standalone --nproc-per-node 4 "${train[@]}" --save "$scratch/one" >"$scratch/one.log" 2>&1 ||
  fail "the one-node 4-rank run failed: $(tail -5 "$scratch/one.log")"

torchrun=("$py" -m torch.distributed.run --nnodes 2 --nproc-per-node 2 --rdzv-backend c10d
  --rdzv-endpoint "${addr[0]}:29400" --rdzv-id torchrun-two-nodes --no-python)
start=$(date +%s%N)
for n in 0 1; do
  on "$n" "${torchrun[@]}" "${train[@]}" --save "$scratch/two" >"$scratch/two$n.log" 2>&1 &
  pids[$n]=$!
done
for n in 0 1; do wait "${pids[$n]}" || fail "torchrun, node $n failed: $(tail -20 "$scratch/two$n.log")"; done
seconds=$(( ($(date +%s%N) - start) / 1000000 ))
cat "$scratch/two0.log" "$scratch/two1.log" >"$scratch/two.log"
grep -q "parameters identical on all 4 ranks" "$scratch/two.log" ||
  fail "torchrun: no replica check line in: $(cat "$scratch/two.log")"
for n in 0 1; do
  grep -qE "^  rank [0-3]: cpu on ${host[$n]}, ${addr[$n]} \(${veth[$n]}\)$" "$scratch/two.log" ||
    fail "torchrun: the banner puts no rank on ${host[$n]}: $(cat "$scratch/two.log")"
done
same_tensors "$scratch/one/$checkpoint" "$scratch/two/$checkpoint" ||
  fail "torchrun: the checkpoint after 3 steps differs from the one-node 4-rank run's"
echo "two nodes x 2 ranks (torchrun, c10d rendezvous): 3 steps, $((seconds / 1000)).$((seconds % 1000 / 100)) s" \
  "from start to end; parameters identical on all 4 ranks; checkpoint identical to the one-node 4-rank run's"
