#!/usr/bin/env python3
# Regenerates the llama.cpp reference fixtures in tests/data/llamacpp/ (tokens, last-position logits, greedy runs) via llama-cpp-python.
"""Reference fixtures from llama.cpp (through llama-cpp-python) for GenieX's parity tests.

Usage: scripts/make_llamacpp_refs.py [MODEL.gguf] [--out DIR]

MODEL defaults to the default model fetched by scripts/fetch_model.sh
(SmolLM2-135M-Instruct Q4_1). Writes into DIR (default tests/data/llamacpp):

  logits_prompts.json  llama.cpp version, model sha256, settings, and per prompt: the text, the
                       token ids (llama.cpp's tokenizer, special tokens parsed, BOS as the model
                       says), and the top-5 ids and values of the last-position logits.
  logits_last.f32      the full last-position logits of every prompt: raw little-endian float32,
                       row-major [n_prompts][n_vocab], rows in the order of the JSON's prompts.
  greedy.json          greedy generation (argmax, no penalties) of up to 64 tokens for 4 prompts,
                       stopping early at an end-of-generation token; per generated step the top-1
                       and top-2 ids and logit values, so a near-tie explains a divergence.

Settings: n_ctx 512, n_threads 2, n_batch 512 (a whole prompt is one batch), CPU only.
"""
import argparse
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
    sys.exit("make_llamacpp_refs: llama-cpp-python is missing (pip install llama-cpp-python)")

REPO = Path(__file__).resolve().parent.parent
DEFAULT_MODEL = Path(os.environ.get("GENIEX_CACHE", Path.home() / ".cache" / "geniex")) / "models" / \
    "SmolLM2-135M-Instruct.Q4_1.gguf"
N_CTX = 512
N_THREADS = 2
GREEDY_STEPS = 64
SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"


def chat(user, system=SYSTEM):
    return (f"<|im_start|>system\n{system}<|im_end|>\n"
            f"<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n")


LONG = ("The history of computing is a story of layers. At the bottom sit transistors, switching "
        "billions of times per second; above them, logic gates combine into adders, multiplexers and "
        "registers. Those form processors, which execute instructions fetched from memory. Operating "
        "systems share the processor between programs and hide the details of disks, networks and "
        "screens. Compilers translate languages that people can read into the instructions that "
        "machines can run, and libraries package solutions to common problems so that nobody has to "
        "solve them twice. Each layer trusts the one below it and promises something simpler to the "
        "one above. When a layer leaks, for example when a cache miss makes a loop ten times slower or "
        "a rounding error changes the result of a sum, engineers have to look through the abstraction "
        "to understand what really happens. Good engineers therefore learn several layers at once, and "
        "the best ones can explain, in plain words, why a program behaves the way it does on a real "
        "machine. In summary, the most important lesson is that")

# (name, text): 8 prompts covering plain text, chat format with special tokens, code, non-English
# text, odd whitespace/digits, a single word and a ~200-token prompt.
PROMPTS = [
    ("plain", "The capital of France is"),
    ("chat_mountain", chat("What is the tallest mountain in the world?")),
    ("chat_poem", chat("Write a short poem about the sea.")),
    ("code", 'def fibonacci(n):\n    """Return the n-th Fibonacci number."""\n'),
    ("french", "La vie est belle quand on se promène au bord de la mer, à côté des élèves qui"),
    ("unicode_digits", "Prices: 1234567890 + 0.5 = ?\t\tcafé naïve — 東京 🚀\n\n  indented"),
    ("single_word", "Hello"),
    ("long", LONG),
]

# Prompts (by name) for the greedy runs.
GREEDY = ["plain", "chat_mountain", "code", "long"]


