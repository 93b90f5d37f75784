#!/usr/bin/env python3
"""Writes tests/data/quantize/rmse_reference.bin: weight rows and llama.cpp's quantization error
on each, per type, for tests/convert/test_quantize.cpp (GenieX's weight quantizer must not be
worse than llama.cpp's on any row).

llama.cpp's quantizer is called directly: ggml_quantize_chunk from the libggml-base shipped
with llama-cpp-python (the function llama_model_quantize uses, without an importance matrix);
its blocks are decoded with gguf-py's numpy dequantizers.

Rows (512 values each): 4 Gaussian, 1 Student-t (heavy tails, outliers), 1 Gaussian with a
non-zero mean, and 6 real rows (first 512 values) from Gemma 3 270M's F32 GGUF when present
($GENIEX_TOKENIZER_DIR/gemma-3-270m-f32.gguf).

Layout (little-endian): "GXQR", u32 version 1, u32 n_rows, u32 n_cols, u32 n_types;
f32 rows[n_rows][n_cols]; then per type: u32 ggml type id, f64 sse[n_rows] (sum of squared
errors of llama.cpp's dequantized row).
"""
import ctypes
import os
import struct
import sys

import numpy as np
import gguf
from gguf.quants import dequantize
import llama_cpp

N_COLS = 512
TYPES = [gguf.GGMLQuantizationType.Q4_0, gguf.GGMLQuantizationType.Q4_1, gguf.GGMLQuantizationType.Q5_0,
         gguf.GGMLQuantizationType.Q5_1, gguf.GGMLQuantizationType.Q8_0, gguf.GGMLQuantizationType.Q4_K,
         gguf.GGMLQuantizationType.Q5_K, gguf.GGMLQuantizationType.Q6_K]
REAL_ROWS = [("token_embd.weight", 1234), ("blk.0.attn_q.weight", 7), ("blk.3.attn_v.weight", 100),
             ("blk.5.ffn_up.weight", 42), ("blk.9.ffn_down.weight", 300), ("blk.17.ffn_gate.weight", 5)]


def load_ggml():
    lib_dir = os.path.join(os.path.dirname(llama_cpp.__file__), "lib")
    lib = ctypes.CDLL(os.path.join(lib_dir, "libggml-base.so"))
    lib.ggml_quantize_chunk.restype = ctypes.c_size_t
    lib.ggml_quantize_chunk.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,
                                        ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p]
    lib.ggml_quantize_init.argtypes = [ctypes.c_int]
    return lib


def make_rows():
    rng = np.random.default_rng(20250601)
    rows = [rng.standard_normal(N_COLS) * s for s in (1.0, 0.02, 0.3, 5.0)]
    rows.append(rng.standard_t(3, N_COLS) * 0.05)
    rows.append(rng.standard_normal(N_COLS) * 0.1 + 0.05)
    path = os.path.join(os.environ.get("GENIEX_TOKENIZER_DIR", "/root/.cache/geniex/tokenizers"),
                        "gemma-3-270m-f32.gguf")
    if os.path.exists(path):
        reader = gguf.GGUFReader(path)
        tensors = {t.name: t for t in reader.tensors}
        for name, r in REAL_ROWS:
            data = np.asarray(tensors[name].data, dtype=np.float32)
            rows.append(data[r, :N_COLS])
    else:
        print(f"note: {path} not found; random rows only", file=sys.stderr)
    return np.stack(rows).astype(np.float32)


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(__file__), "..", "tests", "data", "quantize", "rmse_reference.bin")
    lib = load_ggml()
    rows = np.ascontiguousarray(make_rows())
    blob = bytearray(b"GXQR" + struct.pack("<IIII", 1, rows.shape[0], rows.shape[1], len(TYPES)))
    blob += rows.tobytes()
    for t in TYPES:
        block, type_size = gguf.GGML_QUANT_SIZES[t]
        row_bytes = N_COLS // block * type_size
        lib.ggml_quantize_init(int(t))
        sse = []
        for row in rows:
            dst = np.zeros(row_bytes, dtype=np.uint8)
            src = np.ascontiguousarray(row, dtype=np.float32)
            n = lib.ggml_quantize_chunk(int(t), src.ctypes.data, dst.ctypes.data, 0, 1, N_COLS, None)
            assert n == row_bytes, (t, n, row_bytes)
            y = dequantize(dst, t).reshape(-1).astype(np.float64)
            sse.append(float(((y - row.astype(np.float64)) ** 2).sum()))
        blob += struct.pack("<I", int(t)) + struct.pack(f"<{len(sse)}d", *sse)
        print(f"{t.name}: rmse per row " + " ".join(f"{np.sqrt(s / N_COLS):.3g}" for s in sse))
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out, "wb") as f:
        f.write(blob)
    print(f"wrote {out} ({len(blob)} bytes)")


if __name__ == "__main__":
    main()
