#!/usr/bin/env bash
# Packs a build made here for a GPU machine that cannot build it (no Debian packages there):
#
#   scripts/build.sh -DCMAKE_CUDA_ARCHITECTURES=90
#   scripts/package-prebuilt.sh [--bin build/bin] [--out .gpu] [--emulated-bin build-emulated/bin] [--allow-avx512]
#   then, there: scripts/gpu-check.sh --prebuilt .gpu
#
# OUT/bin gets the binaries, stripped; OUT/lib the shared libraries they load that such a machine may lack:
# everything `ldd` resolves except glibc and the CUDA/NVIDIA libraries (cudart, cuBLAS, cuDNN, NCCL, the
# driver), which gpu-check.sh finds there in the CUDA toolkit or in Python's nvidia-* packages. In practice:
# oneDNN, Gloo, hiredis, ibverbs, libnl, stb, libgomp. OUT/lib/cxx gets the C++ runtime the build was linked
# against, libstdc++ and libgcc_s, which gpu-check.sh puts on the path only where the machine's own is older than
# the binaries need (GCC 12's GLIBCXX_3.4.30, which RHEL 9's lacks): Debian 12's libstdc++ itself needs glibc 2.36,
# which a machine with a new enough libstdc++ of its own may lack (Ubuntu 22.04 has 2.35). What is over 16 MiB
# (oneDNN's 39.6 MB) is stored as NAME.gz, which gpu-check.sh unpacks beside it; the package is about 26 MiB.
# It prints the glibc the package needs at least, the newest GLIBC_ symbol version its files ask for, without and
# with lib/cxx.
#
# The package's check, last: every binary finds every library it loads in OUT/lib or among those left to the
# GPU machine, OUT/lib holds libstdc++ and libgcc_s, and no binary holds an AVX-512 instruction (a zmm or mask
# register, or an xmm/ymm register above 15: EVEX encodings), which a GPU machine's CPU may lack (SIGILL): the
# build for a named GPU architecture is for x86-64-v3 (Note [A build for the GPU machine], scripts/build.sh),
# where a plain build picks x86-64-v4 on a machine with AVX-512. --allow-avx512 keeps such a build for a GPU machine that is
# known to have AVX-512. oneDNN's library holds AVX-512 code too, chosen at run time by the CPU it finds.
set -euo pipefail

source "$(dirname "$0")/cli.sh"
source "$(dirname "$0")/plan_choices.sh"
usage() { echo "usage: scripts/package-prebuilt.sh [--bin DIR] [--out DIR] [--emulated-bin DIR] [--allow-avx512]"; header_help; }

bin="build/bin" out=".gpu" emulated_bin="build-emulated/bin" allow_avx512=""
while (($#)); do
  case "$1" in
    --allow-avx512) allow_avx512=1 ;;
    --bin) bin="$(value_of "$@")"; shift ;;
    --out) out="$(value_of "$@")"; shift ;;
    --emulated-bin) emulated_bin="$(value_of "$@")"; shift ;;
    -h|--help) usage; exit 0 ;;
    *) bad_usage "unknown option '$1'" ;;
  esac
  shift
done
[ -x "$bin/cutrain" ] || die "$bin/cutrain: not found (build first: scripts/build.sh)"

# Libraries left to the GPU machine, by file name: glibc's, and the CUDA/NVIDIA ones.
glibc='^(linux-vdso|ld-linux[^ ]*|libc|libm|libdl|librt|libpthread|libresolv|libutil)\.so'
cuda_runtime='^lib(cuda|cudart|cublas|cublasLt|cudnn[^ ]*|nccl|nvrtc[^ ]*|nvJitLink|cufft|curand|cusparse|cusolver'
cuda_runtime+='|cupti|nvToolsExt|nvidia-[^ ]*)\.so'
is_elf() { [ "$(head -c 4 "$1" | tail -c 3)" = ELF ]; }  # (cutrun is a script)

