# cutrun --max-restarts on two nodes (two network namespaces, tests/scripts/two_hosts.sh), one rank
# each over Gloo: a random rank is killed with SIGKILL at a random moment, 3 times in one job. Each
# time its node's cutrun restarts its rank, the other node's rank loses its peer and fails, and that
# node's cutrun restarts too; the two meet again at rank 0's new store and resume from the last
# checkpoint (--save-every-steps 1, one --save folder that both nodes see). The final model and
# optimizer hold the tensors of a run without faults, byte for byte. cutrun's own --restart-delay
# (1 s) is used, with a --collective-timeout far longer (60 s): a rank whose Gloo send waits on a
# peer that died is not told, and the other node's new rank ends rank 0's old group by joining its
# store (Note [A newer group ends an older one] in dist/launch/store_state.h). Should that fail, a kill
# costs a minute, and the job its restarts or CTest's timeout.
#   bash test_two_node_restarts.sh REPO_ROOT BIN_DIR [TRIALS]   # CI: 1 job; scripts/soak-restarts.sh: many
# Prints, last, "two-node restarts: N jobs, F faults injected, R restarts (K of a killed rank, G after
# Gloo saw the peer's sockets close, J after a newer restart's join, S after rank 0's store closed), I of N
# results identical". Every restart is accounted for by its node's log, or the test fails naming it.
#
# A newer restart's join is rare here, and that is expected: the kernel closes a SIGKILLed rank's
# sockets, so the other rank's Gloo collective fails at once ("Connection closed by peer" or "reset by
# peer") and its own cutrun restarts it. The join ends a group only when the other rank waits at the store
# rather than in a collective, or when its peer is alive but blocked, or over a transport that does not
# see the close (NCCL over InfiniBand); tests/test_dist_faults.cpp makes that case happen on purpose.
source "$(dirname "$0")/common.sh"
source "$(dirname "$0")/two_hosts.sh"
trials="${3:-1}"
two_hosts "two-node restart test"

train=("$bin/cutrain" train --device cpu --width 8 --batch-size 8 --synthetic-train 64 --synthetic-test 8
  --epochs 10 --eval-every 0 --lr 0.002 --workers 1 --log-every 1 --resume auto --save-every-steps 1
  --collective-timeout 60)
last=checkpoint-00000040  # 64 images, 2 ranks of 8: 4 steps an epoch, of about 10 ms each

"$bin/cutrun" --standalone --nproc-per-node 2 "${train[@]}" --save "$scratch/straight" >"$scratch/straight.log" 2>&1 ||
  fail "the run without faults failed: $(tail -n 5 "$scratch/straight.log")"

# rank_pid N: the cutrain process of node N, or nothing while it has none (a restart starting it).
rank_pid() {
  local pid
  for pid in $(ip netns pids "${ns[$1]}" 2>/dev/null); do
    [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = cutrain ] && { echo "$pid"; return; }
  done
  return 0
}

# wait_for N PATTERN SECONDS: node N's log matches PATTERN (a fixed string) within SECONDS.
wait_for() {
  local log="$scratch/job.$trial.$1.log" until=$((SECONDS + $3))
  until grep -qF -- "$2" "$log" 2>/dev/null; do
    ((SECONDS < until)) || fail "trial $trial: node $1 did not say '$2' within $3 s (the kill was node $victim's);" \
      "node 0: $(tail -n 5 "$scratch/job.$trial.0.log"); node 1: $(tail -n 5 "$scratch/job.$trial.1.log")"
    sleep 0.05
  done
}

# causes LOG: why each restart of that node's log came, one word a restart: killed (this node's rank was
# killed), gloo, join or store (the rank's last error line), or "unexplained: <the restart's line>".
causes() {
  awk '/^\[rank[0-9]+\]: cutrain: / { last = $0 }
       /^cutrun: restart [0-9]+ of / {
         if ($0 ~ /was killed by signal/) print "killed"
         else if (last ~ /Connection (closed|reset) by peer/) print "gloo"
         else if (last ~ /a node restarted its ranks, so this group is over/) print "join"
         else if (last ~ /store.* closed/) print "store"
         else print "unexplained: " $0
         last = "" }' "$1"
}

