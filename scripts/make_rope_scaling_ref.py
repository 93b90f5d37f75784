#!/usr/bin/env python3
"""Reference logits from llama.cpp for Llama 3.1-style RoPE scaling (rope_freqs.weight).

Builds a tiny random-weight Llama GGUF whose rotary embedding carries Llama 3.1's frequency
factors (type "llama3": factor 8, low_freq_factor 1, high_freq_factor 4, original context
8192, base 500000), runs it through llama.cpp (llama-cpp-python) over 8,400 positions, past
the original 8,192-token context, and records the logits at a few positions.

The weights are not stored: every element comes from a counter-based generator (splitmix64 of
tensor seed and element index) that tests/runtime/test_rope_scaling.cpp reimplements, so the
test rebuilds the same GGUF in memory. Only the factors and the reference logits are committed
(tests/data/rope_scaling/llama31_tiny.json).

Usage: python3 scripts/make_rope_scaling_ref.py [--out tests/data/rope_scaling/llama31_tiny.json]
"""
import argparse
import json
import math
import os
import sys
import tempfile

import numpy as np

try:
    import gguf
    import llama_cpp
except ImportError as e:
    sys.exit(f"make_rope_scaling_ref: {e} (pip install gguf llama-cpp-python)")

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CFG = dict(n_embd=128, n_layer=2, n_head=4, n_head_kv=2, n_ff=256, n_vocab=256, rope_base=500000.0,
           rms_eps=1e-5, factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0, original_ctx=8192,
           n_tokens=8400, n_ctx=8448)
POSITIONS = [0, 1, 1000, 2047, 4096, 8191, 8192, 8300, 8399]
MASK = (1 << 64) - 1


def splitmix64(x):
    x = (x + 0x9E3779B97F4A7C15) & MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK
    return x ^ (x >> 31)


def values(seed, n, scale, offset=0.0):
    """n float32 values: offset + scale * u, u uniform in [-1, 1) from splitmix64(seed << 32 | i)."""
    out = np.empty(n, dtype=np.float32)
    base = (seed & 0xFFFFFFFF) << 32
    for i in range(n):
        u = (splitmix64(base | i) >> 11) * (1.0 / (1 << 53)) * 2.0 - 1.0
        out[i] = np.float32(offset + scale * u)
    return out


def llama3_factors(c):
    head_dim = c["n_embd"] // c["n_head"]
    low_wavelen = c["original_ctx"] / c["low_freq_factor"]
    high_wavelen = c["original_ctx"] / c["high_freq_factor"]
    out = []
    for i in range(0, head_dim, 2):
        freq = 1.0 / (c["rope_base"] ** (i / head_dim))
        wavelen = 2 * math.pi / freq
        if wavelen < high_wavelen:
            out.append(1.0)
        elif wavelen > low_wavelen:
            out.append(c["factor"])
        else:
            smooth = (c["original_ctx"] / wavelen - c["low_freq_factor"]) / (c["high_freq_factor"] - c["low_freq_factor"])
            out.append(1.0 / ((1 - smooth) / c["factor"] + smooth))
    return np.array(out, dtype=np.float32)


def tensors(c):
    """(name, shape innermost-first, float32 data) in the order the test adds them."""
    d, ff, v = c["n_embd"], c["n_ff"], c["n_vocab"]
    hd = d // c["n_head"]
    seed = 1
    out = []

    def add(name, ne, scale, offset=0.0):
        nonlocal seed
        n = int(np.prod(ne))
        out.append((name, ne, values(seed, n, scale, offset)))
        seed += 1

    add("token_embd.weight", [d, v], 1.0)
    add("output_norm.weight", [d], 0.2, 1.0)
    add("output.weight", [d, v], 0.15)
    for i in range(c["n_layer"]):
        p = f"blk.{i}."
        add(p + "attn_norm.weight", [d], 0.2, 1.0)
        add(p + "attn_q.weight", [d, c["n_head"] * hd], 0.3)
        add(p + "attn_k.weight", [d, c["n_head_kv"] * hd], 0.3)
        add(p + "attn_v.weight", [d, c["n_head_kv"] * hd], 0.3)
        add(p + "attn_output.weight", [c["n_head"] * hd, d], 0.15)
        add(p + "ffn_norm.weight", [d], 0.2, 1.0)
        add(p + "ffn_gate.weight", [d, ff], 0.15)
        add(p + "ffn_up.weight", [d, ff], 0.15)
        add(p + "ffn_down.weight", [ff, d], 0.1)
    return out


def write_gguf(path, c, factors):
    w = gguf.GGUFWriter(path, "llama")
    w.add_name("tiny-llama31-rope-test")
    w.add_context_length(131072)
    w.add_embedding_length(c["n_embd"])
    w.add_block_count(c["n_layer"])
    w.add_feed_forward_length(c["n_ff"])
    w.add_head_count(c["n_head"])
    w.add_head_count_kv(c["n_head_kv"])
    w.add_rope_freq_base(c["rope_base"])
    w.add_rope_dimension_count(c["n_embd"] // c["n_head"])
    w.add_layer_norm_rms_eps(c["rms_eps"])
    w.add_tokenizer_model("none")
    w.add_vocab_size(c["n_vocab"])
    for name, ne, data in tensors(c):
        w.add_tensor(name, data.reshape(list(reversed(ne))))
    w.add_tensor("rope_freqs.weight", factors)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(REPO, "tests", "data", "rope_scaling", "llama31_tiny.json"))
    args = ap.parse_args()
    c = CFG
    factors = llama3_factors(c)
    tokens = [(i * 7 + 3) % c["n_vocab"] for i in range(c["n_tokens"])]
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "tiny.gguf")
        write_gguf(path, c, factors)
        llm = llama_cpp.Llama(model_path=path, n_ctx=c["n_ctx"], n_batch=512, n_ubatch=512, n_threads=2,
                              logits_all=True, verbose=False, flash_attn=False)
        llm.eval(tokens)
        scores = np.array(llm.scores[: c["n_tokens"]], dtype=np.float32)
    out = {
        "about": "llama.cpp logits of a tiny random Llama with Llama 3.1 RoPE frequency factors; "
                 "regenerate with scripts/make_rope_scaling_ref.py",
        "llama_cpp_python": llama_cpp.__version__,
        "config": c,
        "rope_freqs": [float(x) for x in factors],
        "tokens": "(i * 7 + 3) % n_vocab for i in range(n_tokens)",
        "settings": "n_ctx 8448, n_batch 512, KV cache f16, no flash attention, 2 threads",
        "positions": POSITIONS,
        "logits": [[float(x) for x in scores[p]] for p in POSITIONS],
    }
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(out, f)
    print(f"wrote {args.out}: factors {np.round(factors, 3).tolist()}")


if __name__ == "__main__":
    main()