rm -rf "$out/bin" "$out/lib"
mkdir -p "$out/bin" "$out/lib/cxx"
for f in "$bin"/*; do
  [ -f "$f" ] && [ -x "$f" ] || continue
  cp -p "$f" "$out/bin/"
  is_elf "$f" || continue
  ldd "$f" | awk '$2 == "=>" && $3 ~ /^\// { print $1, $3 }' | while read -r name path; do
    if [[ "$name" =~ $glibc || "$name" =~ $cuda_runtime ]]; then continue; fi
    to="$out/lib"
    [[ "$name" != libstdc++.so.* && "$name" != libgcc_s.so.* ]] || to="$out/lib/cxx"
    [ -e "$to/$name" ] || cp -L "$path" "$to/$name"
  done
done
for f in "$out"/bin/* "$out"/lib/* "$out"/lib/cxx/*; do
  if [ -f "$f" ] && is_elf "$f"; then chmod u+w "$f" && strip --strip-unneeded "$f"; fi
done
# glibc_floor FILES...: the newest GLIBC_x.y that the files ask for (run before any is compressed).
glibc_floor() {
  for f in "$@"; do if [ -f "$f" ] && is_elf "$f"; then objdump -T "$f"; fi; done |
    grep -oE 'GLIBC_[0-9]+\.[0-9]+' | sort -uV | tail -n 1 | sed 's/^GLIBC_//'
}
floor="$(glibc_floor "$out"/bin/* "$out"/lib/*)" floor_cxx="$(glibc_floor "$out"/lib/cxx/*)"

# ---- the package's check
missing="$(for f in "$out"/bin/*; do
  if is_elf "$f"; then LD_LIBRARY_PATH="$out/lib:$out/lib/cxx" ldd "$f" | awk -v f="$(basename "$f")" '/not found/ { print f ": " $1 }'; fi
done | grep -vE ": $cuda_runtime" | tr '\n' ' ' || true)"
[ -z "$missing" ] || die "the package's binaries do not find $missing"
for lib in libstdc++.so.6 libgcc_s.so.1; do
  [ -f "$out/lib/cxx/$lib" ] || die "$out/lib/cxx has no $lib, which $bin/cutrain should load (ldd)"
done
avx512=""
for f in "$out"/bin/*; do
  is_elf "$f" || continue
  n="$(objdump -d --no-show-raw-insn "$f" | grep -cE '%zmm|%k[0-7]|%[xy]mm(1[6-9]|2[0-9]|3[01])\b' || true)"
  ((n == 0)) || avx512+="$(basename "$f"): $n, "
done
if [ -n "$avx512" ] && [ -z "$allow_avx512" ]; then
  die "AVX-512 instructions (${avx512%, }), which a GPU machine's CPU may lack: configure the build with -DCUTRAIN_CPU_ARCH=x86-64-v3 (or pass --allow-avx512)"
fi
cpu_level="x86-64-v3: no AVX-512 instruction in bin/"
[ -z "$avx512" ] || cpu_level="AVX-512 (x86-64-v4), kept by --allow-avx512: ${avx512%, }"

# What is large goes compressed (gpu-check.sh unpacks it).
for f in "$out"/lib/* "$out"/bin/*; do
  if [ -f "$f" ] && (($(stat -c %s "$f") > 16 * 1024 * 1024)); then gzip -6f "$f" && chmod a-x "$f.gz"; fi
done

# The step's inventory, which only the emulated device records (bench-step --plan), for gpu-check.sh to
# set beside the measured step, and the plan's estimate of each batch norm and stream choice (plan_choices.sh):
# from the emulated build (--emulated-bin) when there is one.
rm -f "$out/plan.txt"
if [ -x "$emulated_bin/cutrain" ]; then
  "$emulated_bin/cutrain" bench-step --plan --stem cifar --precision bf16 --batch-size 256 >"$out/plan.txt" ||
    die "$emulated_bin/cutrain bench-step --plan failed"
  plan_choices "$emulated_bin/cutrain" >>"$out/plan.txt" || die "$emulated_bin/cutrain bench-step --plan failed"
else
  echo "package-prebuilt.sh: no $emulated_bin/cutrain, so no plan.txt (scripts/build.sh --emulated makes one)"
fi
echo "package-prebuilt.sh: $out/bin: $(ls "$out/bin" | tr '\n' ' ')"
echo "package-prebuilt.sh: $out/lib: $(ls -p "$out/lib" | grep -v / | tr '\n' ' ')"
echo "package-prebuilt.sh: $out/lib/cxx: $(ls "$out/lib/cxx" | tr '\n' ' ')"
echo "package-prebuilt.sh: needs glibc $floor or newer, $floor_cxx where lib/cxx's libstdc++ and libgcc_s are used; CPU: $cpu_level"
size_mib=$(du -sm "$out" | cut -f1)
echo "package-prebuilt.sh: $size_mib MiB in all"
((size_mib < 40)) || echo "package-prebuilt.sh: warning: $size_mib MiB, over 40; the device tool carries 64 MiB with the tree" >&2