def sha256_of(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def last_logits(llm, tokens):
    """Evaluates `tokens` from an empty KV cache and returns llama.cpp's last-position logits."""
    llm.reset()  # n_tokens = 0; eval() then removes every cached position from the KV cache
    llm.eval(tokens)
    return np.array(llm.scores[llm.n_tokens - 1], dtype=np.float32, copy=True)


def top(logits, k):
    # Stable sort on -logits: among equal values the lower id comes first (as llama.cpp's argmax).
    idx = np.argsort(-logits, kind="stable")[:k]
    return [int(i) for i in idx], [float(logits[i]) for i in idx]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", nargs="?", default=str(DEFAULT_MODEL))
    ap.add_argument("--out", default=str(REPO / "tests" / "data" / "llamacpp"))
    args = ap.parse_args()
    if not os.path.isfile(args.model):
        sys.exit(f"make_llamacpp_refs: no model at {args.model} (run scripts/fetch_model.sh)")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    llm = Llama(model_path=args.model, n_ctx=N_CTX, n_batch=N_CTX, n_ubatch=N_CTX, n_threads=N_THREADS,
                n_threads_batch=N_THREADS, n_gpu_layers=0, logits_all=True, verbose=False)
    n_vocab = llm.n_vocab()
    vocab = llama_cpp.llama_model_get_vocab(llm.model)
    add_bos = bool(llama_cpp.llama_vocab_get_add_bos(vocab))
    header = {
        "generator": "scripts/make_llamacpp_refs.py",
        "llama_cpp_python_version": llama_cpp.__version__,
        "model_file": os.path.basename(args.model),
        "model_sha256": sha256_of(args.model),
        "n_ctx": N_CTX,
        "n_threads": N_THREADS,
        "n_vocab": n_vocab,
        "add_bos": add_bos,
        "bos_id": int(llm.token_bos()),
        "eos_id": int(llm.token_eos()),
    }

    def tokenize(text):
        # add_bos=True lets llama.cpp add BOS only if the model asks for it (add_special semantics).
        return [int(t) for t in llm.tokenize(text.encode("utf-8"), add_bos=True, special=True)]

    # (a) last-position logits per prompt
    rows, prompts = [], []
    for name, text in PROMPTS:
        tokens = tokenize(text)
        logits = last_logits(llm, tokens)
        ids, vals = top(logits, 5)
        rows.append(logits)
        prompts.append({"name": name, "text": text, "tokens": tokens, "top5_ids": ids, "top5_logits": vals})
        print(f"{name:16s} {len(tokens):4d} tokens  top1 {ids[0]:6d} ({vals[0]:.4f})", file=sys.stderr)
    data = np.stack(rows).astype("<f4")
    data.tofile(out / "logits_last.f32")
    doc = dict(header)
    doc["logits_file"] = "logits_last.f32"
    doc["logits_layout"] = "little-endian float32, row-major [n_prompts][n_vocab], rows in prompt order"
    doc["prompts"] = prompts
    with open(out / "logits_prompts.json", "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False, indent=1)
        f.write("\n")

    # (b) greedy generation
    runs = []
    by_name = dict(PROMPTS)
    for name in GREEDY:
        tokens = tokenize(by_name[name])
        llm.reset()
        llm.eval(tokens)
        generated, steps, stopped_eog = [], [], False
        for _ in range(GREEDY_STEPS):
            logits = llm.scores[llm.n_tokens - 1]
            ids, vals = top(logits, 2)
            tok = ids[0]
            generated.append(tok)
            steps.append({"top1_id": ids[0], "top1_logit": vals[0], "top2_id": ids[1], "top2_logit": vals[1]})
            if llama_cpp.llama_vocab_is_eog(vocab, tok):
                stopped_eog = True
                break
            llm.eval([tok])
        text = llm.detokenize(generated).decode("utf-8", errors="replace")
        runs.append({"name": name, "prompt": by_name[name], "prompt_tokens": tokens, "generated": generated,
                     "stopped_at_eog": stopped_eog, "text": text, "steps": steps})
        gaps = [s["top1_logit"] - s["top2_logit"] for s in steps]
        print(f"greedy {name:16s} {len(generated):3d} tokens  eog={stopped_eog}  min top1-top2 gap {min(gaps):.4f}",
              file=sys.stderr)
    doc = dict(header)
    doc["max_new_tokens"] = GREEDY_STEPS
    doc["sampling"] = "greedy argmax over raw logits (first max wins), no penalties; stops after an EOG token"
    doc["runs"] = runs
    with open(out / "greedy.json", "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False, indent=1)
        f.write("\n")

    total = sum((out / n).stat().st_size for n in ("logits_prompts.json", "logits_last.f32", "greedy.json"))
    print(f"wrote {out} ({total / 1e6:.2f} MB)", file=sys.stderr)


if __name__ == "__main__":
    main()