faults=0 restarts=0 killed=0 gloo=0 join=0 store=0 identical=0
start=$SECONDS
for trial in $(seq 1 "$trials"); do
  port=$((29700 + trial))
  for n in 0 1; do
    on "$n" "$bin/cutrun" --nnodes 2 --node-rank "$n" --nproc-per-node 1 --master-addr "${addr[0]}" \
      --master-port "$port" --rdzv-id "restarts-$trial" --rdzv-timeout 30 --max-restarts 3 \
      "${train[@]}" --save "$scratch/two.$trial" >"$scratch/job.$trial.$n.log" 2>&1 &
    pids[$n]=$!
  done
  steps=0
  for fault in 1 2 3; do
    # Some steps into this attempt, a random node's rank dies at a random moment. The job is held
    # still from that moment until the kill: rank 0 is stopped, so no rank gets further, and on a
    # loaded machine the job cannot finish its last steps while the test looks for the victim (it
    # did, and the test found no rank to kill). Rank 0's pid is looked up first, so that the stop is
    # one system call once the step is seen.
    steps=$((steps + 1 + RANDOM % 3))
    held=""
    until [ -n "$held" ] && [ "$(grep -c '^\[rank0\]: == step' "$scratch/job.$trial.0.log" 2>/dev/null)" -ge "$steps" ]; do
      kill -0 "${pids[0]}" 2>/dev/null || fail "trial $trial: node 0 ended early: $(tail -n 5 "$scratch/job.$trial.0.log")"
      [ -n "$held" ] || held="$(rank_pid 0)"
      sleep 0.05
    done
    sleep "0.0$((RANDOM % 10))"
    kill -STOP "$held" 2>/dev/null || held=""  # one that has ended is a rank of an earlier attempt
    victim=$((RANDOM % 2))
    # Its rank, once it runs; one that ended between the look and the kill (the other node's
    # restart can reach it first) is looked up again.
    until=$((SECONDS + 30))
    until pid="$(rank_pid "$victim")" && [ -n "$pid" ] && kill -KILL "$pid" 2>/dev/null; do
      ((SECONDS < until)) || fail "trial $trial: no rank on node $victim to kill: node 0: $(tail -n 8 \
        "$scratch/job.$trial.0.log"); node 1: $(tail -n 8 "$scratch/job.$trial.1.log")"
      sleep 0.05
    done
    [ -z "$held" ] || kill -CONT "$held" 2>/dev/null || true
    faults=$((faults + 1))
    for n in 0 1; do wait_for "$n" "restart $fault of 3" 30; done
    steps=$(grep -c '^\[rank0\]: == step' "$scratch/job.$trial.0.log")
  done
  for n in 0 1; do
    wait "${pids[$n]}" || fail "trial $trial: node $n failed: $(tail -n 5 "$scratch/job.$trial.$n.log")"
    while IFS= read -r cause; do
      restarts=$((restarts + 1))
      case "$cause" in
        killed | gloo | join | store) declare "$cause=$((${!cause} + 1))" ;;
        *) fail "trial $trial: node $n restarted for no reason its log gives: ${cause#unexplained: }" ;;
      esac
    done < <(causes "$scratch/job.$trial.$n.log")
  done
  same_tensors "$scratch/straight/$last.safetensors" "$scratch/two.$trial/$last.safetensors" &&
    same_tensors "$scratch/straight/$last.optim.safetensors" "$scratch/two.$trial/$last.optim.safetensors" &&
    identical=$((identical + 1))
  echo "trial $trial: $(grep -h '^cutrun: restart' "$scratch/job.$trial.0.log" "$scratch/job.$trial.1.log" | wc -l)" \
    "restarts after 3 kills; $([ "$identical" = "$trial" ] && echo identical || echo DIFFERENT)"
done
echo "two-node restarts: $trials jobs, $faults faults injected, $restarts restarts (both nodes: $killed of a" \
  "killed rank, $gloo after Gloo saw the peer's sockets close, $join after a newer restart's join, $store after" \
  "rank 0's store closed), $identical of" \
  "$trials results identical to the run without faults, in $((SECONDS - start)) s"
[ "$identical" = "$trials" ] || fail "$((trials - identical)) of $trials results differ from the run without faults"
