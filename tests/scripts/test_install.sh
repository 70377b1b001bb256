# `cmake --install` into a fresh prefix, as the README's install step does: both commands land in
# PREFIX/bin, the installed cutrain finds its libraries, and the installed cutrun finds cutrain beside
# itself with nothing of the build on PATH.
source "$(dirname "$0")/common.sh"
build="$(dirname "$bin")"
[ -f "$build/cmake_install.cmake" ] || skip "no CMake build folder above $bin"
prefix="$scratch/prefix"
cmake --install "$build" --prefix "$prefix" >"$scratch/install.log" 2>&1 || fail "cmake --install: $(cat "$scratch/install.log")"
for command in cutrain cutrun; do [ -x "$prefix/bin/$command" ] || fail "no $prefix/bin/$command"; done
! ldd "$prefix/bin/cutrain" | grep 'not found' || fail "the installed cutrain misses libraries"
cd "$scratch"
PATH=/usr/bin:/bin "$prefix/bin/cutrun" --standalone --nproc-per-node 1 cutrain train --device cpu --width 4 \
  --batch-size 8 --synthetic-train 64 --synthetic-test 8 --epochs 1 --max-steps 1 --workers 1 --threads 1 \
  --eval-every 0 >"$scratch/out" 2>&1 || fail "the installed cutrun: $(cat "$scratch/out")"
grep -q "done in " "$scratch/out" || fail "the installed cutrun's run did not finish: $(cat "$scratch/out")"
echo "ok: cutrain and cutrun installed into a prefix, and cutrun found cutrain beside itself"
