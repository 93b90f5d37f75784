#!/usr/bin/env bash
# README command (b): everything CI checks, in order of cost.
#   1. dependencies (scripts/setup.sh) and the real model (scripts/fetch_model.sh) for the
#      end-to-end tests
#   2. Release build with warnings as errors, all tests (ctest)
#   3. the README example and CLI smoke checks against the real model, then the aarch64 cross
#      build's tests and greedy check under qemu-user (scripts/test_aarch64.sh)
#   4. AddressSanitizer + UndefinedBehaviorSanitizer build (build-asan), tests not labelled slow,
#      plus a short CLI smoke run under the sanitizers
#   5. ThreadSanitizer build (build-tsan) of the threaded tests: core, graph, kv, and the runtime
#      and OpenCL tests that run sessions, queues and cancellation on several threads
#   6. clang libFuzzer build (build-fuzz) of the fuzz targets, ctest -L fuzz (skipped without clang)
# Fails (non-zero exit) on the first failing step. Budget: ~60 min on 2 cores.
# Environment: GENIEX_JOBS (build/test parallelism, default 2), GENIEX_SKIP_ASAN=1,
# GENIEX_SKIP_TSAN=1, GENIEX_SKIP_FUZZ=1 (local shortcuts; CI runs everything).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

JOBS="${GENIEX_JOBS:-2}"
START=$SECONDS
step() { printf '\n=== [%4ds] %s\n' "$((SECONDS - START))" "$*"; }
fail() { echo "test.sh: FAIL: $*" >&2; exit 1; }

step "setup: dependencies"
bash scripts/setup.sh

step "setup: model"
MODEL="$(bash scripts/fetch_model.sh | tail -n 1)"
[ -f "$MODEL" ] || fail "fetch_model.sh did not produce a model file (got '$MODEL')"
export GENIEX_MODEL="$MODEL"
echo "model: $GENIEX_MODEL"

step "setup: tokenizer vocabularies"
TOKDIR="$(bash scripts/fetch_tokenizers.sh | tail -n 1)"
[ -d "$TOKDIR" ] || fail "fetch_tokenizers.sh did not produce a folder (got '$TOKDIR')"
export GENIEX_TOKENIZER_DIR="$TOKDIR"
echo "tokenizer vocabularies: $GENIEX_TOKENIZER_DIR"

# tokenizer_cli_checks BIN TMPDIR: geniex tokenize / detokenize options, bad input, exit codes.
tokenizer_cli_checks() {
  local bin="$1" tmp="$2" rc
  "$bin" tokenize -m "$MODEL" -p "<|im_start|>" >"$tmp/special" || fail "geniex tokenize <|im_start|>"
  [ "$(cat "$tmp/special")" = "[1]" ] || fail "geniex tokenize: <|im_start|> gave $(cat "$tmp/special"), expected [1]"
  "$bin" tokenize -m "$MODEL" -p "<|im_start|>" --no-parse-special >"$tmp/literal" || fail "geniex tokenize --no-parse-special"
  grep -qE '^\[[0-9]+(,[0-9]+)+\]$' "$tmp/literal" || fail "geniex tokenize --no-parse-special: $(cat "$tmp/literal")"
  "$bin" tokenize -m "$MODEL" -p "Hello world" --show-pieces >"$tmp/pieces" || fail "geniex tokenize --show-pieces"
  grep -q "' world'" "$tmp/pieces" || fail "geniex tokenize --show-pieces: $(cat "$tmp/pieces")"
  # Invalid UTF-8 on stdin: ids, and the same bytes back.
  printf 'ok \x80\xbf\xc3 end\xe2\x82' >"$tmp/bad.txt"
  "$bin" tokenize -m "$MODEL" <"$tmp/bad.txt" >"$tmp/bad.ids" || fail "geniex tokenize on invalid UTF-8"
  "$bin" detokenize -m "$MODEL" --no-newline -f "$tmp/bad.ids" >"$tmp/bad.back" || fail "geniex detokenize -f"
  cmp -s "$tmp/bad.txt" "$tmp/bad.back" || fail "geniex tokenize | detokenize changed invalid UTF-8 bytes"
  for bad in '[1, 99999999]' '[1, -2]' '[1.5]' '1 x 2' '[1,'; do
    rc=0
    echo "$bad" | "$bin" detokenize -m "$MODEL" >/dev/null 2>"$tmp/err" || rc=$?
    [ "$rc" -eq 1 ] || fail "geniex detokenize '$bad': exit code $rc, expected 1"
    grep -q '^geniex: error: ' "$tmp/err" || fail "geniex detokenize '$bad': message '$(cat "$tmp/err")'"
  done
  "$bin" tokenize -m "$MODEL" --bench 2 --bench-unit jsonl -f tests/data/tokenizer/corpus.jsonl >"$tmp/tokbench" \
    || fail "geniex tokenize --bench"
  python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["n_texts"] == 2123 and d["mb_per_s"] > 0, d' \
    "$tmp/tokbench" || fail "geniex tokenize --bench: $(cat "$tmp/tokbench")"
  local vocab="$GENIEX_TOKENIZER_DIR/vocab-llama-bpe.gguf"
  if [ -f "$vocab" ]; then  # a vocab-only GGUF, no model
    [ "$("$bin" tokenize --tokenizer "$vocab" -p "Hello world" --no-special)" = "[9906,1917]" ] \
      || fail "geniex tokenize --tokenizer vocab-llama-bpe.gguf"
    [ "$("$bin" detokenize --tokenizer "$vocab" 9906 1917)" = "Hello world" ] \
      || fail "geniex detokenize --tokenizer vocab-llama-bpe.gguf"
  fi
}

