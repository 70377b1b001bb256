#!/usr/bin/env bash
# Breaks the CUDA kernels on purpose, one way at a time, and checks that the emulated tests catch
# each break: the emulated device's and the kernels' tests (label `emu`), in all three thread
# orders, under AddressSanitizer and the alignment check, in the build that scripts/test-sanitizers.sh
# makes for them (build-emulated-asan/). Every file it touches is put back, also when interrupted. Not run by CI
# (it rebuilds the emulated tests once per mutation: several minutes).
#
#   scripts/mutate-kernels.sh            # every mutation
#   scripts/mutate-kernels.sh barrier    # those whose name contains "barrier"
set -euo pipefail
cd "$(dirname "$0")/.."

# name | file | text in the file | what replaces it
mutations=(
  "loss-barrier|kernels/cross_entropy.cu|  __syncthreads();|"
  "grid-stride-bound|kernels/launch.cuh|i < (n); i += int64_t(gridDim.x)|i <= (n); i += int64_t(gridDim.x)"
  "shuffle-offset|kernels/cross_entropy.cu|offset /= 2) value +=|offset /= 4) value +="
  "unaligned-pack|kernels/launch.cuh|if (reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;|(void)p;"
  "bn-tree-barrier|kernels/batchnorm.cu|    __syncthreads();  // this level's merges done before the next level reads them|"
  "bn-partials-barrier|kernels/batchnorm.cu|  cooperative_groups::this_grid().sync();  // every block's partials written|"
  "bn-sums-barrier|kernels/batchnorm.cu|  cooperative_groups::this_grid().sync();  // every channel's sums written|"
  "bn-skip-partial|kernels/batchnorm.cu|chunk < chunks; chunk += stride)|chunk < chunks - 1; chunk += stride)"
  "bn-merge-term|kernels/batchnorm.cuh|fmaf(delta * delta * a.count, share_b, a.m2 + b.m2)|a.m2 + b.m2"
  "bn-kept-rows|kernels/batchnorm.cu|k < t.cached_rows ? cache[k * threads + tid]|k <= t.cached_rows ? cache[k * threads + tid]"
  "bn-mask-bit|kernels/batchnorm.cu|(bits >> v) & 1u, fusion)|(bits >> (v ^ 1)) & 1u, fusion)"
  "read-past-end|kernels/batchnorm.cu|if (c < C) s.m2[c]|if (c <= C) s.m2[c]"
  "sgd-pack-tail|kernels/sgd.cu|s.numel / kVec * kVec : 0;|(s.numel + kVec - 1) / kVec * kVec : 0;"
  "sgd-pitch|kernels/sgd.cuh|i / a.cols * a.pitch + i % a.cols|i / a.cols * a.cols + i % a.cols"
  "lr-step-counter|kernels/lr_schedule.cu|  *step += 1;|  *step += 2;"
  "copy-rows-last-row|kernels/copy_rows.cu|LOOP(i, b.rows * b.cols)|LOOP(i, b.rows * b.cols - b.cols)"
  "launch-unrecorded|emu/launch.h|    if (record_instead(std::move(op))) return;|    (void)op;"
)

build=build-emulated-asan
saved=$(mktemp -d)  # the originals of the files being mutated, by their paths from the repository's root
restore() {
  (cd "$saved" && find . -type f -print0) | while IFS= read -r -d '' f; do cp "$saved/$f" "$f"; done
  rm -rf "$saved"
}
trap restore EXIT

# Replaces the one occurrence of $2 in file $1 by $3; fails when the text is not there once.
replace_once() {
  python3 - "$@" <<'EOF'
import sys
path, old, new = sys.argv[1:]
text = open(path).read()
if text.count(old) != 1:
    sys.exit(f"{path}: the mutation's text occurs {text.count(old)} times, not once; update scripts/mutate-kernels.sh")
open(path, "w").write(text.replace(old, new))
EOF
}

run_tests() {
  cmake --build "$build" -j "$(nproc)" --target cutrain_emu_tests cutrain_emu_nccl_tests >"$build/mutation-build.log" 2>&1 ||
    return 2
  ctest --test-dir "$build" -L '^emu$' -j "$(nproc)" --output-on-failure >"$build/mutation-test.log" 2>&1
}

scripts/test-sanitizers.sh --build-only emu >/dev/null
echo "mutate-kernels: the unbroken kernels first"
if ! run_tests; then
  echo "mutate-kernels: error: the tests fail before any mutation; see $build/mutation-test.log" >&2
  exit 1
fi

survived=0
for m in "${mutations[@]}"; do
  IFS='|' read -r name file old new <<<"$m"
  case "$name" in *"${1:-}"*) ;; *) continue ;; esac
  mkdir -p "$saved/$(dirname "$file")"
  cp "$file" "$saved/$file"
  replace_once "$file" "$old" "$new"
  status=0
  run_tests || status=$?
  if [ "$status" -eq 0 ]; then
    echo "SURVIVED  $name ($file): every test passed"
    survived=$((survived + 1))
  elif [ "$status" -eq 2 ]; then
    echo "BROKEN    $name ($file): the mutated kernels do not build; see $build/mutation-build.log"
    survived=$((survived + 1))
  else
    log="$build/mutation-test.log"
    failed=$(sed -n '/The following tests FAILED:/,$p' "$log" | grep -E '^\s+[0-9]+ - ' || true)
    sanitizer=$(grep -o -m1 'AddressSanitizer: [a-z-]*\|runtime error: [a-z ]*misaligned address' "$log" || true)
    echo "CAUGHT    $name ($file)${sanitizer:+ by $sanitizer}: failing tests, in the orders that fail"
    sed -E 's/^\s+[0-9]+ - (.*) \(emu, ([a-z]+) order\).*/\1|\2/' <<<"$failed" | sort |
      awk -F'|' '{ orders[$1] = orders[$1] (orders[$1] ? ", " : "") $2 }
                 END { for (t in orders) print "          " t " (" orders[t] ")" }' | sort
  fi
  cp "$saved/$file" "$file"
  rm "$saved/$file"
done

echo "mutate-kernels: rebuilding the unbroken kernels"
cmake --build "$build" -j "$(nproc)" --target cutrain_emu_tests cutrain_emu_nccl_tests >/dev/null
exit $((survived > 0))
