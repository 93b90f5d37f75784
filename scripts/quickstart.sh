#!/usr/bin/env bash
# README command (a): install the build dependencies, build GenieX (Release, into build/),
# fetch the default model and generate a first answer with it.
#   bash scripts/quickstart.sh                       # default prompt
#   bash scripts/quickstart.sh -p "Your prompt" -n 64 # extra args go to `geniex run`
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

JOBS="${GENIEX_JOBS:-$(nproc 2>/dev/null || echo 2)}"
DEFAULT_PROMPT="Explain in two sentences why on-device inference matters."

echo "== quickstart: installing dependencies (scripts/setup.sh)" >&2
bash scripts/setup.sh

echo "== quickstart: building the geniex CLI (Release, build/, -j$JOBS)" >&2
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release
cmake --build build --target geniex_cli -j "$JOBS"

echo "== quickstart: fetching the model (scripts/fetch_model.sh)" >&2
MODEL="$(bash scripts/fetch_model.sh | tail -n 1)"
if [ ! -f "$MODEL" ]; then
  echo "quickstart: ERROR: fetch_model.sh did not produce a model file (got '$MODEL')" >&2
  exit 1
fi

# Later flags win (`geniex` keeps the last value of a repeated option), so the caller's
# -m, -p or -n override these defaults; a prompt file (-f) replaces the default prompt.
args=(run -m "$MODEL" -n 128)
has_file=0
for arg in "$@"; do
  case "$arg" in
    -f|--file|--file=*) has_file=1 ;;
  esac
done
if [ "$has_file" -eq 0 ]; then
  args+=(-p "$DEFAULT_PROMPT")
fi

echo "== quickstart: build/tools/geniex ${args[*]} $*" >&2
exec build/tools/geniex "${args[@]}" "$@"