# cli_smoke BUILD_DIR [quick]: the CLI's subcommands on the real model, checking exit codes
# and the shape of their output.
cli_smoke() {
  local dir="$1" quick="${2:-}"
  local bin="$dir/tools/geniex"
  local tmp
  # Commands that load PoCL into the process (--device gpu, calibrate). Under ASan, LeakSanitizer's
  # stop-the-world tracer can crash at exit while PoCL's worker threads wind down ("Tracer caught
  # signal 11 ... LeakSanitizer has encountered a fatal error", google/sanitizers#1353): a fault of
  # the sanitizer, seen once in CI on `geniex calibrate`, not reproduced in 11 reruns. Those commands
  # run here with leak detection off; leaks on the OpenCL paths stay checked by the OpenCL tests in
  # the same build's ctest. Memory errors stay checked everywhere.
  local gpu_env=()
  if [ "$(basename "$dir")" = build-asan ]; then
    gpu_env=(env "ASAN_OPTIONS=${ASAN_OPTIONS:-}:detect_leaks=0")
  fi
  tmp="$(mktemp -d)"
  [ -x "$bin" ] || fail "$bin was not built"

  "$bin" --version >"$tmp/version" || fail "geniex --version"
  grep -q '^geniex [0-9]' "$tmp/version" || fail "geniex --version printed '$(cat "$tmp/version")'"
  "$bin" help >"$tmp/help" || fail "geniex help"
  for cmd in run chat info tokenize detokenize bench plan perplexity convert quantize; do
    grep -q "^  $cmd " "$tmp/help" || fail "geniex help does not list '$cmd'"
  done

  "$bin" info -m "$MODEL" >"$tmp/info" || fail "geniex info"
  grep -q '^parameters: ' "$tmp/info" || fail "geniex info: no parameter count"
  grep -q 'KV cache' "$tmp/info" || fail "geniex info: no memory estimate"
  "$bin" info -m "$MODEL" --json | python3 -c 'import json,sys; d=json.load(sys.stdin); assert d["n_params"] > 0' \
    || fail "geniex info --json"

  "$bin" tokenize -m "$MODEL" -p "Hello world" >"$tmp/ids" || fail "geniex tokenize"
  grep -qE '^\[[0-9]+(,[0-9]+)*\]$' "$tmp/ids" || fail "geniex tokenize: not a JSON list: $(cat "$tmp/ids")"
  "$bin" detokenize -m "$MODEL" <"$tmp/ids" >"$tmp/text" || fail "geniex detokenize"
  grep -q 'Hello world' "$tmp/text" || fail "geniex detokenize: round trip gave '$(cat "$tmp/text")'"
  tokenizer_cli_checks "$bin" "$tmp"

  "$bin" run -m "$MODEL" -p "Name a primary color." -n 8 --temp 0 >"$tmp/run1" 2>"$tmp/run1.err" \
    || fail "geniex run: $(cat "$tmp/run1.err")"
  [ -s "$tmp/run1" ] || fail "geniex run: no text on stdout"
  grep -q 'decode' "$tmp/run1.err" || fail "geniex run: no timings on stderr"
  grep -q 'time to 1st token' "$tmp/run1.err" || fail "geniex run: no time to first token on stderr"

  printf 'Hi!\n/reset\nWhat is 2+2?\n/exit\n' | "$bin" chat -m "$MODEL" -n 8 --temp 0 >"$tmp/chat" 2>"$tmp/chat.err" \
    || fail "geniex chat: $(cat "$tmp/chat.err")"
  [ -s "$tmp/chat" ] || fail "geniex chat: no reply on stdout"

  local rc=0
  "$bin" run -m /nonexistent/model.gguf -p hi 2>"$tmp/err" >/dev/null || rc=$?
  [ "$rc" -eq 1 ] || fail "geniex run with a missing model: exit code $rc, expected 1"
  grep -q '^geniex: error: ' "$tmp/err" || fail "geniex run with a missing model: message '$(cat "$tmp/err")'"
  rc=0
  "$bin" run --no-such-flag 2>/dev/null >/dev/null || rc=$?
  [ "$rc" -eq 2 ] || fail "geniex run --no-such-flag: exit code $rc, expected 2"

  # Hugging Face folder: loaded directly, converted, converted again only with --force.
  local hf=tests/data/hf_tiny/smollm2
  "$bin" run -m "$hf" -p "hello" -n 4 --temp 0 --no-stats >"$tmp/hf_run" || fail "geniex run on a Hugging Face folder"
  "$bin" convert "$hf" -o "$tmp/hf.gguf" --type q8_0 2>"$tmp/convert.err" || fail "geniex convert: $(cat "$tmp/convert.err")"
  "$bin" run -m "$tmp/hf.gguf" -p "hello" -n 4 --temp 0 --no-stats >/dev/null || fail "geniex run on a converted file"
  rc=0
  "$bin" convert "$hf" -o "$tmp/hf.gguf" --type q8_0 2>"$tmp/err" >/dev/null || rc=$?
  [ "$rc" -eq 1 ] || fail "geniex convert over an existing file without --force: exit code $rc, expected 1"
  "$bin" convert "$hf" -o "$tmp/hf.gguf" --type f16 --force 2>/dev/null || fail "geniex convert --force"

  if [ -z "$quick" ]; then
    "$bin" quantize "$MODEL" "$tmp/q8.gguf" q8_0 2>"$tmp/quantize.err" || fail "geniex quantize: $(cat "$tmp/quantize.err")"
    "$bin" run -m "$tmp/q8.gguf" -p "Name a primary color." -n 4 --temp 0 --no-stats >/dev/null || fail "geniex run on a quantized file"
    rm -f "$tmp/q8.gguf"
    # --device gpu: the OpenCL backend where the build has it (PoCL in CI), else a noted fallback.
    "${gpu_env[@]}" "$bin" run -m "$MODEL" -p "Name a primary color." -n 4 --temp 0 --no-stats --device gpu >/dev/null 2>"$tmp/gpu.err" \
      || fail "geniex run --device gpu: $(cat "$tmp/gpu.err")"
    "$bin" run -m "$MODEL" -p "Name a primary color." -n 8 --temp 0 --no-stats >"$tmp/run2" || fail "geniex run (again)"
    cmp -s "$tmp/run1" "$tmp/run2" || fail "geniex run --temp 0 is not deterministic"
    # The packed-weights cache: written by the first load, mapped by the second, same text.
    for want in written hit; do
      "$bin" run -m "$MODEL" -p "Name a primary color." -n 8 --temp 0 --packed-cache-dir "$tmp/packed" \
        >"$tmp/run_$want" 2>"$tmp/run_$want.err" || fail "geniex run --packed-cache-dir: $(cat "$tmp/run_$want.err")"
      grep -q "packed cache *$want" "$tmp/run_$want.err" || fail "geniex run --packed-cache-dir: not '$want': $(cat "$tmp/run_$want.err")"
      cmp -s "$tmp/run1" "$tmp/run_$want" || fail "geniex run --packed-cache-dir ($want) gave other text"
    done
    rm -rf "$tmp/packed"

    "$bin" plan -m "$MODEL" -p 64 >"$tmp/plan" || fail "geniex plan"
    grep -q '^nodes: [0-9]* (' "$tmp/plan" || fail "geniex plan: no summary"
    "$bin" plan -m "$MODEL" -p 64 --json | python3 -c 'import json,sys; d=json.load(sys.stdin); assert d["decode"]["rows"] and d["prefill"]["n_tokens"] == 64' \
      || fail "geniex plan --json"
    # Cost model, pictures and traces: a calibrated profile, a mixed plan drawn as SVG/HTML,
    # a run with split rows traced as Chrome trace JSON.
    GENIEX_PROFILE="$tmp/profile.json" "${gpu_env[@]}" "$bin" calibrate >/dev/null 2>"$tmp/cal.err" || fail "geniex calibrate: $(cat "$tmp/cal.err")"
    python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d' "$tmp/profile.json" || fail "geniex calibrate: no JSON profile"
    GENIEX_PROFILE="$tmp/profile.json" "${gpu_env[@]}" "$bin" plan -m "$MODEL" -p 64 --device gpu --gpu-layers 15 \
      --svg "$tmp/plan.svg" --html "$tmp/plan.html" >"$tmp/plan_mixed" 2>&1 || fail "geniex plan --svg/--html: $(cat "$tmp/plan_mixed")"
    grep -q '<svg' "$tmp/plan.svg" || fail "geniex plan --svg: no SVG"
    grep -q '<html' "$tmp/plan.html" || fail "geniex plan --html: no HTML"
    "${gpu_env[@]}" "$bin" run -m "$MODEL" -p "Name a primary color." -n 4 --temp 0 --no-stats --device gpu --split-rows \
      --trace "$tmp/trace.json" >/dev/null 2>"$tmp/trace.err" || fail "geniex run --trace: $(cat "$tmp/trace.err")"
    python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); ev=d["traceEvents"]; assert any(e.get("ph")=="X" for e in ev)' \
      "$tmp/trace.json" || fail "geniex run --trace: not a Chrome trace"

    "$bin" bench -m "$MODEL" -p 32 -n 4 -r 2 --json >"$tmp/bench" || fail "geniex bench"
    python3 - "$tmp/bench" <<'PY' || fail "geniex bench --json: unexpected output"
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
assert [r["test"] for r in rows] == ["pp32", "tg4"], rows
for r in rows:
    assert r["tokens_per_second"] > 0 and len(r["samples_tps"]) == 2 and r["peak_rss_bytes"] > 0, r
