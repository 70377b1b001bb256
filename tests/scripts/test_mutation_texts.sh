# scripts/mutate-kernels.sh breaks the kernels by replacing a text that must occur in its file exactly once;
# a text that the code no longer holds stops the script at that mutation, which CI does not run. Each
# mutation's text is checked here against today's files (two had gone stale unseen, one since a move and
# one since a rewrite of the merge loop).
source "$(dirname "$0")/common.sh"
python3 - "$repo" <<'PY'
import re, sys
root = sys.argv[1]
script = open(f"{root}/scripts/mutate-kernels.sh").read()
block = script[script.index("mutations=(") : script.index("\n)\n")]
entries = re.findall(r'^\s*"(.*)"\s*$', block, re.M)
if not entries:
    sys.exit("FAIL: no mutations found in scripts/mutate-kernels.sh")
stale = []
for entry in entries:
    name, path, old, new = entry.replace("\\\\", "\\").split("|")
    count = open(f"{root}/{path}").read().count(old)
    if count != 1:
        stale.append(f"{name}: '{old}' occurs {count} times in {path}")
if stale:
    sys.exit("FAIL: " + "; ".join(stale))
print(f"ok: the {len(entries)} mutations' texts each occur once in their files")
PY
