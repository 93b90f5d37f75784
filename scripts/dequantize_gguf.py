#!/usr/bin/env python3
"""Dequantize every tensor of a GGUF file to F32 with llama.cpp's own gguf-py (not GenieX code),
keeping all metadata. The result is a reference input on which llama.cpp and GenieX both run
plain F32 matrix products, without the activation quantization (Q8_K / Q8_0) that quantized
weights bring; tests/runtime/test_gemma3_real.cpp compares the two on it tightly.

Usage: python3 scripts/dequantize_gguf.py IN.gguf OUT.gguf
"""
import os
import sys

import numpy as np

try:
    import gguf
except ImportError:
    sys.exit("dequantize_gguf: the gguf package is missing (pip install gguf)")


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    src, dst = sys.argv[1], sys.argv[2]
    reader = gguf.GGUFReader(src)
    arch = reader.fields["general.architecture"].contents()
    tmp = dst + ".part"
    writer = gguf.GGUFWriter(tmp, arch)
    for name, field in reader.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture":
            continue
        vtype = field.types[0]
        if vtype == gguf.GGUFValueType.ARRAY:
            writer.add_key_value(name, field.contents(), vtype, sub_type=field.types[-1])
        else:
            writer.add_key_value(name, field.contents(), vtype)
    for t in reader.tensors:
        data = gguf.dequantize(t.data, t.tensor_type).astype(np.float32)
        writer.add_tensor(t.name, data.reshape([int(x) for x in reversed(t.shape)]))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    os.replace(tmp, dst)
    print(dst)


if __name__ == "__main__":
    main()
