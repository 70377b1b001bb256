# scripts/package-prebuilt.sh copies the built binaries and the shared libraries a GPU machine lacks
# (Gloo and its dependencies) but neither the C/C++ runtime nor the CUDA/NVIDIA libraries, and the
# binary links exactly one CUDA runtime.
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
bash "$repo/scripts/package-prebuilt.sh" --bin "$bin" --out "$scratch/gpu" --emulated-bin "$scratch/none" \
  >"$scratch/out.txt" || fail "exit $?"
[ -x "$scratch/gpu/bin/cutrain" ] || fail "bin/cutrain not copied"
libs="$(ls "$scratch/gpu/lib")"
if ldd "$bin/cutrain" | grep -q libgloo; then
  grep -q '^libgloo' <<<"$libs" || fail "libgloo not copied: $libs"
fi
if grep -E '^(libc|libm|libstdc\+\+|libgcc_s|libcudart|libcublas|libcudnn|libnccl)\.so' <<<"$libs"; then
  fail "a system or CUDA library was copied: $libs"
fi
echo "ok: $(tr '\n' ' ' <<<"$libs")"
