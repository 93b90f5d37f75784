#!/usr/bin/env python3
"""Reference logits from llama.cpp for each supported architecture, on tiny random models.

For every case below the script builds a tiny random-weight GGUF of that architecture, runs it
through llama.cpp (llama-cpp-python) and records the logits at a few positions:

  llama31  Llama with Llama 3.1 RoPE scaling (rope_freqs.weight: factor 8, low_freq_factor 1,
           high_freq_factor 4, original context 8192, base 500000), 8,400 positions so that
           the check runs past the original 8,192-token context
  qwen2    Qwen2/2.5: biases on q, k and v, NeoX RoPE
  qwen3    Qwen3: per-head RMSNorm on q and k, head_dim larger than n_embd / n_head, NeoX RoPE
  gemma3   Gemma 3: scaled embeddings, pre- and post-norms, q/k norms, GELU-tanh, five local
           layers with a 16-token sliding window (RoPE base 10000) then a global one (1e6),
           300 positions so that the window matters

Weights are not stored. Every element comes from a counter-based generator (splitmix64 of a
tensor seed and the element index) that tests/runtime/test_arch_refs.cpp reimplements; the
fixture (tests/data/arch_refs/NAME.json) lists the metadata and, per tensor, its name, shape,
seed, scale and offset (or its values, for the small rope_freqs tensor), so the test rebuilds
the same GGUF in memory.

Usage: python3 scripts/make_arch_refs.py [NAME ...]   (default: all)
"""
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
    sys.exit(f"make_arch_refs: {e} (pip install gguf llama-cpp-python)")

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT_DIR = os.path.join(REPO, "tests", "data", "arch_refs")
MASK = (1 << 64) - 1


def splitmix64(x):
    x = (x + 0x9E3779B97F4A7C15) & MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK
    return x ^ (x >> 31)


def values(seed, n, scale, offset=0.0):
    """n float32 values: offset + scale * u, u uniform in [-1, 1) from splitmix64(seed << 32 | i)."""
    base = (seed & 0xFFFFFFFF) << 32
    u = np.array([splitmix64(base | i) >> 11 for i in range(n)], dtype=np.float64) * (1.0 / (1 << 53)) * 2.0 - 1.0
    return (offset + scale * u).astype(np.float32)


def llama3_factors(head_dim, base, factor, low, high, old_ctx):
    low_wavelen, high_wavelen = old_ctx / low, old_ctx / high
    out = []
    for i in range(0, head_dim, 2):
        wavelen = 2 * math.pi * base ** (i / head_dim)
        if wavelen < high_wavelen:
            out.append(1.0)
        elif wavelen > low_wavelen:
            out.append(factor)
        else:
            smooth = (old_ctx / wavelen - low) / (high - low)
            out.append(1.0 / ((1 - smooth) / factor + smooth))
    return np.array(out, dtype=np.float32)


CASES = {
    "llama31": dict(arch="llama", n_embd=128, n_layer=2, n_head=4, n_head_kv=2, head_dim=32, n_ff=256,
                    n_vocab=256, rope_base=500000.0, rope_factors=(8.0, 1.0, 4.0, 8192), n_tokens=8400,
                    n_ctx=8448, positions=[0, 1, 1000, 2047, 4096, 8191, 8192, 8300, 8399]),
    "qwen2": dict(arch="qwen2", n_embd=128, n_layer=2, n_head=4, n_head_kv=2, head_dim=32, n_ff=256,
                  n_vocab=256, rope_base=1000000.0, qkv_bias=True, n_tokens=300, n_ctx=512,
                  positions=[0, 1, 17, 150, 299]),
    "qwen3": dict(arch="qwen3", n_embd=128, n_layer=2, n_head=4, n_head_kv=2, head_dim=64, n_ff=256,
                  n_vocab=256, rope_base=1000000.0, qk_norm=True, n_tokens=300, n_ctx=512,
                  positions=[0, 1, 17, 150, 299]),
    "gemma3": dict(arch="gemma3", n_embd=128, n_layer=6, n_head=4, n_head_kv=1, head_dim=64, n_ff=256,
                   n_vocab=256, rope_base=1000000.0, sliding_window=16, n_tokens=300, n_ctx=512,
                   positions=[0, 1, 15, 16, 40, 150, 299]),
}


def build_spec_gemma3(c, meta):
    d, ff, v, hd = c["n_embd"], c["n_ff"], c["n_vocab"], c["head_dim"]
    meta.append(["gemma3.attention.sliding_window", "u32", c["sliding_window"]])
    tensors = []
    seed = [1]

    def add(name, ne, scale, offset=0.0):
        tensors.append([name, ne, seed[0], scale, offset])
        seed[0] += 1

    add("token_embd.weight", [d, v], 0.1)
    add("output_norm.weight", [d], 0.2, 1.0)
    for i in range(c["n_layer"]):
        p = f"blk.{i}."
        add(p + "attn_norm.weight", [d], 0.2, 1.0)
        add(p + "attn_q.weight", [d, c["n_head"] * hd], 0.3)
        add(p + "attn_k.weight", [d, c["n_head_kv"] * hd], 0.3)
        add(p + "attn_v.weight", [d, c["n_head_kv"] * hd], 0.3)
        add(p + "attn_q_norm.weight", [hd], 0.2, 1.0)
        add(p + "attn_k_norm.weight", [hd], 0.2, 1.0)
        add(p + "attn_output.weight", [c["n_head"] * hd, d], 0.15)
        add(p + "post_attention_norm.weight", [d], 0.2, 1.0)
        add(p + "ffn_norm.weight", [d], 0.2, 1.0)
        add(p + "ffn_gate.weight", [d, ff], 0.15)
        add(p + "ffn_up.weight", [d, ff], 0.15)
        add(p + "ffn_down.weight", [ff, d], 0.1)
        add(p + "post_ffw_norm.weight", [d], 0.2, 1.0)
    return meta, tensors


