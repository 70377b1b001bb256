# scripts/package-prebuilt.sh copies the built binaries, stripped, and the shared libraries a GPU machine may lack
# (oneDNN, compressed, Gloo and its dependencies, and the C++ runtime in lib/cxx) but neither glibc nor the
# CUDA/NVIDIA libraries, prints the glibc floor, and refuses binaries with AVX-512 instructions unless told
# (--allow-avx512); and the binary links exactly one CUDA runtime.
source "$(dirname "$0")/common.sh"
[ -x "$bin/cutrain" ] || skip "$bin/cutrain not built"
# One CUDA runtime: the shared libcudart, and not the static one as well, neither inside the binary
# (it would define the runtime's functions) nor on its link line (CMake adds -lcudart_static to a
# target with .cu sources unless told otherwise; behind libcudart.so it pulled nothing in, but
# only because of the order).
ldd "$bin/cutrain" >"$scratch/ldd.txt"  # (not piped into grep -q, which may close the pipe early)
nm "$bin/cutrain" >"$scratch/nm.txt"
grep -q 'libcudart\.so' "$scratch/ldd.txt" || fail "cutrain does not load the shared CUDA runtime"
if grep -qE ' T cudaGetDeviceCount$' "$scratch/nm.txt"; then fail "cutrain has the static CUDA runtime linked in too"; fi
link="$bin/../app/CMakeFiles/cutrain.dir/link.txt"  # the Makefile generator's link command
if [ -f "$link" ] && grep -q cudart_static "$link"; then fail "cutrain's link line names the static CUDA runtime"; fi
# (No emulated build: in CI it may be still linking beside this test.)
package() { bash "$repo/scripts/package-prebuilt.sh" --bin "$bin" --out "$scratch/gpu" --emulated-bin "$scratch/none" "$@"; }
objdump -d --no-show-raw-insn "$bin/cutrain" >"$scratch/asm.txt"
if grep -qE '%zmm|%k[0-7]' "$scratch/asm.txt"; then  # a build for this machine's AVX-512 (CUTRAIN_CPU_ARCH auto)
  one_line_error "a build with AVX-512" 1 package
  grep -q -- "-DCUTRAIN_CPU_ARCH=x86-64-v3" "$scratch/stderr" || fail "the refusal does not say how to build: $(cat "$scratch/stderr")"
  package --allow-avx512 >"$scratch/out.txt" || fail "--allow-avx512: exit $?"
  grep -q "CPU: AVX-512 (x86-64-v4), kept by --allow-avx512: cutrain: [0-9]" "$scratch/out.txt" || fail "$(cat "$scratch/out.txt")"
else
  package >"$scratch/out.txt" || fail "exit $?"
  grep -q "CPU: x86-64-v3: no AVX-512 instruction in bin/" "$scratch/out.txt" || fail "$(cat "$scratch/out.txt")"
fi
[ -x "$scratch/gpu/bin/cutrain" ] || fail "bin/cutrain not copied"
nm "$scratch/gpu/bin/cutrain" 2>&1 | grep -q "no symbols" || fail "bin/cutrain is not stripped"
libs="$(ls -p "$scratch/gpu/lib" | grep -v /)"
if ldd "$bin/cutrain" | grep -q libgloo; then
  grep -q '^libgloo' <<<"$libs" || fail "libgloo not copied: $libs"
fi
if ldd "$bin/cutrain" | grep -q libdnnl; then
  grep -qx 'libdnnl.so.2.gz' <<<"$libs" || fail "libdnnl.so.2 not compressed: $libs"
fi
if grep -E '^(libc|libm|libstdc\+\+|libgcc_s|libcudart|libcublas|libcudnn|libnccl)\.so' <<<"$libs"; then
  fail "glibc, a CUDA library or the C++ runtime was copied into lib/: $libs"
fi
[ "$(ls "$scratch/gpu/lib/cxx" | tr '\n' ' ')" = "libgcc_s.so.1 libstdc++.so.6 " ] ||
  fail "lib/cxx: $(ls "$scratch/gpu/lib/cxx")"
grep -qE "needs glibc 2\.[0-9]+ or newer, 2\.[0-9]+ where lib/cxx's libstdc\+\+ and libgcc_s are used" "$scratch/out.txt" ||
  fail "no glibc floor: $(cat "$scratch/out.txt")"
mib=$(du -sm "$scratch/gpu" | cut -f1)
((mib < 40)) || fail "$mib MiB"
echo "ok: $mib MiB; $(tr '\n' ' ' <<<"$libs")"
