#!/usr/bin/env bash
# Packs a build made here for a GPU machine that cannot build it (no Debian packages there):
#
#   scripts/package-prebuilt.sh [--bin build/bin] [--out .gpu]    then, there: scripts/gpu-check.sh --prebuilt .gpu
#
# OUT/bin gets the binaries; OUT/lib the shared libraries they load that such a machine lacks: everything
# `ldd` resolves except the C/C++ runtime (glibc, libstdc++, libgcc_s), which the machine has, and the
# CUDA/NVIDIA libraries (cudart, cuBLAS, cuDNN, NCCL, the driver), which gpu-check.sh finds there in the
# CUDA toolkit or in Python's nvidia-* packages. In practice: Gloo, hiredis, ibverbs, libnl, stb.
set -euo pipefail

source "$(dirname "$0")/cli.sh"
usage() { echo "usage: scripts/package-prebuilt.sh [--bin DIR] [--out DIR]"; header_help; }

bin="build/bin" out=".gpu"
while (($#)); do
  case "$1" in
    --bin) bin="$(value_of "$@")"; shift ;;
    --out) out="$(value_of "$@")"; shift ;;
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
echo "package-prebuilt.sh: $out/bin: $(ls "$out/bin" | tr '\n' ' ')"
echo "package-prebuilt.sh: $out/lib: $(ls "$out/lib" | tr '\n' ' ')"
size_mib=$(du -sm "$out" | cut -f1)
echo "package-prebuilt.sh: $size_mib MiB in all"
((size_mib <= 60)) || echo "package-prebuilt.sh: warning: over 60 MiB; the device tool carries 64 MiB with the tree" >&2
