# Two nodes that are really two hosts (two network namespaces, tests/scripts/two_hosts.sh).
#   1. cutrun --nnodes 2 --node-rank 0|1 --master-addr 169.254.77.1 on each, 2 CPU ranks per node
#      over Gloo: the replica check passes, and the checkpoint is the one-node 4-rank run's, bit for bit.
#   2. The same job as srun starts it, without cutrun: four cutrain processes with Slurm's variables
#      set by hand, the master found by expanding SLURM_STEP_NODELIST.
#   3. Four ways to get it wrong, each ending within the rendezvous timeout with a line naming what
#      is missing: node 1 given a wrong master address, another --rdzv-id, never started, another
#      --nproc-per-node.
source "$(dirname "$0")/common.sh"

source "$(dirname "$0")/two_hosts.sh"
two_hosts "two-node test"
timeout_s=5  # the rendezvous timeout of the failure cases

train=("$bin/cutrain" train --device cpu --width 8 --batch-size 4 --synthetic-train 64 --synthetic-test 8
  --epochs 1 --max-steps 3 --eval-every 0 --lr 0.002 --sync-bn --workers 1 --log-every 1)
checkpoint=checkpoint-00000003.safetensors

# --- 1. cutrun by hand on two hosts, against one host with four ranks -------------------------------
"$bin/cutrun" --standalone --nproc-per-node 4 "${train[@]}" --save "$scratch/one" >"$scratch/one.log" 2>&1 ||
  fail "the one-node 4-rank run failed: $(tail -5 "$scratch/one.log")"

two_nodes=("$bin/cutrun" --nnodes 2 --nproc-per-node 2 --master-addr "${addr[0]}" --master-port 29400
  --rdzv-id two-nodes --rdzv-timeout 60)
start=$(date +%s%N)
for n in 0 1; do
  on "$n" "${two_nodes[@]}" --node-rank "$n" "${train[@]}" --save "$scratch/two" >"$scratch/two$n.log" 2>&1 &
  pids[$n]=$!
done
for n in 0 1; do wait "${pids[$n]}" || fail "two nodes: node $n failed: $(tail -5 "$scratch/two$n.log")"; done
seconds=$(( ($(date +%s%N) - start) / 1000000 ))

grep -q "^\[rank0\]: parameters identical on all 4 ranks" "$scratch/two0.log" ||
  fail "two nodes: no replica check line in: $(cat "$scratch/two0.log")"
for r in 0 1 2 3; do
  n=$((r / 2))
  grep -q "^\[rank0\]:   rank $r: cpu on ${host[$n]}, ${addr[$n]} (${veth[$n]})$" "$scratch/two0.log" ||
    fail "two nodes: the banner does not put rank $r on ${host[$n]}, ${addr[$n]} (${veth[$n]}):" \
      "$(cat "$scratch/two0.log")"
done
same_tensors "$scratch/one/$checkpoint" "$scratch/two/$checkpoint" ||
  fail "two nodes: the checkpoint after 3 steps differs from the one-node 4-rank run's"
echo "two nodes x 2 ranks (cutrun): 3 steps, $((seconds / 1000)).$((seconds % 1000 / 100)) s from start to end;" \
  "$(grep -o 'parameters identical on all 4 ranks' "$scratch/two0.log");" \
  "checkpoint identical to the one-node 4-rank run's"
grep -E "^\[rank0\]:   rank [0-9]:|done in" "$scratch/two0.log"

# --- 2. srun without a launcher: Slurm's variables, set by hand --------------------------------------
for r in 0 1 2 3; do
  n=$((r / 2))
  on "$n" env -u RANK -u WORLD_SIZE -u MASTER_ADDR -u MASTER_PORT \
    SLURM_JOB_ID=4242 SLURM_STEP_ID=0 SLURM_PROCID=$r SLURM_LOCALID=$((r % 2)) SLURM_NODEID=$n SLURM_NTASKS=4 \
    SLURM_NNODES=2 SLURM_STEP_NUM_NODES=2 SLURM_STEP_TASKS_PER_NODE="2(x2)" \
    SLURM_STEP_NODELIST="${tag}-n[0-1]" SLURM_JOB_NODELIST="${tag}-n[0-1]" CUTRAIN_RDZV_TIMEOUT=60 \
    "${train[@]}" --save "$scratch/slurm" >"$scratch/slurm$r.log" 2>&1 &
  pids[$r]=$!
done
for r in 0 1 2 3; do wait "${pids[$r]}" || fail "srun-style: task $r failed: $(tail -5 "$scratch/slurm$r.log")"; done
grep -q "^parameters identical on all 4 ranks" "$scratch/slurm0.log" ||
  fail "srun-style: no replica check line in: $(cat "$scratch/slurm0.log")"
