#!/usr/bin/env python3
"""GenieX's quantizer against llama.cpp's, by perplexity, on SmolLM2-135M.

SmolLM2 Q4_1 as shipped -> F16 with `geniex quantize IN OUT f16` -> from that F16 file,
Q8_0, Q4_0 and Q4_K_M with `geniex quantize` and with llama.cpp's quantizer
(llama_cpp.llama_model_quantize, default parameters, ftype set) -> perplexity of every file
with `geniex perplexity --json` and with llama.cpp's method as bench/perplexity_vs_llamacpp.py
computes it (same default text). Also checks that llama-cpp-python loads and runs every type
`geniex quantize` writes. The F16 weights came from a Q4_1 file, so they sit on a 4-bit grid:
the comparison is between quantizers on identical input, not of the absolute quality of a type.

Usage: python3 bench/quantize_vs_llamacpp.py [-m MODEL] [-f TEXT] [-c 512] [--chunks N]
       [--geniex build/tools/geniex] [--work DIR]
"""
import argparse
import ctypes
import json
import os
import subprocess
import sys
import time

import numpy as np
import llama_cpp
from llama_cpp import Llama

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import perplexity_vs_llamacpp  # noqa: E402
from perplexity_vs_llamacpp import DEFAULT_MODEL  # noqa: E402

# llama.cpp's LLAMA_FTYPE values.
FTYPES = {"q8_0": 7, "q4_0": 2, "q4_k_m": 15}


def llamacpp_quantize(src, dst, ftype, threads):
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = ftype
    params.nthread = threads
    rc = llama_cpp.llama_model_quantize(src.encode(), dst.encode(), ctypes.byref(params))
    if rc != 0:
        raise RuntimeError(f"llama_model_quantize failed ({rc}) for {dst}")


def geniex_quantize(geniex, src, dst, qtype, threads):
    out = subprocess.run([geniex, "quantize", src, dst, qtype, "--force", "-t", str(threads)], check=True,
                         capture_output=True, text=True)
    return out.stdout


def llamacpp_ppl(model, text, n_ctx, threads, max_chunks):
    return perplexity_vs_llamacpp.llamacpp_ppl(model, text, n_ctx, threads, max_chunks)["ppl"]


def geniex_ppl(geniex, model, text_file, n_ctx, threads, max_chunks):
    cmd = [geniex, "perplexity", "-m", model, "-f", text_file, "-c", str(n_ctx), "-t", str(threads), "--json"]
    if max_chunks > 0:
        cmd += ["--chunks", str(max_chunks)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True)
    return json.loads(out.stdout)["ppl"]


def llamacpp_loads(model):
    llm = Llama(model_path=model, n_ctx=64, n_threads=2, logits_all=False, verbose=False)
    llm.eval(llm.tokenize(b"The quick brown fox", add_bos=True))
    logits = np.array(llm.scores[llm.n_tokens - 1])
    return bool(np.isfinite(logits).all())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-m", "--model", default=os.environ.get("GENIEX_MODEL", DEFAULT_MODEL))
    ap.add_argument("-f", "--file", default="/usr/share/common-licenses/GPL-3")
    ap.add_argument("-c", "--ctx", type=int, default=512)
    ap.add_argument("--chunks", type=int, default=0, help="at most this many chunks (0: all)")
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--geniex", default="build/tools/geniex")
    ap.add_argument("--work", default="/tmp/geniex_quantize_bench")
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)
    text = open(args.file, encoding="utf-8").read()

    f16 = os.path.join(args.work, "smollm2-f16.gguf")
    geniex_quantize(args.geniex, args.model, f16, "f16", args.threads)
    files = [("f16", "GenieX (from Q4_1)", f16)]
    for qtype, ftype in FTYPES.items():
        g = os.path.join(args.work, f"smollm2-{qtype}-geniex.gguf")
        t0 = time.time()
        geniex_quantize(args.geniex, f16, g, qtype, args.threads)
        tg = time.time() - t0
        ll = os.path.join(args.work, f"smollm2-{qtype}-llamacpp.gguf")
        t0 = time.time()
        llamacpp_quantize(f16, ll, ftype, args.threads)
        tl = time.time() - t0
        files.append((qtype, f"GenieX ({tg:.1f} s)", g))
        files.append((qtype, f"llama.cpp ({tl:.1f} s)", ll))

    print(f"text: {args.file} ({len(text)} chars), n_ctx {args.ctx}, chunks {args.chunks or 'all'}, "
          f"{args.threads} threads")
    print("| type | quantizer | size (MiB) | PPL, GenieX run | PPL, llama.cpp run |")
    print("|---|---|---:|---:|---:|")
    for qtype, who, path in files:
        size = os.path.getsize(path) / 2**20
        pg = geniex_ppl(args.geniex, path, args.file, args.ctx, args.threads, args.chunks)
        pl = llamacpp_ppl(path, text, args.ctx, args.threads, args.chunks)
        print(f"| {qtype} | {who} | {size:.2f} | {pg:.4f} | {pl:.4f} |", flush=True)

    # llama.cpp must load every type geniex quantize writes.
    types = ["f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "q4_k", "q5_k", "q6_k", "q4_k_m",
             "q5_k_m"]
    results = []
    for qtype in types:
        path = os.path.join(args.work, f"smollm2-loadcheck-{qtype}.gguf")
        geniex_quantize(args.geniex, f16, path, qtype, args.threads)
        ok = llamacpp_loads(path)
        results.append(f"{qtype}:{'ok' if ok else 'FAILED'}")
        os.remove(path)
    print("llama.cpp loads and runs: " + " ".join(results))


if __name__ == "__main__":
    main()
