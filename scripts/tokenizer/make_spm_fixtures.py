#!/usr/bin/env python3
"""Writes tests/data/tokenizer/{llama2,mistral_v1,mistral_v3,gemma3}_hf_ids.jsonl.

Reference route (all four families): hf_reference_spm.build(), i.e. a tokenizers.Tokenizer holding
the pipeline transformers' LlamaConverter (legacy=True) / Gemma converter put into the tokenizer.json
files HF ships, built from the GGUF metadata (llama2, gemma3) or the sentencepiece ModelProto
(mistral_v1, mistral_v3). transformers 5.x has no torch-free GGUF tokenizer converter and its
SpmConverter cannot run on a bare .model file, hence the hand-built tokenizer (see that module).

File layout: first line {"meta": {...}} (family, source file, route, bos/eos/unk ids, add_bos,
add_space_prefix), then one {"text": ..., "ids": [...], "rt": bool} per corpus line, where ids are
encode(text, add_special_tokens=False) with special-token literals parsed (HF default) and rt says
whether decode(ids, skip_special_tokens=False) == text.

Cross-checks printed (informational): the sentencepiece library (.model files; literals are plain
text there, so lines with control-token literals are counted separately), transformers 5's own
LlamaTokenizer.from_pretrained(legacy=True) (Metaspace prepend_scheme "always") for the .model files,
and llama.cpp (llama-cpp-python, vocab_only, special=True) for the GGUFs.
"""
import json
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_reference_spm as ref  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DATA = os.path.join(ROOT, "tests", "data", "tokenizer")


def load_corpus():
    with open(os.path.join(DATA, "corpus.jsonl"), encoding="utf-8") as f:
        return [json.loads(line)["text"] for line in f if line.strip()]


def cross_sentencepiece(family, tokdir, texts, ids, specials):
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=os.path.join(tokdir, ref.FILES[family]))
    same = plain = plain_same = 0
    for t, i in zip(texts, ids):
        got = sp.encode(t)
        has_lit = any(s in t for s in specials)
        same += got == i
        if not has_lit:
            plain += 1
            plain_same += got == i
    return f"sentencepiece: {same}/{len(texts)} identical ({plain_same}/{plain} on lines without special literals)"


def cross_transformers(family, tokdir, texts, ids):
    try:
        from transformers import LlamaTokenizer

        with tempfile.TemporaryDirectory() as td:
            shutil.copy(os.path.join(tokdir, ref.FILES[family]), os.path.join(td, "tokenizer.model"))
            with open(os.path.join(td, "tokenizer_config.json"), "w") as f:
                json.dump({"tokenizer_class": "LlamaTokenizer", "legacy": True}, f)
            tk = LlamaTokenizer.from_pretrained(td)
            same = sum(tk.encode(t, add_special_tokens=False) == i for t, i in zip(texts, ids))
        return f"transformers LlamaTokenizer.from_pretrained(legacy=True): {same}/{len(texts)} identical"
    except Exception as e:  # noqa: BLE001
        return f"transformers LlamaTokenizer: not available ({e})"


def cross_llamacpp(family, tokdir, texts, ids):
    try:
        import llama_cpp

        m = llama_cpp.Llama(model_path=os.path.join(tokdir, ref.FILES[family]), vocab_only=True, verbose=False)
        same = 0
        for t, i in zip(texts, ids):
            same += m.tokenize(t.encode("utf-8"), add_bos=False, special=True) == i
        return f"llama.cpp: {same}/{len(texts)} identical"
    except Exception as e:  # noqa: BLE001
        return f"llama.cpp: not available ({e})"


def main():
    tokdir = ref.default_dir()
    texts = load_corpus()
    families = sys.argv[1:] or list(ref.FAMILIES)
    for fam in families:
        path = os.path.join(tokdir, ref.FILES[fam])
        if not os.path.exists(path):
            print(f"{fam}: {path} missing (scripts/fetch_tokenizers.sh); skipped")
            continue
        tk = ref.build(fam, tokdir)
        meta = dict(ref.metadata(fam, tokdir), family=fam, source=ref.FILES[fam], route=ref.ROUTES[fam])
        ids = [tk.encode(t, add_special_tokens=False).ids for t in texts]
        rts = [tk.decode(i, skip_special_tokens=False) == t for t, i in zip(texts, ids)]
        out = os.path.join(DATA, f"{fam}_hf_ids.jsonl")
        with open(out, "w", encoding="utf-8") as f:
            f.write(json.dumps({"meta": meta}, ensure_ascii=False) + "\n")
            for t, i, rt in zip(texts, ids, rts):
                f.write(json.dumps({"text": t, "ids": i, "rt": rt}, ensure_ascii=False) + "\n")
        print(f"{fam}: route: {meta['route']}; wrote {len(texts)} lines to {out}; "
              f"decode round trip {sum(rts)}/{len(texts)}")
        specials = [a.content for a in tk.get_added_tokens_decoder().values() if a.special]
        if fam.startswith("mistral"):
            print("  " + cross_sentencepiece(fam, tokdir, texts, ids, specials))
            print("  " + cross_transformers(fam, tokdir, texts, ids))
        else:
            print("  " + cross_llamacpp(fam, tokdir, texts, ids))
        sys.stdout.flush()


if __name__ == "__main__":
    main()
