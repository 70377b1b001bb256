"""The safetensors format with numpy alone: the files cutrain reads and writes (weights, gradient dumps).

Layout: an 8-byte little-endian header length N, N bytes of JSON
{"name": {"dtype": "F32", "shape": [...], "data_offsets": [begin, end]}, ..., "__metadata__": {...}},
then the tensors' bytes, little-endian, row-major, offsets counted from the end of the header.

Both directions are this module's own, so the code that the tests check here is the code that runs on a
GPU machine, whether or not the `safetensors` package is installed there. Reading also takes BF16, which
numpy lacks, widened to float32.
"""
import json
import struct

import numpy as np

_DTYPES = {"F64": np.float64, "F32": np.float32, "F16": np.float16, "I64": np.int64, "I32": np.int32,
           "I16": np.int16, "I8": np.int8, "U8": np.uint8, "BOOL": np.bool_}
_NAMES = {np.dtype(v): k for k, v in _DTYPES.items()}


def save(tensors, path):
    """Write a dict name -> numpy array (any dtype in _DTYPES) to `path`."""
    tensors = {k: np.asarray(v, order="C") for k, v in tensors.items()}  # keeps 0-d shapes
    header, offset = {}, 0
    for name in sorted(tensors):
        t = tensors[name]
        if t.dtype not in _NAMES:
            raise ValueError(f"{path}: tensor {name}: dtype {t.dtype} has no safetensors name here")
        header[name] = {"dtype": _NAMES[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + t.nbytes]}
        offset += t.nbytes
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # the data starts 8-byte aligned
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for name in sorted(tensors):
            f.write(tensors[name].astype(tensors[name].dtype.newbyteorder("<"), copy=False).tobytes())


def load(path):
    """Read `path` -> dict name -> numpy array (BF16 widened to float32). Raises ValueError naming the file."""
    try:
        with open(path, "rb") as f:
            blob = f.read()
    except OSError as e:
        raise ValueError(f"{path}: cannot read: {e.strerror}") from None
    if len(blob) < 8:
        raise ValueError(f"{path}: too short for a safetensors header")
    (n,) = struct.unpack("<Q", blob[:8])
    if n > len(blob) - 8:
        raise ValueError(f"{path}: header length {n} runs past the end of the file ({len(blob)} bytes)")
    try:
        header = json.loads(blob[8:8 + n])
    except ValueError as e:
        raise ValueError(f"{path}: header is not JSON: {e}") from None
    data = memoryview(blob)[8 + n:]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        shape = tuple(info["shape"])
        if not 0 <= begin <= end <= len(data):
            raise ValueError(f"{path}: tensor {name}: data_offsets {begin}..{end} outside the data")
        if info["dtype"] == "BF16":  # the upper half of a float32
            bits = np.frombuffer(data[begin:end], dtype="<u2").astype(np.uint32) << 16
            array = bits.view(np.float32)
        elif info["dtype"] in _DTYPES:
            array = np.frombuffer(data[begin:end], dtype=np.dtype(_DTYPES[info["dtype"]]).newbyteorder("<"))
        else:
            raise ValueError(f"{path}: tensor {name}: unsupported dtype {info['dtype']}")
        if array.size != int(np.prod(shape)):
            raise ValueError(f"{path}: tensor {name}: {end - begin} bytes do not hold shape {list(shape)}")
        out[name] = array.reshape(shape).copy()
    return out
