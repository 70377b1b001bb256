"""cutrain's training augmentation, draw for draw: the twin of kernels/augment.cuh and kernels/rng.cuh (read
their headers for the formulas), so that the PyTorch reference can train on the very batches cutrain trains on
(`pytorch_reference.py --cutrain-augment`, the multi-step parity check). The recipe is the same as
torchvision's (zero-pad 4, random 32x32 crop, flip with p = 0.5, normalize); only the random draws differ:
cutrain's are a hash of (seed, epoch, sample index) rather than a stream.

No torch here: the tests import it on machines without it.
"""
import numpy as np

_MASK = (1 << 64) - 1


def splitmix64(x):
    """splitmix64's output function on a uint64 (a Python int), as kernels/rng.cuh."""
    x = (x + 0x9E3779B97F4A7C15) & _MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK
    return x ^ (x >> 31)


def random_bits(seed, epoch, index):
    return splitmix64(splitmix64(splitmix64(seed & _MASK) ^ epoch) ^ index)


def crop_flip(seed, epoch, sample, pad=4):
    """(dy, dx, flip) of `sample` in `epoch` (0-based, cutrain's): the window's offset from the unpadded image
    and whether it is mirrored. Bits 0..31 pick the top, bits 32..62 the left, bit 63 the flip."""
    bits = random_bits(seed, epoch, sample)
    choices = 2 * pad + 1
    return (bits & 0xFFFFFFFF) % choices - pad, ((bits >> 32) & 0x7FFFFFFF) % choices - pad, bool(bits >> 63)


def augment(images, indices, epoch, seed, mean, std, pad=4):
    """uint8 HWC images[indices] -> float32 NCHW batch, each cropped and flipped as cutrain draws it in `epoch`,
    normalized as cutrain does, (v - 255 mean) * (1 / (255 std)) in float32, so the inputs match it bit for bit."""
    _, h, w, _ = images.shape
    padded = np.zeros((len(indices), h + 2 * pad, w + 2 * pad, 3), np.uint8)
    padded[:, pad:pad + h, pad:pad + w] = images[indices]
    out = np.empty((len(indices), h, w, 3), np.uint8)
    for i, sample in enumerate(indices):
        dy, dx, flip = crop_flip(seed, epoch, int(sample), pad)
        window = padded[i, pad + dy:pad + dy + h, pad + dx:pad + dx + w]
        out[i] = window[:, ::-1] if flip else window
    mean255 = (np.float32(255) * np.asarray(mean, np.float32)).astype(np.float32)
    inv_std255 = (np.float32(1) / (np.float32(255) * np.asarray(std, np.float32))).astype(np.float32)
    x = (out.astype(np.float32) - mean255) * inv_std255
    return np.ascontiguousarray(x.transpose(0, 3, 1, 2))
