# The store against strangers who flood it (issue 23, item 6): while two floods of slow clients
# (tests/scripts/slow_clients.py, 200 connections each, each sending a join's first bytes one at a
# time and never the rest) knock on rank 0's store from inside node 1's namespace, one from node 1's
# own address and one from an address of its own, a 2-node job of 2 ranks per node (cutrun, then
# bench-allreduce's checked all-reduce) must meet every time. Without the store's bound per address
# and the ranks' new join after a dropped connection, ranks were pushed out before their join was
# read, and rendezvous failed.
#   bash test_store_flood.sh REPO_ROOT BIN_DIR [TRIALS]   # CI: 6 trials; 20 for the issue's figures
source "$(dirname "$0")/common.sh"
source "$(dirname "$0")/two_hosts.sh"
trials="${3:-6}"
two_hosts "store flood test"
py="$(python_with socket)"
stranger=169.254.77.3
ip -n "${ns[1]}" addr add "$stranger/24" dev "${veth[1]}"

job=("$bin/cutrain" bench-allreduce --device cpu --min-bytes 4K --max-bytes 4K --iters 2 --warmup 1)
met=0
start=$(date +%s)
for trial in $(seq 1 "$trials"); do
  port=$((29600 + trial))
  for source in "${addr[1]}" "$stranger"; do
    ip netns exec "${ns[1]}" "$py" "$(dirname "$0")/slow_clients.py" "${addr[0]}" "$port" "$source" 200 60 \
      >"$scratch/flood.$trial.$source.log" 2>&1 &
    echo $! >>"$scratch/flood.$trial.pids"
  done
  sleep 0.5  # the floods are at the door before the store opens
  for n in 0 1; do
    on "$n" "$bin/cutrun" --nnodes 2 --node-rank "$n" --nproc-per-node 2 --master-addr "${addr[0]}" \
      --master-port "$port" --rdzv-id "flood-$trial-abcdefghijklmnopqrstuvwx" --rdzv-timeout 20 "${job[@]}" \
      >"$scratch/job.$trial.$n.log" 2>&1 &
    pids[$n]=$!
  done
  ok=1
  for n in 0 1; do wait "${pids[$n]}" || ok=0; done
  kill -TERM $(cat "$scratch/flood.$trial.pids") 2>/dev/null || true
  wait $(cat "$scratch/flood.$trial.pids") 2>/dev/null || true
  if [ "$ok" = 1 ]; then
    met=$((met + 1))
  else
    echo "trial $trial: the job did not meet:"
    tail -n 3 "$scratch/job.$trial.0.log" "$scratch/job.$trial.1.log"
  fi
done
elapsed=$(($(date +%s) - start))
made=$(cat "$scratch"/flood.*.log | awk '/connection attempts/ { m += $1; c += $4 } END { print m " connection attempts, " c " ended by the store or refused" }')
echo "store flood: $met of $trials 2-node jobs (2 ranks per node) met beside 2 x 200 slow clients ($made), in $elapsed s"
[ "$met" = "$trials" ] || fail "$((trials - met)) of $trials rendezvous failed under the flood"
