# The GPU machine's libraries, rehearsed: the binaries packaged for it (scripts/package-prebuilt.sh) find every
# library they load through gpu-check.sh's discovery (scripts/gpu_libraries.sh) against the nvidia-* wheels in
# the project's environment alone, as on that machine, where the toolkit is absent: ldd runs in a clean
# environment (env -i, LD_LIBRARY_PATH gpu-check's) with the toolkit hidden under an empty folder (a mount
# namespace). libcudart, libcublas(Lt), libcudnn and libnccl resolve into the wheels' folders, nothing into the
# toolkit, cuDNN's sub-libraries (loaded at run time) sit beside libcudnn with all their own libraries found,
# and `cutrain info` reports, as loaded, the versions the wheels declare.
source "$(dirname "$0")/common.sh"
[ -x "$bin/cutrain" ] || skip "$bin/cutrain not built, so there is no packaged binary to rehearse with"
require_python "nvidia.cudnn, nvidia.nccl, nvidia.cu13"
[ "$(id -u)" = 0 ] && unshare -m true 2>/dev/null || skip "hiding the toolkit needs a mount namespace (root, unshare -m)"
source "$repo/scripts/gpu_libraries.sh"
# (--allow-avx512: this test is about libraries, and so also runs on a build for this machine's CPU.)
bash "$repo/scripts/package-prebuilt.sh" --bin "$bin" --out "$scratch/gpu" --allow-avx512 >"$scratch/package.log" 2>&1 ||
  fail "package-prebuilt.sh: $(tail -n 1 "$scratch/package.log")"
unpack_prebuilt "$scratch/gpu" || fail "unpack_prebuilt $scratch/gpu"
gpu_library_path "$scratch/gpu" "$py"
[ "$library_set" = wheels ] || fail "gpu_libraries.sh chose the $library_set's libraries although $py has the wheels"
toolkit="$(readlink -f /usr/local/cuda)"

# in_clean_namespace CMD...: CMD with the toolkit hidden, in an empty environment but for gpu-check's path.
in_clean_namespace() {
  unshare -m bash -c 'for d in "$1" /usr/local/cuda; do [ -d "$d" ] && mount -t tmpfs none "$d"; done; shift; exec "$@"' \
    _ "$toolkit" env -i PATH=/usr/bin:/bin LD_LIBRARY_PATH="$library_path" "$@"
}
in_clean_namespace ldd "$scratch/gpu/bin/cutrain" >"$scratch/ldd.txt" 2>&1 || fail "ldd: $(tail -n 1 "$scratch/ldd.txt")"
! grep 'not found' "$scratch/ldd.txt" || fail "libraries not found with the toolkit hidden"
wheels_root="$("$py" -c 'import nvidia; print(list(nvidia.__path__)[0])')"
for lib in libcudart.so.13 libcublas.so.13 libcublasLt.so.13 libcudnn.so.9 libnccl.so.2; do
  where="$(awk -v lib="$lib" '$1 == lib { print $3 }' "$scratch/ldd.txt")"
  [[ "$where" == "$wheels_root"/* ]] || fail "$lib resolves to '$where', not into the wheels ($wheels_root)"
done
! grep -E "=> ($toolkit|/usr/local/cuda)" "$scratch/ldd.txt" || fail "a library resolves into the toolkit"
# One set (Note [One set of CUDA libraries]): where the toolkit is present too, as on a machine that has both,
# gpu-check's path still loads every CUDA library from the wheels.
env -i PATH=/usr/bin:/bin LD_LIBRARY_PATH="$library_path" ldd "$scratch/gpu/bin/cutrain" >"$scratch/ldd-both.txt" 2>&1 ||
  fail "ldd beside the toolkit: $(tail -n 1 "$scratch/ldd-both.txt")"
! grep -E "=> ($toolkit|/usr/local/cuda)" "$scratch/ldd-both.txt" ||
  fail "beside the toolkit, a library resolves into it: gpu-check's path mixes the two sets ($library_path)"
cudnn_dir="$(dirname "$(awk '$1 == "libcudnn.so.9" { print $3 }' "$scratch/ldd.txt")")"
for sub in ops cnn adv graph engines_precompiled engines_runtime_compiled heuristic; do
  [ -f "$cudnn_dir/libcudnn_$sub.so.9" ] || fail "cuDNN's libcudnn_$sub.so.9 is not beside libcudnn.so.9 in $cudnn_dir"
  in_clean_namespace ldd "$cudnn_dir/libcudnn_$sub.so.9" >"$scratch/ldd-$sub.txt" 2>&1 || true
  ! grep 'not found' "$scratch/ldd-$sub.txt" || fail "libcudnn_$sub.so.9 needs libraries that are not found"
done

# The versions as loaded against those the wheels declare (the toolkit's own could differ: they are hidden).
in_clean_namespace "$scratch/gpu/bin/cutrain" info >"$scratch/info.txt" 2>&1 || true
loaded="$(grep -m1 "^cuDNN " "$scratch/info.txt" || true)"  # the libraries as loaded (the version line comes first)
"$py" - "$loaded" <<'PY' || fail "the loaded libraries are not the wheels' versions: $loaded"
import re, sys
from importlib.metadata import version
loaded = sys.argv[1]
def prefix(v, parts):
    return ".".join(v.split(".")[:parts])
expected = {"cuDNN": prefix(version("nvidia-cudnn-cu13"), 3), "cuBLAS": prefix(version("nvidia-cublas"), 3),
            "NCCL": prefix(version("nvidia-nccl-cu13"), 3), "CUDA runtime": prefix(version("nvidia-cuda-runtime"), 2)}
for name, v in expected.items():
    assert re.search(rf"\b{name} {re.escape(v)}\b", loaded), (name, v, loaded)
PY
echo "ok: every library from the wheels alone, the toolkit hidden; as loaded: $loaded"
echo "$(python_versions "$py" "$repo/scripts/setup.sh")"
