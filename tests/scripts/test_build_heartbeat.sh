# scripts/build.sh against a stand-in cmake whose build is silent for 21 s: a line says the build goes on
# (Note [A build that says it is alive]), every line of cmake's comes through, and cmake's failure is the
# script's.
source "$(dirname "$0")/common.sh"
copy="$scratch/repo"
mkdir -p "$copy/scripts" "$scratch/path"
cp "$repo/scripts/build.sh" "$copy/scripts/"
printf '#!/usr/bin/env bash\n[ "$1" = --build ] || exit 0\necho "[ 1%%] first"; [ -n "${CMAKE_STATUS:-}" ] || sleep 21; echo "[ 2%%] second"; exit "${CMAKE_STATUS:-0}"\n' \
  >"$scratch/path/cmake"
chmod +x "$scratch/path/cmake"
export PATH="$scratch/path:$PATH"
status=0
bash "$copy/scripts/build.sh" >"$scratch/out" 2>&1 || status=$?
[ "$status" = 0 ] || fail "build.sh: exit $status: $(cat "$scratch/out")"
[ "$(cat "$scratch/out")" = "$(printf '[ 1%%] first\nbuild: still compiling (20 s since the last line)\n[ 2%%] second')" ] ||
  fail "build.sh's lines: $(cat "$scratch/out")"
CMAKE_STATUS=3 bash "$copy/scripts/build.sh" >"$scratch/out" 2>&1 || status=$?
[ "$status" = 3 ] || fail "build.sh after cmake failed with 3: exit $status"
echo "ok: a line after 20 s of silence, and cmake's status kept"