PY
    # -d: the same tests after a context already in the KV cache, named as llama-bench names them.
    "$bin" bench -m "$MODEL" -p 8 -n 4 -d 0,40 -r 1 --json >"$tmp/bench_depth" || fail "geniex bench -d"
    python3 - "$tmp/bench_depth" <<'PY' || fail "geniex bench -d --json: unexpected output"
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
assert [r["test"] for r in rows] == ["pp8", "tg4", "pp8 @ d40", "tg4 @ d40"], rows
assert [r["n_depth"] for r in rows] == [0, 0, 40, 40] and all(r["n_ctx"] >= 48 for r in rows), rows
assert "roof_tokens_per_second" in rows[1] and "roof_tokens_per_second" not in rows[3], rows
PY
    rc=0
    "$bin" bench -m "$MODEL" -p 8 -n 4 -d 40 -c 16 -r 1 >/dev/null 2>"$tmp/err" || rc=$?
    [ "$rc" -eq 1 ] && grep -q 'largest test with its depth' "$tmp/err" || fail "geniex bench -d 40 -c 16: exit $rc, $(cat "$tmp/err")"
    "$bin" bench -m "$MODEL" -p 32 -n 4 -r 1 >"$tmp/bench.md" || fail "geniex bench (table)"
    grep -qE '\| +pp32 \|' "$tmp/bench.md" || fail "geniex bench: no markdown table"
  fi
  rm -rf "$tmp"
  echo "CLI smoke checks passed ($bin)"
}

