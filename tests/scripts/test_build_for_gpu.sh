# scripts/build.sh for a named GPU architecture configures the CPU code for x86-64-v3 (Note [A build for the GPU
# machine]), unless its arguments name a CUTRAIN_CPU_ARCH, and a plain build leaves the choice to CMake ("auto").
source "$(dirname "$0")/common.sh"
copy="$scratch/repo"
mkdir -p "$copy/scripts" "$scratch/path"
cp "$repo/scripts/build.sh" "$copy/scripts/"
# A stand-in cmake that writes down its configure arguments and builds nothing.
printf '#!/usr/bin/env bash\n[ "$1" = --build ] || echo "$*" >"%s/configure"\n' "$scratch" >"$scratch/path/cmake"
chmod +x "$scratch/path/cmake"
export PATH="$scratch/path:$PATH"
configured_with() { bash "$copy/scripts/build.sh" "$@" >"$scratch/out" 2>&1 || fail "build.sh $*: $(cat "$scratch/out")"; cat "$scratch/configure"; }

grep -q -- "-DCUTRAIN_CPU_ARCH=x86-64-v3" <<<"$(configured_with -DCMAKE_CUDA_ARCHITECTURES=90)" ||
  fail "for sm_90: $(cat "$scratch/configure")"
grep -q "Note \[A build for the GPU machine\]" "$scratch/out" || fail "no line says so: $(cat "$scratch/out")"
args="$(configured_with -DCMAKE_CUDA_ARCHITECTURES=90 -DCUTRAIN_CPU_ARCH=x86-64-v4)"
grep -q -- "-DCUTRAIN_CPU_ARCH=x86-64-v3" <<<"$args" && fail "the named CUTRAIN_CPU_ARCH was overridden: $args"
args="$(configured_with)"
grep -q -- "CUTRAIN_CPU_ARCH" <<<"$args" && fail "a plain build names a CPU level: $args"
echo "ok: x86-64-v3 for a named GPU architecture only"
