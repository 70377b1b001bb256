"""CIFAR-10 binary files read with numpy alone: the same files, and the same checks, as cutrain's reader.

A folder holds data_batch_1.bin ... data_batch_5.bin (train) and test_batch.bin, any number of
records in each. Each record is 1 label byte and 3072 pixel bytes: 1024 red, 1024 green, 1024 blue,
each plane 32x32 row-major. Records are returned in file order as uint8 HWC images, as cutrain holds
them, so the first `batch_size` train images are the fixed batch of `--dump-first-step`.

No torch here: the tests import this module on machines without it.
"""
import os

import numpy as np

HEIGHT, WIDTH, CHANNELS = 32, 32, 3
RECORD_BYTES = 1 + HEIGHT * WIDTH * CHANNELS  # 3073
NUM_CLASSES = 10
TRAIN_FILES = [f"data_batch_{i}.bin" for i in range(1, 6)]
TEST_FILE = "test_batch.bin"

# Per-channel statistics of the CIFAR-10 train set in [0, 1], as in the reference recipe.
MEAN = (0.4914, 0.4822, 0.4465)
STD = (0.2023, 0.1994, 0.2010)


def read_records(path):
    """One .bin file -> (images uint8 [N, 32, 32, 3], labels int64 [N]). Raises ValueError naming the file."""
    raw = np.fromfile(path, dtype=np.uint8)
    if raw.size % RECORD_BYTES:
        raise ValueError(f"{path}: size {raw.size} bytes is not a multiple of the {RECORD_BYTES}-byte record "
                         "(1 label byte + 3072 pixel bytes)")
    records = raw.reshape(-1, RECORD_BYTES)
    labels = records[:, 0].astype(np.int64)
    bad = np.flatnonzero(labels >= NUM_CLASSES)
    if bad.size:
        raise ValueError(f"{path}: record {bad[0]} has label {labels[bad[0]]}, not below {NUM_CLASSES}")
    # planar [N, C, H, W] -> interleaved [N, H, W, C]
    images = records[:, 1:].reshape(-1, CHANNELS, HEIGHT, WIDTH).transpose(0, 2, 3, 1)
    return np.ascontiguousarray(images), labels


def load_split(folder, train):
    """The train split (data_batch_1..5.bin, in order) or the test split (test_batch.bin) of a CIFAR-10 folder."""
    parts = []
    for name in TRAIN_FILES if train else [TEST_FILE]:
        path = os.path.join(folder, name)
        if not os.path.isfile(path):
            raise ValueError(f"{path}: missing; a CIFAR-10 folder holds {TRAIN_FILES[0]} .. {TRAIN_FILES[-1]} "
                             f"and {TEST_FILE} (the binary version)")
        parts.append(read_records(path))
    if sum(len(p[1]) for p in parts) == 0:
        raise ValueError(f"{folder}: the {'train' if train else 'test'} files hold no records")
    return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])


def channel_stats(images):
    """Per-channel mean and std (population, as cutrain inspect-data) of uint8 HWC images scaled to [0, 1]."""
    pixels = images.reshape(-1, CHANNELS).astype(np.float64) / 255.0
    return pixels.mean(axis=0), pixels.std(axis=0)


def class_counts(labels):
    return np.bincount(labels, minlength=NUM_CLASSES)


def normalize(images, mean=MEAN, std=STD):
    """uint8 HWC -> float32 NCHW, (x / 255 - mean) / std: ToTensor then Normalize, without augmentation."""
    x = images.astype(np.float32).transpose(0, 3, 1, 2) / 255.0
    mean = np.asarray(mean, np.float32).reshape(1, 3, 1, 1)
    std = np.asarray(std, np.float32).reshape(1, 3, 1, 1)
    return (x - mean) / std


if __name__ == "__main__":
    # `python3 bench/cifar10.py DIR`: the figures `cutrain inspect-data --data DIR` prints, from numpy.
    import sys
    if len(sys.argv) != 2 or sys.argv[1].startswith("-"):
        sys.exit("usage: cifar10.py DIR  (prints record counts, per-class counts, per-channel mean/std)")
    try:
        train_x, train_y = load_split(sys.argv[1], train=True)
        test_x, _ = load_split(sys.argv[1], train=False)
    except ValueError as e:
        sys.exit(f"cifar10.py: error: {e}")
    mean, std = channel_stats(train_x)
    print(f"train: {len(train_y)} records, test: {len(test_x)} records")
    print("per class:", " ".join(str(c) for c in class_counts(train_y)))
    print("mean:", " ".join(f"{m:.6f}" for m in mean), " std:", " ".join(f"{s:.6f}" for s in std))
