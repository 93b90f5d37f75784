#!/usr/bin/env python3
"""Perplexity of GenieX and llama.cpp on the same GGUF and text, side by side.

llama.cpp's side is computed here with llama-cpp-python, following llama.cpp's perplexity tool:
chunks of n_ctx tokens (BOS replaces each chunk's first token when the model adds one), each
evaluated from an empty cache, the second half of each chunk scored. GenieX's side is
`geniex perplexity --json` (same method). Default text: the GPL-3 licence text that every
Debian system ships (/usr/share/common-licenses/GPL-3), a fixed public text.

Usage: python3 bench/perplexity_vs_llamacpp.py [-m MODEL.gguf ...] [-f TEXT] [-c 512] [--geniex build/tools/geniex]
"""
import argparse
import json
import math
import os
import subprocess
import sys

import numpy as np
from llama_cpp import Llama

DEFAULT_MODEL = os.path.join(os.environ.get("GENIEX_CACHE", os.path.expanduser("~/.cache/geniex")), "models",
                             "SmolLM2-135M-Instruct.Q4_1.gguf")


def llamacpp_ppl(model, text, n_ctx, threads, max_chunks=0):
    llm = Llama(model_path=model, n_ctx=n_ctx, n_batch=n_ctx, n_ubatch=n_ctx, n_threads=threads,
                n_threads_batch=threads, logits_all=True, verbose=False)
    toks = llm.tokenize(text.encode("utf-8"), add_bos=True, special=False)
    add_bos = len(llm.tokenize(b"", add_bos=True, special=False)) > 0
    n_chunks = len(toks) // n_ctx
    if max_chunks > 0:
        n_chunks = min(n_chunks, max_chunks)
    first = n_ctx // 2
    nlls = []
    for c in range(n_chunks):
        chunk = list(toks[c * n_ctx:(c + 1) * n_ctx])
        if add_bos:
            chunk[0] = llm.token_bos()
        llm.reset()
        llm.eval(chunk)
        logits = np.array(llm.scores[:n_ctx], dtype=np.float64)
        for j in range(first, n_ctx - 1):
            row = logits[j]
            m = row.max()
            nlls.append(math.log(np.exp(row - m).sum()) - (row[chunk[j + 1]] - m))
    nll = np.array(nlls)
    ppl = math.exp(nll.mean())
    return {"ppl": ppl, "ppl_stderr": ppl * nll.std() / math.sqrt(len(nll) - 1), "n_tokens": len(toks),
            "n_chunks": n_chunks, "scored_tokens": len(nll)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-m", "--model", action="append")
    ap.add_argument("-f", "--file", default="/usr/share/common-licenses/GPL-3")
    ap.add_argument("-c", "--ctx", type=int, default=512)
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--geniex", default="build/tools/geniex")
    args = ap.parse_args()
    text = open(args.file, encoding="utf-8").read()
    rows = []
    for model in args.model or [DEFAULT_MODEL]:
        ref = llamacpp_ppl(model, text, args.ctx, args.threads)
        out = subprocess.run([args.geniex, "perplexity", "-m", model, "-f", args.file, "-c", str(args.ctx),
                              "-t", str(args.threads), "--json"], check=True, capture_output=True, text=True)
        ours = json.loads(out.stdout)
        rows.append((os.path.basename(model), ours, ref))
    print(f"text: {args.file} ({len(text)} chars), n_ctx {args.ctx}")
    print(f"| model | tokens | chunks | GenieX PPL | llama.cpp PPL | difference |")
    print(f"|---|---:|---:|---:|---:|---:|")
    for name, ours, ref in rows:
        diff = (ours["ppl"] / ref["ppl"] - 1) * 100
        print(f"| {name} | {ours['n_tokens']} (llama.cpp {ref['n_tokens']}) | {ours['n_chunks']} | "
              f"{ours['ppl']:.4f} ± {ours['ppl_stderr']:.4f} | {ref['ppl']:.4f} ± {ref['ppl_stderr']:.4f} | {diff:+.3f}% |")


if __name__ == "__main__":
    main()
