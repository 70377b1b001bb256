#!/usr/bin/env bash
# Packs a build made here for a GPU machine that cannot build it (no Debian packages there):
#
#   scripts/package-prebuilt.sh [--bin build/bin] [--out .gpu] [--emulated-bin build-emulated/bin]
#   then, there: scripts/gpu-check.sh --prebuilt .gpu
#
# OUT/bin gets the binaries; OUT/lib the shared libraries they load that such a machine lacks: everything
# `ldd` resolves except the C/C++ runtime (glibc, libstdc++, libgcc_s), which the machine has, and the
# CUDA/NVIDIA libraries (cudart, cuBLAS, cuDNN, NCCL, the driver), which gpu-check.sh finds there in the
# CUDA toolkit or in Python's nvidia-* packages. In practice: Gloo, hiredis, ibverbs, libnl, stb.
set -euo pipefail

source "$(dirname "$0")/cli.sh"
usage() { echo "usage: scripts/package-prebuilt.sh [--bin DIR] [--out DIR] [--emulated-bin DIR]"; header_help; }

bin="build/bin" out=".gpu" emulated_bin="build-emulated/bin"
while (($#)); do
  case "$1" in
    --bin) bin="$(value_of "$@")"; shift ;;
    --out) out="$(value_of "$@")"; shift ;;
    --emulated-bin) emulated_bin="$(value_of "$@")"; shift ;;
    -h|--help) usage; exit 0 ;;
    *) bad_usage "unknown option '$1'" ;;
  esac
  shift
done
[ -x "$bin/cutrain" ] || die "$bin/cutrain: not found (build first: scripts/build.sh)"

# Libraries left to the GPU machine, by file name.
base_runtime='^(linux-vdso|ld-linux[^ ]*|libc|libm|libdl|librt|libpthread|libresolv|libutil|libstdc\+\+|libgcc_s)\.so'
cuda_runtime='^lib(cuda|cudart|cublas|cublasLt|cudnn[^ ]*|nccl|nvrtc[^ ]*|nvJitLink|cufft|curand|cusparse|cusolver'
cuda_runtime+='|cupti|nvToolsExt|nvidia-[^ ]*)\.so'

rm -rf "$out/bin" "$out/lib"
mkdir -p "$out/bin" "$out/lib"
for f in "$bin"/*; do
  [ -f "$f" ] && [ -x "$f" ] || continue
  cp -p "$f" "$out/bin/"
  [ "$(head -c 4 "$f" | tail -c 3)" = ELF ] || continue  # cutrun is a script
  ldd "$f" | awk '$2 == "=>" && $3 ~ /^\// { print $1, $3 }' | while read -r name path; do
    if [[ "$name" =~ $base_runtime || "$name" =~ $cuda_runtime ]]; then continue; fi
    [ -e "$out/lib/$name" ] || cp -L "$path" "$out/lib/$name"
  done
done
# The step's inventory, which only the emulated device records (bench-step --plan), for gpu-check.sh to
# set beside the measured step: from the emulated build (--emulated-bin) when there is one.
rm -f "$out/plan.txt"
if [ -x "$emulated_bin/cutrain" ]; then
  "$emulated_bin/cutrain" bench-step --plan --stem cifar --precision bf16 --batch-size 256 >"$out/plan.txt" ||
    die "$emulated_bin/cutrain bench-step --plan failed"
else
  echo "package-prebuilt.sh: no $emulated_bin/cutrain, so no plan.txt (scripts/build.sh --emulated makes one)"
fi
# The CPU code is built for the building machine's vector extensions (CUTRAIN_CPU_ARCH, kernels/CMakeLists.txt).
march="$(sed -n 's/^CUTRAIN_CPU_MARCH:INTERNAL=//p' "$(dirname "$bin")/CMakeCache.txt" 2>/dev/null || true)"
if [ "$march" = "-march=x86-64-v4" ]; then
  echo "package-prebuilt.sh: note: built with $march (AVX-512), which the GPU machine's CPU must have;" \
       "configure with -DCUTRAIN_CPU_ARCH=x86-64-v3 for any x86-64 server since 2015" >&2
fi
echo "package-prebuilt.sh: $out/bin: $(ls "$out/bin" | tr '\n' ' ')"
echo "package-prebuilt.sh: $out/lib: $(ls "$out/lib" | tr '\n' ' ')"
size_mib=$(du -sm "$out" | cut -f1)
echo "package-prebuilt.sh: $size_mib MiB in all"
((size_mib <= 60)) || echo "package-prebuilt.sh: warning: over 60 MiB; the device tool carries 64 MiB with the tree" >&2
