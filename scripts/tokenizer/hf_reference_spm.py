"""Hugging Face reference tokenizers for the SentencePiece-style BPE families.

build(family, tokdir) -> tokenizers.Tokenizer for family in FAMILIES:
  llama2      vocab-llama-spm.gguf   (llama.cpp's vocab-only GGUF of Llama 2)
  mistral_v1  mistral-v1.model       (Mistral 7B v0.1 tokenizer.model)
  mistral_v3  mistral-v3.model       (Mistral 7B v0.3 tokenizer.model, control tokens [INST] ...)
  gemma3      gemma-3-270m-q4_k_m.gguf (Gemma 3 270M; tokenizer metadata only is read)

Route (the same for all four; ROUTES says it per family):
  transformers 5.x has no torch-free GGUF tokenizer converter (transformers.integrations.ggml only
  maps config keys), and its LlamaConverter / SpmConverter no longer run from a bare .model file
  (SentencePieceExtractor.extract receives the score list as a model type). So the pipeline that
  transformers' LlamaConverter (legacy=True) wrote into the tokenizer.json files HF ships is built
  here directly, with transformers' own generate_merges() for the merge order:
    model       BPE(vocab, merges=generate_merges(vocab, scores), unk=<unk>, fuse_unk, byte_fallback)
    normalizer  llama2/mistral: Prepend("▁") + Replace(" ", "▁")   (legacy: every text chunk
                between added tokens gets the dummy prefix, as sentencepiece and llama.cpp do)
                gemma3:         Replace(" ", "▁")                    (add_space_prefix false)
    pre-tok     none
    added       unknown/control pieces (types 2, 3) as special tokens, user-defined pieces (type 4)
                as non-special tokens; all normalized=False (matched on the raw text)
    decoder     Replace("▁", " "), ByteFallback, Fuse (+ Strip(" ", 1, 0) with a dummy prefix)
"""
from __future__ import annotations

import os

from tokenizers import AddedToken, Tokenizer, decoders, normalizers
from tokenizers.models import BPE

FAMILIES = ("llama2", "mistral_v1", "mistral_v3", "gemma3")
FILES = {
    "llama2": "vocab-llama-spm.gguf",
    "mistral_v1": "mistral-v1.model",
    "mistral_v3": "mistral-v3.model",
    "gemma3": "gemma-3-270m-q4_k_m.gguf",
}
ROUTES = {
    "llama2": "GGUF metadata -> hand-built tokenizers.Tokenizer (LlamaConverter legacy pipeline)",
    "mistral_v1": "sentencepiece ModelProto -> hand-built tokenizers.Tokenizer (LlamaConverter legacy pipeline)",
    "mistral_v3": "sentencepiece ModelProto -> hand-built tokenizers.Tokenizer (LlamaConverter legacy pipeline)",
    "gemma3": "GGUF metadata -> hand-built tokenizers.Tokenizer (Gemma tokenizer.json pipeline)",
}


def default_dir() -> str:
    return os.environ.get("GENIEX_TOKENIZER_DIR") or os.path.expanduser("~/.cache/geniex/tokenizers")


def load_pieces(family: str, tokdir: str):
    """(pieces, scores, types, meta) from the family's file."""
    path = os.path.join(tokdir, FILES[family])
    if path.endswith(".gguf"):
        import gguf

        r = gguf.GGUFReader(path)

        def arr(key):
            f = r.fields[key]
            return [f.parts[i] for i in f.data]

        def scalar(key, default=None):
            f = r.fields.get(key)
            return default if f is None else f.parts[f.data[0]][0]

        pieces = [bytes(p).decode("utf-8") for p in arr("tokenizer.ggml.tokens")]
        scores = [float(p[0]) for p in arr("tokenizer.ggml.scores")]
        types = [int(p[0]) for p in arr("tokenizer.ggml.token_type")]
        meta = {
            "bos_id": int(scalar("tokenizer.ggml.bos_token_id", -1)),
            "eos_id": int(scalar("tokenizer.ggml.eos_token_id", -1)),
            "unk_id": int(scalar("tokenizer.ggml.unknown_token_id", -1)),
            "add_bos": bool(scalar("tokenizer.ggml.add_bos_token", True)),
            "add_space_prefix": bool(scalar("tokenizer.ggml.add_space_prefix", True)),
        }
        return pieces, scores, types, meta
    from transformers.convert_slow_tokenizer import import_protobuf

    m = import_protobuf().ModelProto()
    with open(path, "rb") as f:
        m.ParseFromString(f.read())
    pieces = [p.piece for p in m.pieces]
    scores = [p.score for p in m.pieces]
    types = [p.type for p in m.pieces]
    meta = {
        "bos_id": m.trainer_spec.bos_id,
        "eos_id": m.trainer_spec.eos_id,
        "unk_id": m.trainer_spec.unk_id,
        "add_bos": True,
        "add_space_prefix": m.normalizer_spec.add_dummy_prefix,
    }
    return pieces, scores, types, meta


def build(family: str, tokdir: str | None = None) -> Tokenizer:
    from transformers.convert_slow_tokenizer import generate_merges

    if family not in FAMILIES:
        raise ValueError(f"unknown family {family!r} (known: {', '.join(FAMILIES)})")
    tokdir = tokdir or default_dir()
    pieces, scores, types, meta = load_pieces(family, tokdir)
    vocab = {p: i for i, p in enumerate(pieces)}
    merges = generate_merges(vocab, [(p, s) for p, s in zip(pieces, scores)])
    unk = pieces[meta["unk_id"]] if meta["unk_id"] >= 0 else None
    tk = Tokenizer(BPE(vocab=vocab, merges=merges, unk_token=unk, fuse_unk=True, byte_fallback=True, dropout=None))
    prefix = meta["add_space_prefix"]
    seq = [normalizers.Prepend("▁")] if prefix else []
    seq.append(normalizers.Replace(" ", "▁"))
    tk.normalizer = normalizers.Sequence(seq)
    dec = [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()]
    if prefix:
        dec.append(decoders.Strip(content=" ", left=1, right=0))
    tk.decoder = decoders.Sequence(dec)
    special = [AddedToken(p, normalized=False, special=True) for p, t in zip(pieces, types) if t in (2, 3)]
    user = [AddedToken(p, normalized=False, special=False) for p, t in zip(pieces, types) if t == 4]
    tk.add_special_tokens(special)
    if user:
        tk.add_tokens(user)
    return tk


def metadata(family: str, tokdir: str | None = None) -> dict:
    return load_pieces(family, tokdir or default_dir())[3]
