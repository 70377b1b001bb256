# Two hosts on one machine, for the multi-node tests (sourced after common.sh): two network namespaces
# joined by a veth pair, with addresses that exist only in there (169.254.77.1 and .2) and a host name
# each. `on N CMD...` runs CMD on host N. Needs root and iproute2 (`ip netns`); without them the test
# prints SKIPPED and why. Everything made here (namespaces, host files, processes) goes on every way out.
#   two_hosts "two-node test"   # makes them; the words name the test in a SKIPPED line
[ -n "${repo:-}" ] || { echo "two_hosts.sh is sourced after common.sh" >&2; exit 1; }

tag="cutrain$$"
ns=("${tag}n0" "${tag}n1")
host=("${tag}-n0" "${tag}-n1")
addr=(169.254.77.1 169.254.77.2)
veth=("${tag}a" "${tag}b")

# remove_namespace NAME: every process in it killed, then the namespace and its host file gone.
remove_namespace() {
  local pids
  pids="$(ip netns pids "$1" 2>/dev/null || true)"
  [ -z "$pids" ] || kill -KILL $pids 2>/dev/null || true
  ip netns del "$1" 2>/dev/null || true
  rm -rf "/etc/netns/$1"
}

teardown() {
  remove_namespace "${ns[0]}"
  remove_namespace "${ns[1]}"
  local job
  for job in $(jobs -p); do kill -KILL "$job" 2>/dev/null || true; done  # `timeout`s, and what they started
  wait 2>/dev/null || true
  rm -rf "$scratch"
}

two_hosts() {
  local test_name="$1" n
  [ "$(id -u)" = 0 ] || skip "$test_name: making network namespaces needs root (this is $(id -un))"
  command -v ip >/dev/null || skip "$test_name: no 'ip' command (iproute2) to make network namespaces"
  trap teardown EXIT
  trap 'exit 130' INT TERM

  # Namespaces a killed run left behind (its process is gone) go first.
  local stale pid
  for stale in $(ip netns list 2>/dev/null | grep -oE '^cutrain[0-9]+n[01]'); do
    pid="${stale#cutrain}"
    pid="${pid%n[01]}"
    kill -0 "$pid" 2>/dev/null || remove_namespace "$stale"
  done

  ip netns add "${ns[0]}" 2>"$scratch/err" ||
    skip "$test_name: cannot make a network namespace: $(head -1 "$scratch/err")"
  ip netns add "${ns[1]}"
  ip link add "${veth[0]}" type veth peer name "${veth[1]}" 2>"$scratch/err" ||
    skip "$test_name: cannot make a veth pair: $(head -1 "$scratch/err")"
  for n in 0 1; do
    ip link set "${veth[$n]}" netns "${ns[$n]}"
    ip -n "${ns[$n]}" addr add "${addr[$n]}/24" dev "${veth[$n]}"
    ip -n "${ns[$n]}" link set "${veth[$n]}" up
    ip -n "${ns[$n]}" link set lo up
    # `ip netns exec` shows /etc/netns/NAME/hosts as /etc/hosts: each node knows both names.
    mkdir -p "/etc/netns/${ns[$n]}"
    printf '127.0.0.1 localhost\n%s %s\n%s %s\n' "${addr[0]}" "${host[0]}" "${addr[1]}" "${host[1]}" \
      >"/etc/netns/${ns[$n]}/hosts"
  done
}

# on N CMD...: CMD on host N: in its namespace, under its host name, for at most 90 s.
on() {
  local n="$1"
  shift
  timeout -k 5 90 ip netns exec "${ns[$n]}" unshare --uts sh -c 'hostname "$0" && exec "$@"' "${host[$n]}" "$@"
}