step "release: configure + build (build/, -DGENIEX_WERROR=ON, -j$JOBS)"
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DGENIEX_WERROR=ON -DGENIEX_BUILD_TESTS=ON \
  -DGENIEX_SANITIZE=OFF -DGENIEX_FUZZ=OFF
cmake --build build -j "$JOBS"

step "release: ctest"
ctest --test-dir build --output-on-failure -j "$JOBS"

step "cuda: build-cuda (-DGENIEX_CUDA=ON): the CUDA backend compiled, host tests; GPU tests skip without a GPU"
if command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; then
  cmake -S . -B build-cuda -DCMAKE_BUILD_TYPE=Release -DGENIEX_WERROR=ON -DGENIEX_BUILD_TESTS=ON \
    -DGENIEX_BUILD_BENCH=OFF -DGENIEX_SANITIZE=OFF -DGENIEX_FUZZ=OFF -DGENIEX_CUDA=ON
  cmake --build build-cuda -j "$JOBS" --target test_cuda test_cuda_plugin op_consistency geniex_cli
  ctest --test-dir build-cuda --output-on-failure -j "$JOBS" -L cuda
  # The CUDA build's CLI where no NVIDIA driver is installed: --device gpu runs on a fallback
  # with a note naming the missing driver, and the plugin (cudart, cuBLAS) is never opened,
  # so the peak RSS stays that of a build without CUDA (~200 MiB lower than when it was linked).
  # (ldconfig's list in a string first: under pipefail, grep -q leaving early could SIGPIPE it.)
  if ! grep -q 'libcuda\.so\.1 ' <<<"$(ldconfig -p 2>/dev/null || true)"; then
    build-cuda/tools/geniex run -m "$MODEL" -p "Name a primary color." -n 4 --temp 0 --device gpu -v \
      >build-cuda/gpu_run.out 2>&1 || fail "build-cuda: geniex run --device gpu: $(cat build-cuda/gpu_run.out)"
    grep -q 'no NVIDIA driver found' build-cuda/gpu_run.out || fail "build-cuda: no driver note: $(cat build-cuda/gpu_run.out)"
    build-cuda/tools/geniex bench -m "$MODEL" -p 16 -n 2 -r 1 --json >build-cuda/bench.json 2>/dev/null || fail "build-cuda: geniex bench"
    build/tools/geniex bench -m "$MODEL" -p 16 -n 2 -r 1 --json >build-cuda/bench_nocuda.json 2>/dev/null || fail "build: geniex bench"
    # Opening the plugin alone adds ~150 MiB (measured with ctypes: 14 -> 165 MiB).
    python3 - build-cuda/bench.json build-cuda/bench_nocuda.json <<'PY' || fail "build-cuda: peak RSS above the build without CUDA (did cudart load?)"
