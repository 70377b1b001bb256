# The CIFAR-10 reader of the PyTorch reference (bench/cifar10.py, numpy) reads what cutrain reads:
# 1. on files this test writes with numpy: file order, planar RGB -> HWC, and the one-line errors;
# 2. on files written by `cutrain make-synthetic` and on the numpy-written ones: the record counts,
#    per-class counts and per-channel mean/std that `cutrain inspect-data` prints equal numpy's.
source "$(dirname "$0")/common.sh"
require_python numpy

write_cifar "$scratch/np" data_batch_1.bin:40 data_batch_2.bin:25 data_batch_3.bin:1 data_batch_4.bin:9 data_batch_5.bin:3
"$py" - "$scratch/np" <<'PY'
import os, sys, numpy as np, cifar10
folder = sys.argv[1]
x, y = cifar10.load_split(folder, train=True)
assert x.shape == (78, 32, 32, 3) and x.dtype == np.uint8 and y.shape == (78,), (x.shape, y.shape)
assert list(y[:3]) == [0, 1, 2] and list(y[40:43]) == [1, 2, 3] and y[65] == 2, y   # in file order
raw = np.fromfile(os.path.join(folder, "data_batch_2.bin"), np.uint8).reshape(-1, 3073)
for i, yy, xx, c in [(0, 0, 0, 0), (7, 31, 5, 2), (24, 3, 31, 1)]:
    assert x[40 + i, yy, xx, c] == raw[i, 1 + c * 1024 + yy * 32 + xx]   # planar RGB -> HWC
tx, ty = cifar10.load_split(folder, train=False)
assert tx.shape == (30, 32, 32, 3)
n = cifar10.normalize(x[:2])
assert n.shape == (2, 3, 32, 32) and abs(n[1, 2, 4, 5] - (x[1, 4, 5, 2] / 255 - 0.4465) / 0.2010) < 1e-6

def error_of(fn):
    try:
        fn()
    except ValueError as e:
        assert "\n" not in str(e)
        return str(e)
    raise AssertionError("no error")

with open(os.path.join(folder, "test_batch.bin"), "ab") as f:
    f.write(b"\0" * 100)   # truncated record
assert "test_batch.bin: size" in error_of(lambda: cifar10.load_split(folder, train=False))
os.rename(os.path.join(folder, "data_batch_4.bin"), os.path.join(folder, "batch_4"))
assert "data_batch_4.bin: missing" in error_of(lambda: cifar10.load_split(folder, train=True))
os.rename(os.path.join(folder, "batch_4"), os.path.join(folder, "data_batch_4.bin"))
bad = bytearray(open(os.path.join(folder, "data_batch_1.bin"), "rb").read())
bad[5 * 3073] = 10         # record 5's label
open(os.path.join(folder, "data_batch_1.bin"), "wb").write(bad)
assert "record 5 has label 10" in error_of(lambda: cifar10.load_split(folder, train=True))
PY
echo "ok: numpy-written files read in order, planar to HWC, bad files refused in one line"

cutrain="$bin/cutrain"
if ! "$cutrain" make-synthetic --help >/dev/null 2>&1 || ! "$cutrain" inspect-data --help >/dev/null 2>&1; then
  echo "note: $cutrain has no make-synthetic/inspect-data; compared with numpy-written files only"
  exit 0
fi
"$cutrain" make-synthetic --out "$scratch/syn" --train 200 --test 50 >/dev/null || fail "make-synthetic: exit $?"
write_cifar "$scratch/np2" data_batch_1.bin:33 data_batch_2.bin:17 data_batch_3.bin:4 data_batch_4.bin:20 data_batch_5.bin:6
for d in "$scratch/syn" "$scratch/np2"; do
  "$cutrain" inspect-data --data "$d" >"$scratch/inspect.txt" || fail "inspect-data --data $d: exit $?"
  "$py" - "$d" "$scratch/inspect.txt" <<'PY' || fail "inspect-data and numpy disagree on $d"
import re, sys, numpy as np, cifar10
folder, text = sys.argv[1], open(sys.argv[2]).read()
x, y = cifar10.load_split(folder, train=True)
tx, ty = cifar10.load_split(folder, train=False)
train_n, test_n = map(int, re.search(r"records: train (\d+), test (\d+)", text).groups())
assert (train_n, test_n) == (len(y), len(ty)), (train_n, test_n, len(y), len(ty))
rows = re.findall(r"^(\d+)\s+\S+\s+(\d+)\s+(\d+)\s*$", text, re.M)
assert [int(r[1]) for r in rows] == list(cifar10.class_counts(y)), (rows, cifar10.class_counts(y))
assert [int(r[2]) for r in rows] == list(cifar10.class_counts(ty)), rows
mean, std = cifar10.channel_stats(x)
printed_mean = [float(v) for v in re.search(r"train mean \(R G B\):\s*(\S+) (\S+) (\S+)", text).groups()]
printed_std = [float(v) for v in re.search(r"train std\s+\(R G B\):\s*(\S+) (\S+) (\S+)", text).groups()]
assert np.allclose(printed_mean, mean, atol=6e-5) and np.allclose(printed_std, std, atol=6e-5), \
    (printed_mean, mean, printed_std, std)
print(f"{folder}: {len(y)}/{len(ty)} records, mean {np.round(mean, 4)}, std {np.round(std, 4)}: same as cutrain")
PY
done
echo "ok: cutrain inspect-data and numpy agree on counts, classes and channel statistics"
