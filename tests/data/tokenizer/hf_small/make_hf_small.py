#!/usr/bin/env python3
"""Regenerates the small crafted Hugging Face tokenizer files of this folder (tokenizers 0.23).

  bytelevel/        NFC + Split(Qwen2 regex, Isolated) + ByteLevel(use_regex=False); BPE trained
                    here on a few sentences, merges saved as [a, b] pairs; added tokens <|bos|>,
                    <|eos|> (special) and <tool> (not special); TemplateProcessing "<|bos|> $A";
                    tokenizer_config.json with a list of named chat templates, eos_token as an
                    AddedToken object.
  strings_merges/   ByteLevel(use_regex=True) + Digits(individual_digits=True), merges as "a b"
                    strings, ignore_merges=true, no post-processor, a chat_template.jinja file and
                    tokenizer_config.json with add_bos_token=true.
  metaspace/        SentencePiece-style: Metaspace(prepend_scheme=always) + byte_fallback BPE.
  bad/*.json        malformed or unsupported files (from_hf must fail with a clear error).
  expected.json     HF ids of CASES for each good folder (add_special_tokens=False and True).
"""
import json
import os

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

HERE = os.path.dirname(os.path.abspath(__file__))
QWEN2_PAT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
             r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
TRAIN = [
    "Hello world! The quick brown fox jumps over the lazy dog.",
    "hello hello world world 12345 67890 it's they're we'll",
    "caf\u00e9 na\u00efve r\u00e9sum\u00e9 \u00c5ngstr\u00f6m",
    "def main():\n    return 42\n\nprint('hello')",
    "\u4f60\u597d\u4e16\u754c \u3053\u3093\u306b\u3061\u306f",
] * 3
CASES = [
    "", "Hello world", "hello  world\n\n", "It's 2024: caf\u00e9 / cafe\u0301", "12345678",
    "<|bos|>hi<tool>x</tool><|eos|>", "  \t leading", "\u4f60\u597d!", "A\u030a and \u00c5",
    "emoji \U0001F600 done", "tabs\tand\r\nCRLF",
]


def write(folder, tk, config=None, extra=None):
    d = os.path.join(HERE, folder)
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, "tokenizer.json")
    tk.save(path)
    if extra:
        with open(path, encoding="utf-8") as f:
            j = json.load(f)
        extra(j)
        with open(path, "w", encoding="utf-8") as f:
            json.dump(j, f, ensure_ascii=False, indent=1)
        tk = Tokenizer.from_file(path)
    if config is not None:
        with open(os.path.join(d, "tokenizer_config.json"), "w", encoding="utf-8") as f:
            json.dump(config, f, ensure_ascii=False, indent=2)
    return {"cases": [{"text": s, "ids": tk.encode(s, add_special_tokens=False).ids,
                       "ids_special": tk.encode(s, add_special_tokens=True).ids} for s in CASES]}


def byte_level_trained(pre, normalizer, vocab_size):
    tk = Tokenizer(models.BPE())
    if normalizer is not None:
        tk.normalizer = normalizer
    tk.pre_tokenizer = pre
    tk.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tk.train_from_iterator(TRAIN, trainer=trainer)
    return tk


