# torchrun on two hosts (two network namespaces, tests/scripts/two_hosts.sh), through its c10d rendezvous:
# `torchrun --nnodes 2 --nproc-per-node 2 --rdzv-backend c10d --rdzv-endpoint 169.254.77.1:29400` on each,
# 2 CPU ranks per node over Gloo, meeting at the agents' store (Note [torchrun's store] in
# dist/launch/torch_store.h): the checkpoint is the one-node 4-rank run's, bit for bit, every tensor.
# Then the same with --max-restarts 3 and --resume auto --save-every-steps 1, where random ranks (a seed,
# printed; SEED=N repeats it) are SIGKILLed twice, each after a random number of step lines: the job ends
# where the uninterrupted one-node run ends, bit for bit.
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

# --- Restarts: random ranks SIGKILLed twice ------------------------------------------------------------
seed="${SEED:-$RANDOM}"
echo "restarts: seed $seed (SEED=$seed repeats it)"
RANDOM="$seed"
# 40 steps of 4 images on each of 4 ranks, each saved.
long=("${train[@]:0:12}" --epochs 10 "${train[@]:16}" --resume auto --save-every-steps 1)
"$bin/cutrun" --standalone --nproc-per-node 4 "${long[@]}" --save "$scratch/straight" >"$scratch/straight.log" 2>&1 ||
  fail "the uninterrupted one-node run failed: $(tail -5 "$scratch/straight.log")"
for n in 0 1; do
  on "$n" "${torchrun[@]/torchrun-two-nodes/torchrun-restarts}" --max-restarts 3 "${long[@]}" \
    --save "$scratch/faulty" >"$scratch/faulty$n.log" 2>&1 &
  pids[$n]=$!
done
# lines PATTERN: how many lines of both nodes' logs match.
lines() { cat "$scratch/faulty0.log" "$scratch/faulty1.log" | grep -c -- "$1" || true; }
# wait_for PATTERN COUNT: until COUNT lines match, or a node's torchrun has ended.
wait_for() {
  until (($(lines "$1") >= $2)); do
    kill -0 "${pids[0]}" 2>/dev/null && kill -0 "${pids[1]}" 2>/dev/null ||
      fail "restarts: a node ended while waiting for '$1': $(tail -20 "$scratch/faulty0.log" "$scratch/faulty1.log")"
    sleep 0.1
  done
}
for kill in 1 2; do
  wait_for "resumed from\|== step" 0
  wait_for "== step" $(($(lines "== step") + 1 + RANDOM % 3))
  n=$((RANDOM % 2))
  ranks=()
  for pid in $(ip netns pids "${ns[$n]}"); do [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = cutrain ] && ranks+=("$pid"); done
  ((${#ranks[@]} == 2)) || fail "restarts: ${#ranks[@]} ranks on node $n, not 2"
  victim="${ranks[$((RANDOM % 2))]}"
  rank="$(tr '\0' '\n' <"/proc/$victim/environ" | sed -n 's/^RANK=//p')"
  echo "restarts: kill $kill: SIGKILL to rank $rank (pid $victim) on node $n after $(lines "== step") step lines"
  kill -KILL "$victim"
  wait_for "resumed from" "$kill"
done
for n in 0 1; do wait "${pids[$n]}" || fail "restarts: node $n failed: $(tail -20 "$scratch/faulty$n.log")"; done
last=checkpoint-00000040.safetensors
for file in "$last" "${last/.safetensors/.optim.safetensors}"; do
  same_tensors "$scratch/straight/$file" "$scratch/faulty/$file" ||
    fail "restarts: $file differs from the uninterrupted run's"
done
echo "restarts: 2 random SIGKILLs, $(lines "resumed from") resumes; step 40's checkpoint identical to the" \
  "uninterrupted one-node 4-rank run's"
