#!/usr/bin/env python3
"""Saves real-size Hugging Face tokenizer folders for the Tokenizer::from_hf tests (not committed).

Into <tokdir>/hf/<family>/ (tokdir: argv[1], else $GENIEX_TOKENIZER_DIR, else
~/.cache/geniex/tokenizers):
  llama3, qwen2, qwen35, gpt2: tokenizer.json written by tokenizers' own Tokenizer.save from
      hf_reference_bpe.build(family); tokenizer_config.json for llama3 and qwen2 (bos/eos tokens,
      a chat template: a string for llama3, a list of named templates for qwen2).
  llama2, mistral_v1, mistral_v3, gemma3 (SentencePiece-style, model "llama"): when
      scripts/tokenizer/hf_reference_spm.py is present, its build(family) (LlamaConverter's legacy
      pipeline, the reference of the *_hf_ids.jsonl fixtures of those families) plus a
      TemplateProcessing "<s> $A" post-processor when the model adds BOS, and a
      tokenizer_config.json naming bos/eos/unk; a family whose source file is missing is skipped.
      Without that module, mistral_v3 alone is built here the same way (needs sentencepiece +
      protobuf, no torch).
Idempotent: a folder whose tokenizer.json exists is kept (pass --force to rebuild).
"""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import hf_reference_bpe as ref  # noqa: E402

LLAMA3_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' + message['content'] | trim + '<|eot_id|>' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}")
QWEN_TEMPLATE = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")

CONFIGS = {
    "llama3": {"bos_token": "<|begin_of_text|>", "eos_token": "<|end_of_text|>", "chat_template": LLAMA3_TEMPLATE,
               "tokenizer_class": "PreTrainedTokenizerFast"},
    "qwen2": {"bos_token": None, "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "add_bos_token": False,
              "chat_template": [{"name": "default", "template": QWEN_TEMPLATE},
                                {"name": "tool_use", "template": "{{ 'tools' }}"}],
              "tokenizer_class": "Qwen2Tokenizer"},
}


def save_mistral(tokdir, out):
    """transformers' LlamaConverter (legacy) pipeline over mistral-v3.model. transformers 5.24's
    LlamaTokenizerFast(vocab_file=...) no longer converts a .model file and LlamaConverter needs
    a slow tokenizer object, so the vocabulary and merges come from its SentencePieceExtractor and
    the pipeline is assembled here exactly as LlamaConverter builds it for legacy=True."""
    src = os.path.join(tokdir, "mistral-v3.model")
    if not os.path.exists(src):
        print(f"make_hf_folders: {src} missing; mistral_v3 skipped")
        return
    try:
        from tokenizers import Tokenizer, decoders, models, normalizers, processors
        from transformers.convert_slow_tokenizer import SentencePieceExtractor
        from transformers.convert_slow_tokenizer import generate_merges
        ext = SentencePieceExtractor(src)
        kw = ext.extract(None)
        # Merge order by piece score, as LlamaConverter does (extract(None) orders by id).
        kw["merges"] = generate_merges(kw["vocab"], [(p.piece, p.score) for p in ext.proto.pieces])
    except Exception as e:  # noqa: BLE001 - optional folder
        print(f"make_hf_folders: mistral_v3 conversion unavailable ({type(e).__name__}: {str(e)[:160]}); skipped")
        return
    tk = Tokenizer(models.BPE(kw["vocab"], kw["merges"], unk_token="<unk>", fuse_unk=True, byte_fallback=True,
                              dropout=None))
    tk.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")])
    tk.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse(),
                                    decoders.Strip(content=" ", left=1)])
    tk.add_special_tokens(kw["additional_special_tokens"])
    tk.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B",
                                                      special_tokens=[("<s>", tk.token_to_id("<s>"))])
    tk.save(os.path.join(out, "tokenizer.json"))
    with open(os.path.join(out, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump({"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "add_bos_token": True,
                   "add_eos_token": False, "tokenizer_class": "LlamaTokenizer", "legacy": True}, f, indent=2)
    print(f"make_hf_folders: wrote {out}")


def save_spm(spm, fam, tokdir, out):
    from tokenizers import processors
    try:
        tk = spm.build(fam, tokdir)
        meta = spm.metadata(fam, tokdir)
    except Exception as e:  # noqa: BLE001 - optional folder (source file missing...)
        print(f"make_hf_folders: {fam} skipped ({type(e).__name__}: {str(e)[:160]})")
        return False
    os.makedirs(out, exist_ok=True)
    name = lambda i: tk.id_to_token(i) if i is not None and i >= 0 else None  # noqa: E731
    bos, eos, unk = name(meta.get("bos_id")), name(meta.get("eos_id")), name(meta.get("unk_id"))
    if meta.get("add_bos") and bos is not None:
        tk.post_processor = processors.TemplateProcessing(single=f"{bos} $A", pair=f"{bos} $A {bos} $B",
                                                          special_tokens=[(bos, meta["bos_id"])])
    tk.save(os.path.join(out, "tokenizer.json"))
    with open(os.path.join(out, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump({"bos_token": bos, "eos_token": eos, "unk_token": unk, "add_bos_token": bool(meta.get("add_bos")),
                   "add_eos_token": False, "tokenizer_class": "LlamaTokenizer", "legacy": True}, f, indent=2)
    print(f"make_hf_folders: wrote {out}")
    return True


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    force = "--force" in sys.argv
    tokdir = args[0] if args else ref.default_tokdir()
    try:
        import hf_reference_spm as spm
    except ImportError:
        spm = None
    spm_families = spm.FAMILIES if spm is not None else ("mistral_v3",)
    for fam in ref.FAMILIES + tuple(spm_families):
        out = os.path.join(tokdir, "hf", fam)
        if os.path.exists(os.path.join(out, "tokenizer.json")) and not force:
            continue
        if fam in spm_families:
            if spm is not None:
                save_spm(spm, fam, tokdir, out)
            else:
                os.makedirs(out, exist_ok=True)
                save_mistral(tokdir, out)
            continue
        os.makedirs(out, exist_ok=True)
        tk = ref.build(fam, tokdir)
        tk.save(os.path.join(out, "tokenizer.json"))
        if fam in CONFIGS:
            with open(os.path.join(out, "tokenizer_config.json"), "w", encoding="utf-8") as f:
                json.dump(CONFIGS[fam], f, ensure_ascii=False, indent=2)
        print(f"make_hf_folders: wrote {out}")


if __name__ == "__main__":
    main()
