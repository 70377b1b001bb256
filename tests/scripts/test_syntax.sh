# Every shell script parses (bash -n) and every Python script compiles (py_compile).
source "$(dirname "$0")/common.sh"
shells=("$repo"/bench/*.sh "$repo"/scripts/*.sh "$repo"/tests/scripts/*.sh)
pythons=("$repo"/dist/launch/*.py "$repo"/bench/*.py "$repo"/scripts/*.py)
for f in "${shells[@]}"; do bash -n "$f" || fail "bash -n $f"; done
PYTHONPYCACHEPREFIX="$scratch/pycache" python3 -m py_compile "${pythons[@]}" || fail "py_compile"  # no __pycache__ here
echo "ok: ${#shells[@]} shell scripts parse, ${#pythons[@]} Python scripts compile"