grep -q "^  rank 3: cpu on ${host[1]}, ${addr[1]} (${veth[1]})$" "$scratch/slurm0.log" ||
  fail "srun-style: rank 3 is not on ${host[1]}: $(cat "$scratch/slurm0.log")"
same_tensors "$scratch/one/$checkpoint" "$scratch/slurm/$checkpoint" ||
  fail "srun-style: the checkpoint after 3 steps differs from the one-node 4-rank run's"
echo "two nodes x 2 tasks (Slurm's variables, no cutrain launcher): 3 steps; parameters identical on all 4 ranks;" \
  "checkpoint identical to the one-node 4-rank run's"

# --- 3. Four mistakes, all at once (each on a port of its own) ---------------------------------------
# case NAME PORT NODE1_FLAGS...: node 0 as it should be; node 1 with NODE1_FLAGS, or not at all ("absent").
case_start() {
  local name="$1" port="$2"
  shift 2
  local flags=(--nnodes 2 --nproc-per-node 2 --master-port "$port" --rdzv-timeout "$timeout_s")
  on 0 "$bin/cutrun" "${flags[@]}" --node-rank 0 --master-addr "${addr[0]}" --rdzv-id job-a \
    "${train[@]}" >"$scratch/$name.0.log" 2>&1 &
  echo $! >"$scratch/$name.0.pid"
  [ "$1" = absent ] && return
  on 1 "$bin/cutrun" "${flags[@]}" --node-rank 1 --master-addr "${addr[0]}" --rdzv-id job-a "$@" \
    "${train[@]}" >"$scratch/$name.1.log" 2>&1 &
  echo $! >"$scratch/$name.1.pid"
}
start=$(date +%s)
case_start wrong-address 29401 --master-addr 169.254.77.3
case_start wrong-id 29402 --rdzv-id job-b
case_start absent 29403 absent
case_start wrong-nproc 29404 --nproc-per-node 3

# case_check NAME NODE PATTERN: node NODE failed, saying PATTERN (an extended regex), in time.
case_check() {
  local name="$1" n="$2" pattern="$3" log="$scratch/$1.$2.log" status=0
  wait "$(cat "$scratch/$name.$n.pid")" || status=$?
  [ "$status" != 0 ] || fail "$name: node $n succeeded: $(cat "$log")"
  [ "$status" != 124 ] && [ "$status" != 137 ] || fail "$name: node $n still ran after 90 s: $(cat "$log")"
  grep -qE "$pattern" "$log" || fail "$name: node $n did not say /$pattern/: $(cat "$log")"
  echo "$name, node $n: $(grep -E "$pattern" "$log" | head -1)"
}
store0="store at ${addr[0]}"
missing_node1="ranks 2, 3 of 4 did not arrive within $timeout_s s \(node 1 not heard from; $store0"
case_check wrong-address 0 "rendezvous: $missing_node1:29401\)"
unreachable="could not reach the store of rank 0 at 169.254.77.3:29401 within $timeout_s s"
case_check wrong-address 1 "$unreachable \((No route to host|no answer)\)"
case_check wrong-id 0 "rendezvous: $missing_node1:29402\)"
case_check wrong-id 1 "$store0:29402: .*run"
case_check absent 0 "rendezvous: $missing_node1:29403\)"
case_check wrong-nproc 0 "rendezvous: $missing_node1:29404\)"
case_check wrong-nproc 1 "$store0:29404: rank [345] has WORLD_SIZE=6 but rank 0 has WORLD_SIZE=4"
elapsed=$(($(date +%s) - start))
((elapsed < timeout_s + 20)) || fail "the failure cases took $elapsed s with a rendezvous timeout of $timeout_s s"

# While waiting, each node said what for (every quarter of the timeout here), from local rank 0 only.
waiting="^\[rank0\]: cutrain: rendezvous: 2 of 4 ranks here, at the $store0:29403; waiting for ranks 2, 3"
waiting+=" \(node 1 not heard from\); giving up in [0-9]+ s$"
grep -E "$waiting" "$scratch/absent.0.log" | head -1 | grep . ||
  fail "absent: node 0 did not say what it waits for: $(cat "$scratch/absent.0.log")"
retrying="^\[rank2\]: cutrain: rendezvous: rank 2 \(node 1\) cannot reach rank 0's store at 169.254.77.3:29401 yet"
grep -E "$retrying" "$scratch/wrong-address.1.log" | head -1 | grep . ||
  fail "wrong-address: node 1 did not say what it waits for: $(cat "$scratch/wrong-address.1.log")"
! grep -q "^\[rank1\]: cutrain: rendezvous:" "$scratch/absent.0.log" || fail "absent: local rank 1 reported too"
echo "the four failure cases ended within $elapsed s (rendezvous timeout $timeout_s s)"