def main():
    expected = {}
    tk = byte_level_trained(pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_PAT), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]), normalizers.NFC(), 400)
    tk.add_special_tokens([AddedToken("<|bos|>", normalized=False), AddedToken("<|eos|>", normalized=False)])
    tk.add_tokens([AddedToken("<tool>", normalized=False, special=False)])
    tk.post_processor = processors.TemplateProcessing(single="<|bos|> $A", special_tokens=[("<|bos|>", tk.token_to_id("<|bos|>"))])
    expected["bytelevel"] = write("bytelevel", tk, {
        "bos_token": "<|bos|>",
        "eos_token": {"content": "<|eos|>", "lstrip": False, "rstrip": False, "normalized": False, "special": True},
        "chat_template": [{"name": "tool_use", "template": "TOOLS"}, {"name": "default", "template": "DEFAULT"}]})
    expected["bytelevel"].update({"bos": tk.token_to_id("<|bos|>"), "eos": tk.token_to_id("<|eos|>"),
                                  "add_bos": True, "chat_template": "DEFAULT", "vocab": tk.get_vocab_size()})

    tk = byte_level_trained(pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)]), None, 350)
    tk.add_special_tokens([AddedToken("<s>", normalized=False)])

    def strings(j):
        j["model"]["merges"] = [" ".join(m) for m in j["model"]["merges"]]
        j["model"]["ignore_merges"] = True

    expected["strings_merges"] = write("strings_merges", tk, {"bos_token": "<s>", "add_bos_token": True}, strings)
    with open(os.path.join(HERE, "strings_merges", "chat_template.jinja"), "w", encoding="utf-8") as f:
        f.write("{% for m in messages %}{{ m.content }}{% endfor %}")
    # add_bos_token=true in tokenizer_config.json: transformers adds BOS (GenieX honours the flag);
    # the bare tokenizers.Tokenizer has no post-processor, so prepend it here.
    for c in expected["strings_merges"]["cases"]:
        c["ids_special"] = [tk.token_to_id("<s>")] + c["ids"]
    expected["strings_merges"].update({"bos": tk.token_to_id("<s>"), "add_bos": True,
                                       "chat_template": "{% for m in messages %}{{ m.content }}{% endfor %}"})

    # SentencePiece-style: byte tokens, a few pieces, merges; Metaspace + byte_fallback.
    pieces = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    words = ["\u2581", "h", "e", "l", "o", "w", "r", "d", "\u2581h", "he", "ll", "\u2581he", "\u2581hell", "\u2581hello",
             "or", "\u2581w", "\u2581wor", "ld", "\u2581world", "x"]
    vocab = {p: i for i, p in enumerate(pieces + words)}
    merges = [("\u2581", "h"), ("h", "e"), ("l", "l"), ("\u2581h", "e"), ("\u2581he", "ll"), ("\u2581hell", "o"),
              ("o", "r"), ("l", "d"), ("\u2581", "w"), ("\u2581w", "or"), ("\u2581wor", "ld")]
    tk = Tokenizer(models.BPE(vocab, merges, unk_token="<unk>", fuse_unk=True, byte_fallback=True))
    tk.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always", split=False)
    tk.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse(),
                                    decoders.Strip(content=" ", left=1)])
    tk.add_special_tokens([AddedToken("<unk>", normalized=False), AddedToken("<s>", normalized=False),
                           AddedToken("</s>", normalized=False)])
    tk.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    expected["metaspace"] = write("metaspace", tk, {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"})
    expected["metaspace"].update({"bos": 1, "eos": 2, "add_bos": True})

    with open(os.path.join(HERE, "expected.json"), "w", encoding="utf-8") as f:
        json.dump(expected, f, ensure_ascii=False, indent=1)

    bpe = {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b"]}
    bl = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    bad = {
        "not_json": "{ \"model\": ",
        "no_model": {"version": "1.0"},
        "wordpiece": {"model": {"type": "WordPiece", "vocab": {"a": 0}, "unk_token": "[UNK]"}},
        "unigram": {"model": {"type": "Unigram", "vocab": [["a", 0.0]]}},
        "pre_whitespace": {"model": bpe, "pre_tokenizer": {"type": "Whitespace"}},
        "norm_lowercase": {"model": bpe, "normalizer": {"type": "Lowercase"}, "pre_tokenizer": bl},
        "split_removed": {"model": bpe, "pre_tokenizer": {"type": "Split", "pattern": {"Regex": "\\s+"},
                                                            "behavior": "Removed", "invert": False}},
        "prefix_space": {"model": bpe, "pre_tokenizer": dict(bl, add_prefix_space=True)},
        "decoder_wordpiece": {"model": bpe, "pre_tokenizer": bl, "decoder": {"type": "WordPiece", "prefix": "##"}},
        "post_roberta": {"model": bpe, "pre_tokenizer": bl, "post_processor": {"type": "RobertaProcessing"}},
        "vocab_id_string": {"model": dict(bpe, vocab={"a": "zero"}), "pre_tokenizer": bl},
        "vocab_dup_id": {"model": dict(bpe, vocab={"a": 0, "b": 0}), "pre_tokenizer": bl},
        "vocab_negative_id": {"model": dict(bpe, vocab={"a": -3}), "pre_tokenizer": bl},
        "merge_numbers": {"model": dict(bpe, merges=[[1, 2]]), "pre_tokenizer": bl},
        "no_vocab": {"model": {"type": "BPE", "merges": []}, "pre_tokenizer": bl},
        "added_bad": {"model": bpe, "pre_tokenizer": bl, "added_tokens": [{"id": "x", "content": 5}]},
        "bad_regex": {"model": bpe, "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": "(unclosed"}, "behavior": "Isolated", "invert": False},
            dict(bl, use_regex=False)]}},
        "no_pre": {"model": bpe},
        "dropout": {"model": dict(bpe, dropout=0.1), "pre_tokenizer": bl},
    }
    os.makedirs(os.path.join(HERE, "bad"), exist_ok=True)
    for name, content in bad.items():
        with open(os.path.join(HERE, "bad", name + ".json"), "w", encoding="utf-8") as f:
            f.write(content if isinstance(content, str) else json.dumps(content))


if __name__ == "__main__":
    main()