def build_spec(c):
    a = c["arch"]
    d, ff, v, hd = c["n_embd"], c["n_ff"], c["n_vocab"], c["head_dim"]
    meta = [
        ["general.architecture", "str", a],
        ["general.name", "str", "tiny-" + a + "-reference-test"],
        [a + ".context_length", "u32", 131072],
        [a + ".embedding_length", "u32", d],
        [a + ".block_count", "u32", c["n_layer"]],
        [a + ".feed_forward_length", "u32", ff],
        [a + ".attention.head_count", "u32", c["n_head"]],
        [a + ".attention.head_count_kv", "u32", c["n_head_kv"]],
        [a + ".attention.key_length", "u32", hd],
        [a + ".attention.value_length", "u32", hd],
        [a + ".rope.freq_base", "f32", c["rope_base"]],
        [a + ".rope.dimension_count", "u32", hd],
        [a + ".attention.layer_norm_rms_epsilon", "f32", 1e-6],
        [a + ".vocab_size", "u32", v],
        ["tokenizer.ggml.model", "str", "none"],
    ]
    if a == "gemma3":
        return build_spec_gemma3(c, meta)
    tensors = []
    seed = [1]

    def add(name, ne, scale, offset=0.0):
        tensors.append([name, ne, seed[0], scale, offset])
        seed[0] += 1

    add("token_embd.weight", [d, v], 1.0)
    add("output_norm.weight", [d], 0.2, 1.0)
    add("output.weight", [d, v], 0.15)
    for i in range(c["n_layer"]):
        p = f"blk.{i}."
        add(p + "attn_norm.weight", [d], 0.2, 1.0)
        add(p + "attn_q.weight", [d, c["n_head"] * hd], 0.3)
        add(p + "attn_k.weight", [d, c["n_head_kv"] * hd], 0.3)
        add(p + "attn_v.weight", [d, c["n_head_kv"] * hd], 0.3)
        if c.get("qkv_bias"):
            add(p + "attn_q.bias", [c["n_head"] * hd], 0.5)
            add(p + "attn_k.bias", [c["n_head_kv"] * hd], 0.5)
            add(p + "attn_v.bias", [c["n_head_kv"] * hd], 0.5)
        if c.get("qk_norm"):
            add(p + "attn_q_norm.weight", [hd], 0.2, 1.0)
            add(p + "attn_k_norm.weight", [hd], 0.2, 1.0)
        add(p + "attn_output.weight", [c["n_head"] * hd, d], 0.15)
        add(p + "ffn_norm.weight", [d], 0.2, 1.0)
        add(p + "ffn_gate.weight", [d, ff], 0.15)
        add(p + "ffn_up.weight", [d, ff], 0.15)
        add(p + "ffn_down.weight", [ff, d], 0.1)
    if "rope_factors" in c:
        f = llama3_factors(hd, c["rope_base"], *c["rope_factors"])
        tensors.append(["rope_freqs.weight", [len(f)], "values", [float(x) for x in f]])
    return meta, tensors


def write_gguf(path, meta, tensors):
    arch = meta[0][2]
    w = gguf.GGUFWriter(path, arch, endianess=gguf.GGUFEndian.LITTLE)
    for key, typ, val in meta:
        if key == "general.architecture":
            continue
        if typ == "str":
            w.add_string(key, val)
        elif typ == "u32":
            w.add_uint32(key, val)
        else:
            w.add_float32(key, val)
    for t in tensors:
        name, ne = t[0], t[1]
        data = np.array(t[3], dtype=np.float32) if t[2] == "values" else values(t[2], int(np.prod(ne)), t[3], t[4])
        w.add_tensor(name, data.reshape(list(reversed(ne))))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def run_case(name, c):
    meta, tensors = build_spec(c)
    tokens = [(i * 7 + 3) % c["n_vocab"] for i in range(c["n_tokens"])]
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, name + ".gguf")
        write_gguf(path, meta, tensors)
        llm = llama_cpp.Llama(model_path=path, n_ctx=c["n_ctx"], n_batch=512, n_ubatch=512, n_threads=2,
                              logits_all=True, verbose=False, flash_attn=False)
        llm.eval(tokens)
        scores = np.array(llm.scores[: c["n_tokens"]], dtype=np.float32)
    out = {
        "about": f"llama.cpp logits of a tiny random {c['arch']} model; regenerate with scripts/make_arch_refs.py {name}",
        "llama_cpp_python": llama_cpp.__version__,
        "settings": "n_batch 512, KV cache f16, no flash attention, 2 threads, tokens (i * 7 + 3) % n_vocab",
        "n_ctx": c["n_ctx"],
        "n_tokens": c["n_tokens"],
        "n_vocab": c["n_vocab"],
        "metadata": meta,
        "tensors": tensors,
        "positions": c["positions"],
        "logits": [[float(x) for x in scores[p]] for p in c["positions"]],
    }
    os.makedirs(OUT_DIR, exist_ok=True)
    with open(os.path.join(OUT_DIR, name + ".json"), "w") as f:
        json.dump(out, f)
    print(f"{name}: wrote {os.path.join(OUT_DIR, name + '.json')}")


def main():
    names = sys.argv[1:] or list(CASES)
    for n in names:
        if n not in CASES:
            sys.exit(f"unknown case {n}; known: {', '.join(CASES)}")
        run_case(n, CASES[n])


if __name__ == "__main__":
    main()
