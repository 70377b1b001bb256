# scripts/setup.sh while another process holds apt's lock, against stand-ins for dpkg-query (nothing is
# installed) and apt-get (locked to a probe that will not wait): one line says that setup waits, and each
# apt-get that changes something is told to wait for the lock instead of failing at once.
source "$(dirname "$0")/common.sh"
[ "$(id -u)" = 0 ] || skip "setup.sh calls apt-get through sudo when not root"
mkdir -p "$scratch/path"
printf '#!/bin/sh\nexit 1\n' >"$scratch/path/dpkg-query"
cat >"$scratch/path/apt-get" <<EOS
#!/bin/sh
case "\$*" in
  *DPkg::Lock::Timeout=0*) echo "E: Could not get lock /var/lib/dpkg/lock-frontend. It is held by process 4242 (apt-get)" >&2
                           exit 100 ;;
esac
echo "\$*" >>"$scratch/apt-get.calls"
EOS
chmod +x "$scratch/path/dpkg-query" "$scratch/path/apt-get"
PATH="$scratch/path:$PATH" bash "$repo/scripts/setup.sh" >"$scratch/out" 2>&1 || true
grep -qx "setup: another process holds apt's lock; waiting for it (up to 10 minutes)" "$scratch/out" ||
  fail "no line about the lock: $(cat "$scratch/out")"
[ "$(grep -c -- '-o DPkg::Lock::Timeout=600 ' "$scratch/apt-get.calls")" = 2 ] ||
  fail "apt-get update and install do not wait for the lock: $(cat "$scratch/apt-get.calls")"
echo "ok: setup says that it waits for apt's lock, and apt-get waits for it"
