#!/usr/bin/env python3
"""`geniex convert` output read by llama.cpp: each tiny Hugging Face folder of tests/data/hf_tiny
is converted to GGUF (F32 by default) and evaluated with llama-cpp-python; its logits are compared
with the transformers references in refs.json (error per position: max |diff| / max |ref|).

llama.cpp ignores what its GGUF conventions do not carry, so some positions are not comparable:
  mistral  llama.cpp's "llama" graph has no sliding window: compared before position 24 only
  gemma3   llama.cpp fixes every sixth layer as global; the fixture's third layer is global
           (layer_types), which only GenieX reads from the GGUF: compared before position 16
           (the window), where local and global layers agree

Usage: python3 scripts/check_convert_llamacpp.py [--geniex build/tools/geniex] [--type f32] [NAME ...]
Exit status 1 when an error exceeds --max-rel (default 2e-3 for f32/f16 output).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

try:
    import llama_cpp
except ImportError as e:
    sys.exit(f"check_convert_llamacpp: {e} (pip install llama-cpp-python)")

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(REPO, "tests", "data", "hf_tiny")
COMPARABLE_BEFORE = {"mistral": 24, "gemma3": 16}


def llama_logits(path, tokens):
    llm = llama_cpp.Llama(model_path=path, n_ctx=max(256, len(tokens) + 8), n_batch=512, logits_all=True,
                          verbose=False, n_threads=2)
    llm.eval(tokens)
    out = np.array(llm.scores[: len(tokens)], dtype=np.float64)
    llm.close()
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--geniex", default=os.path.join(REPO, "build", "tools", "geniex"))
    ap.add_argument("--type", default="f32")
    ap.add_argument("--max-rel", type=float, default=2e-3)
    ap.add_argument("names", nargs="*")
    args = ap.parse_args()
    refs = json.load(open(os.path.join(FIXTURES, "refs.json")))["models"]
    names = args.names or list(refs)
    worst_all = 0.0
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            out = os.path.join(tmp, f"{name}.gguf")
            r = subprocess.run([args.geniex, "convert", os.path.join(FIXTURES, name), "-o", out, "--type", args.type],
                               capture_output=True, text=True)
            if r.returncode != 0:
                print(f"{name:8s} convert failed: {r.stderr.strip()}")
                worst_all = float("inf")
                continue
            limit = COMPARABLE_BEFORE.get(name)
            worst, worst_late, n, top1 = 0.0, 0.0, 0, 0
            for prompt in refs[name]["prompts"]:
                got = llama_logits(out, prompt["tokens"])
                for pos, want in zip(prompt["positions"], prompt["logits"]):
                    want = np.array(want, dtype=np.float64)
                    rel = float(np.max(np.abs(got[pos] - want)) / np.max(np.abs(want)))
                    if limit is not None and pos >= limit:
                        worst_late = max(worst_late, rel)
                        continue
                    worst = max(worst, rel)
                    n += 1
                    top1 += int(np.argmax(got[pos]) == np.argmax(want))
            note = f" (positions >= {limit}, not comparable: {worst_late:.3g})" if limit is not None else ""
            print(f"{name:8s} {args.type}: max rel err {worst:.3g} over {n} positions, top-1 {top1}/{n}{note}")
            worst_all = max(worst_all, worst)
    print(f"worst: {worst_all:.3g} (limit {args.max_rel:g})")
    return 0 if worst_all <= args.max_rel else 1


if __name__ == "__main__":
    sys.exit(main())
