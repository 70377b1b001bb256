# Shared by the script tests (sourced): arguments, a scratch folder, an interpreter that has what a test
# needs, and the verdicts. Each test is `bash test_X.sh REPO_ROOT BIN_DIR`; "SKIPPED: why" makes CTest
# count it as skipped.
set -Eeuo pipefail
# A command that fails where no test expected it ends the test under set -e, and says so: which line,
# which command. (Such an end was silent, as a pid looked up while its rank restarted once was.)
trap 'echo "FAIL: ${0##*/} line $LINENO: \"$BASH_COMMAND\" exited $?" >&2' ERR
repo="$(cd "${1:?usage: $0 REPO_ROOT [BIN_DIR]}" && pwd)"
bin="${2:-$repo/build/bin}"
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
# No __pycache__ in the source tree, while the installed packages' own .pyc files are still read (a cache prefix
# would hide them, and torch would be compiled from source in every test: 20 s more for inductor alone).
export PYTHONDONTWRITEBYTECODE=1
export PYTHONPATH="$repo/bench"                # bench/'s modules, for the tests' Python snippets

# A failure's text may quote output that holds "SKIPPED: " (a summary with a skipped row), and CTest counts
# a test whose output holds it anywhere as skipped, whatever its exit status: fail() writes it "SKIPPED - ".
fail() { local why="$*"; echo "FAIL: ${why//SKIPPED: /SKIPPED - }" >&2; exit 1; }
skip() { echo "SKIPPED: $*"; exit 0; }

# python_with MODULES: the first interpreter that has them all (MODULES separated by commas), of $PYTHON or
# else the project's environment (scripts/python_env.sh: torch, torchvision, safetensors, tensorboard, numpy),
# then python3 on PATH and /usr/bin/python3 (Debian's has numpy and matplotlib; a pyenv python3 may have
# neither). Empty when none does. It finds the modules without importing them: importing torch and
# torchvision takes about 4 CPU-seconds, and eleven tests asked.
source "$repo/scripts/python_env.sh"
python_with() {
  local py
  for py in "$(default_python)" python3 /usr/bin/python3; do
    if command -v "$py" >/dev/null && "$py" -c "import importlib.util as u, sys
sys.exit(not all(u.find_spec(m.strip()) for m in sys.argv[1].split(',')))" "$1" 2>/dev/null; then
      echo "$py"; return
    fi
  done
}

# require_python MODULES: $py is the python_with MODULES, or the test is skipped.
require_python() {
  py="$(python_with "$1")"
  [ -n "$py" ] || skip "$1 not importable by $(default_python), python3 or /usr/bin/python3 (scripts/setup.sh --with-tests)"
}

# cutrain_and_torch: where a test runs both programs: a cutrain binary in $bin and $py with torch, or the test is
# skipped; PyTorch on one thread; the scratch folder as the working directory.
cutrain_and_torch() {
  require_python "numpy, torch, torchvision"
  [ -x "$bin/cutrain" ] || skip "no cutrain binary in $bin"
  export OMP_NUM_THREADS=1
  cd "$scratch"
}

# one_line_error WHAT EXPECTED_STATUS CMD...: CMD fails with that status and says why on exactly one line.
one_line_error() {
  local what="$1" expected="$2" status=0; shift 2
  "$@" >"$scratch/stdout" 2>"$scratch/stderr" || status=$?
  [ "$status" = "$expected" ] || fail "$what: exit status $status, expected $expected ($(head -c 300 "$scratch/stderr"))"
  [ "$(wc -l <"$scratch/stderr")" = 1 ] || fail "$what: stderr is not one line: $(cat "$scratch/stderr")"
  grep -q "error: " "$scratch/stderr" || fail "$what: no 'error: ' in: $(cat "$scratch/stderr")"
}

# write_cifar DIR TRAIN_FILES... : small CIFAR-10 binary files with numpy: label = record index % 10 and
# pixels from a seeded generator; test_batch.bin gets 30 records. Runs $py (numpy).
write_cifar() {
  local dir="$1"; shift
  mkdir -p "$dir"
  "$py" - "$dir" "$@" <<'PY'
import sys, numpy as np
rng = np.random.default_rng(7)
def write(path, n, offset):
    labels = ((np.arange(n) + offset) % 10).astype(np.uint8)
    pixels = rng.integers(0, 256, (n, 3072), dtype=np.uint8)
    np.concatenate([labels[:, None], pixels], axis=1).tofile(path)
folder, files = sys.argv[1], sys.argv[2:]
for i, spec in enumerate(files):
    name, n = spec.split(":")
    write(f"{folder}/{name}", int(n), i)
write(f"{folder}/test_batch.bin", 30, 0)
PY
}

# same_tensors A B: two checkpoints hold the same tensors with the same values, byte for byte (their
# metadata names each file's own run, so the files differ). Runs python_with numpy.
same_tensors() {
  "$(python_with numpy)" -c '
import sys, safetensors_io
a, b = (safetensors_io.load(p) for p in sys.argv[1:3])
same = a.keys() == b.keys() and all(a[k].dtype == b[k].dtype and a[k].tobytes() == b[k].tobytes() for k in a)
sys.exit(0 if same else 1)' "$1" "$2"
}