import json, sys
peak = [max(json.loads(l)["peak_rss_bytes"] for l in open(f) if l.strip()) / 2**20 for f in sys.argv[1:]]
print(f"build-cuda: peak RSS {peak[0]:.0f} MiB, build without CUDA {peak[1]:.0f} MiB")
sys.exit(peak[0] > peak[1] + 50)
PY
  fi
else
  echo "no nvcc on this machine: CUDA backend not built"
fi

step "release: README example (build/examples/simple)"
build/examples/simple "$MODEL" >build/example_simple.out || fail "examples/simple exited non-zero"
[ -s build/example_simple.out ] || fail "examples/simple printed nothing"
cat build/example_simple.out

step "release: CLI smoke checks"
cli_smoke build

step "aarch64: cross build, kernel tests and greedy check under qemu-user (scripts/test_aarch64.sh)"
GENIEX_REQUIRE_AARCH64=1 GENIEX_HOST_BUILD=build bash scripts/test_aarch64.sh

if [ "${GENIEX_SKIP_ASAN:-0}" = "1" ]; then
  step "asan: skipped (GENIEX_SKIP_ASAN=1)"
else
  step "asan: configure + build (build-asan, RelWithDebInfo, ASan+UBSan)"
  cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGENIEX_SANITIZE=ON \
    -DGENIEX_BUILD_BENCH=OFF -DGENIEX_BUILD_TESTS=ON -DGENIEX_FUZZ=OFF
  cmake --build build-asan -j "$JOBS"

  step "asan: ctest -LE slow"
  export ASAN_OPTIONS="${ASAN_OPTIONS:-abort_on_error=1:strict_string_checks=1}"
  export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
  ctest --test-dir build-asan --output-on-failure -j "$JOBS" -LE slow

  step "asan: CLI smoke checks"
  cli_smoke build-asan
