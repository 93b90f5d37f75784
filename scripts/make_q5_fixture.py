#!/usr/bin/env python3
"""Regenerates tests/data/quant/q5_fixture.bin: source floats and their Q5_0 / Q5_1 encodings
and decodings made by llama.cpp's own Python quantizer (the `gguf` package), so that
tests/quant/test_q5_fixture.cpp can check that GenieX reads and writes the same bytes.

Layout (little-endian):
  char[8]  magic "GXQ5FIX1"
  u32      rows, u32 cols          (cols a multiple of 32)
  f32      src[rows * cols]
  then for Q5_0 and for Q5_1 in that order:
    u32    ggml type id (6, 7), u32 bytes per row
    u8     quantized[rows * bytes per row]   gguf.quants.quantize(src, type)
    f32    decoded[rows * cols]              gguf.quants.dequantize(quantized, type)

Usage: python3 scripts/make_q5_fixture.py [output path]
"""
import struct
import sys
from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType
from gguf.quants import dequantize, quantize

ROWS = 12
COLS = 128


def source_rows() -> np.ndarray:
    rng = np.random.default_rng(20261130)
    x = rng.standard_normal((ROWS, COLS)).astype(np.float32)
    x[1] *= np.float32(1e-3)                              # small scale
    x[2] = np.float32(0.0)                                # all-zero blocks (d = 0)
    x[3] = np.float32(1.75)                               # constant blocks (Q5_1: d = 0)
    x[4] = (np.arange(COLS) % 32 - 8).astype(np.float32)  # integers: exact ties in Q5_1
    x[5] = ((np.arange(COLS) % 33) * 0.5 - 8.0).astype(np.float32)  # halves: Q5_0 ties
    x[6, ::7] = np.float32(9.0)                           # positive max: negative Q5_0 d
    x[7, 3::5] = np.float32(-9.0)                         # negative max
    x[8] = np.abs(x[8])                                   # one-signed blocks
    x[9] = rng.standard_t(2.0, COLS).astype(np.float32) * np.float32(40.0)  # heavy tails
    x[10, 0::32] = np.float32(-0.0)
    x[11] = rng.uniform(-65000.0, 65000.0, COLS).astype(np.float32)  # near fp16's limit
    return x


def main() -> None:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else (
        Path(__file__).resolve().parent.parent / "tests" / "data" / "quant" / "q5_fixture.bin")
    src = source_rows()
    parts = [b"GXQ5FIX1", struct.pack("<II", ROWS, COLS), src.astype("<f4").tobytes()]
    for qtype in (GGMLQuantizationType.Q5_0, GGMLQuantizationType.Q5_1):
        q = quantize(src, qtype)
        assert q.dtype == np.uint8 and q.shape[0] == ROWS
        deq = dequantize(q, qtype).astype(np.float32).reshape(ROWS, COLS)
        parts.append(struct.pack("<II", int(qtype), q.shape[1]))
        parts.append(np.ascontiguousarray(q).tobytes())
        parts.append(deq.astype("<f4").tobytes())
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(b"".join(parts))
    print(f"wrote {out} ({out.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
