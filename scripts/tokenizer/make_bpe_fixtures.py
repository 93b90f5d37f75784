#!/usr/bin/env python3
"""Writes the Hugging Face reference ids of the byte-level BPE families for the tokenizer tests.

  tests/data/tokenizer/{llama3,qwen2,qwen35,gpt2}_hf_ids.jsonl   {"text", "ids"} per corpus line
  qwen2 and qwen35 lines also carry "gguf_ids": the same pipeline over vocab-qwen2.gguf /
  vocab-qwen35.gguf. Those are llama.cpp's test vocabularies: Qwen2's 151643 ranks with only three
  control tokens (<|endoftext|>, <|im_start|>, <|im_end|>) and [PADn] user-defined tokens, so
  they differ from the tiktoken route (Qwen2.5/3's 26 added tokens; Qwen3.5's own 248044 ranks).

The reference tokenizers come from hf_reference_bpe.build (tokenizers 0.23; no torch, no
tiktoken). Encoding: add_special_tokens=False, special-token literals in the text parsed (HF
always matches added tokens). For information the script also compares, per family:
  - llama.cpp (llama-cpp-python, vocab_only=True) on the GGUF vocabulary, parse_special=True;
  - for qwen2 the GGUF route (vocab-qwen2.gguf + the same pipeline) against the tiktoken route,
    and ignore_merges=True (tiktoken's own rule) against False.

Usage: python3 scripts/tokenizer/make_bpe_fixtures.py [tokdir]
"""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import hf_reference_bpe as ref  # noqa: E402

DATA = os.path.normpath(os.path.join(HERE, "..", "..", "tests", "data", "tokenizer"))
GGUF_OF = {"llama3": "vocab-llama-bpe.gguf", "qwen2": "vocab-qwen2.gguf", "qwen35": "vocab-qwen35.gguf",
           "gpt2": "vocab-gpt-2.gguf"}


def llama_cpp_encoder(path):
    try:
        import llama_cpp
        llm = llama_cpp.Llama(model_path=path, vocab_only=True, verbose=False)
    except Exception as e:  # noqa: BLE001 - informational only
        print(f"  (llama.cpp unavailable for {os.path.basename(path)}: {type(e).__name__}: {str(e)[:100]})")
        return None
    return lambda s: llm.tokenize(s.encode("utf-8"), add_bos=False, special=True)


def compare(name, corpus, want, got_fn):
    import unicodedata
    diff = [(s, w) for s, w in zip(corpus, want) if got_fn(s) != w]
    ex = ", ".join(repr(s[:40]) for s, _ in diff[:3])
    non_nfc = sum(1 for s, _ in diff if unicodedata.normalize("NFC", s) != s)
    print(f"  {name}: {len(corpus) - len(diff)}/{len(corpus)} identical" +
          (f"; {non_nfc} of the {len(diff)} differing lines are not NFC (e.g. {ex})" if diff else ""))
    return len(diff)


def main():
    tokdir = sys.argv[1] if len(sys.argv) > 1 else ref.default_tokdir()
    with open(os.path.join(DATA, "corpus.jsonl"), encoding="utf-8") as f:
        corpus = [json.loads(line)["text"] for line in f if line.strip()]
    for fam in ref.FAMILIES:
        tk = ref.build(fam, tokdir)
        enc = lambda s, t=tk: t.encode(s, add_special_tokens=False).ids  # noqa: E731
        ids = [enc(s) for s in corpus]
        extra = None
        if fam in ("qwen2", "qwen35"):
            g = ref.build(fam + "gguf", tokdir)
            extra = [g.encode(s, add_special_tokens=False).ids for s in corpus]
        out = os.path.join(DATA, f"{fam}_hf_ids.jsonl")
        with open(out, "w", encoding="utf-8") as f:
            for i, (s, x) in enumerate(zip(corpus, ids)):
                rec = {"text": s, "ids": x}
                if extra is not None:
                    rec["gguf_ids"] = extra[i]
                f.write(json.dumps(rec, ensure_ascii=False) + "\n")
        print(f"{fam}: wrote {len(corpus)} lines to {out}")
        # Round trip through the HF decoder.
        bad = sum(1 for s, x in zip(corpus, ids) if tk.decode(x, skip_special_tokens=False) != s)
        print(f"  HF decode(encode(s)) != s on {bad} lines (NFC changes non-NFC input)")
        gguf_path = os.path.join(tokdir, GGUF_OF[fam])
        want = extra if extra is not None else ids
        if fam == "qwen2":
            compare("HF over vocab-qwen2.gguf vs tiktoken route (the GGUF lacks Qwen2.5's added tokens)",
                    corpus, ids, lambda s: extra[corpus.index(s)])
            t2 = ref._from_tiktoken(os.path.join(tokdir, "qwen2.tiktoken"), ref.QWEN2_PAT, ref.QWEN2_ADDED, True)
            compare("tiktoken route ignore_merges=True vs False", corpus, ids,
                    lambda s: t2.encode(s, add_special_tokens=False).ids)
        lc = llama_cpp_encoder(gguf_path)
        if lc is not None:
            compare(f"llama.cpp ({GGUF_OF[fam]}) vs HF", corpus, want, lc)


if __name__ == "__main__":
    main()