fi

if [ "${GENIEX_SKIP_TSAN:-0}" = "1" ]; then
  step "tsan: skipped (GENIEX_SKIP_TSAN=1)"
else
  # ThreadSanitizer over the code that runs threads: the pool, the scheduler's per-backend
  # queues (mixed plans, row splits), the paged KV cache, sessions on several threads and
  # cancellation. A data race is reported whether or not it happened to corrupt anything, which
  # a timing-dependent ASan failure only sometimes shows.
  step "tsan: configure + build the threaded tests (build-tsan, RelWithDebInfo, ThreadSanitizer)"
  cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGENIEX_TSAN=ON \
    -DGENIEX_BUILD_BENCH=OFF -DGENIEX_BUILD_TESTS=ON -DGENIEX_FUZZ=OFF
  tsan_targets=(test_core test_graph test_kv test_runtime)
  # The target list in a variable first: `grep -q` stops reading at the first match, and under
  # pipefail the help command's SIGPIPE would make the test false.
  tsan_help="$(cmake --build build-tsan --target help)"
  if grep -qw test_opencl <<<"$tsan_help"; then tsan_targets+=(test_opencl); fi
  cmake --build build-tsan -j "$JOBS" --target "${tsan_targets[@]}"

  step "tsan: ctest (core, graph, kv; the threaded runtime and OpenCL tests)"
  export TSAN_OPTIONS="${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1}"
  ctest --test-dir build-tsan --output-on-failure --no-tests=error -j "$JOBS" -L '^(core|graph|kv)$' -LE slow
  ctest --test-dir build-tsan --output-on-failure --no-tests=error -j "$JOBS" -LE slow \
    -R '^(Api\.(SessionsOnSeveralThreadsMatchSequential|CallbackCanCancel|BadInputDoesNotCrash)|OpenClBackend\..*|OpenClRowSplit\.TraceOfSmolLM2HasBothQueues)$'
fi

if [ "${GENIEX_SKIP_FUZZ:-0}" = "1" ]; then
  step "fuzz: skipped (GENIEX_SKIP_FUZZ=1)"
elif command -v clang >/dev/null 2>&1 && command -v clang++ >/dev/null 2>&1; then
  step "fuzz: configure + build the fuzz targets (build-fuzz, clang, libFuzzer, -DGENIEX_WERROR=ON)"
  CC=clang CXX=clang++ cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGENIEX_FUZZ=ON \
    -DGENIEX_BUILD_BENCH=OFF -DGENIEX_BUILD_TESTS=ON -DGENIEX_SANITIZE=OFF -DGENIEX_WERROR=ON
  mapfile -t fuzz_targets < <(cmake --build build-fuzz --target help | grep -oE '\bfuzz_[A-Za-z0-9_]+' | sort -u)
  [ "${#fuzz_targets[@]}" -gt 0 ] || fail "no fuzz_* targets in build-fuzz"
  echo "fuzz targets: ${fuzz_targets[*]}"
  cmake --build build-fuzz -j "$JOBS" --target "${fuzz_targets[@]}"

  step "fuzz: ctest -L fuzz"
  ctest --test-dir build-fuzz --output-on-failure -j "$JOBS" -L fuzz
else
  step "fuzz: skipped (clang not found)"
fi

step "all checks passed in $((SECONDS - START)) s"
