#!/usr/bin/env bash
# The CUDA backend's checks on a lent NVIDIA GPU (an H200 in this workplace), in one short run.
#
# The CUDA backend was written on a machine without a GPU: its kernels compile in CI and their
# per-element arithmetic is tested on the CPU (tests/cuda/test_cuda_host.cpp), but nothing
# that runs on a GPU was verified there. This script is that verification:
#   1. the CUDA tests (tests/cuda: whole graphs and mixed plans vs the CPU, fault fallbacks,
#      weights uploaded once, SmolLM2 greedy --device gpu vs cpu, 4 prompts x 64 tokens);
#   2. the op-consistency harness with the cuda backend (every op x dtype x shape vs the CPU);
#   3. `geniex bench` pp512 / tg128 on SmolLM2, cpu and gpu side by side, and on a random-weight
#      Llama-3.2-1B-shape Q4_0 file made on the machine, next to llama.cpp's CUDA numbers for
#      that shape on the same GPU kind (../shared/BENCHMARKS.md, quoted below);
#   4. a short table at the end.
# Expected device time: 2-4 minutes for `run` when the bundle has binaries (its steps' timeouts
# add up to under 10 minutes, so a hang still returns the logs under $OUT), plus the machine's
# start and a few seconds per `receive`; about 3 minutes more when it must build there.
#
# The device machine takes at most 64 MiB per call (working tree included), and SmolLM2's GGUF
# alone is 94 MiB, so the inputs travel in parts, one call each, on a machine kept warm between
# calls (it goes back after 30 s idle: issue the calls back to back):
#
#   here:    scripts/cuda_device_check.sh prepare        # builds, bundles, prints the calls
#   device:  run(command="scripts/cuda_device_check.sh receive 1", carry=["build-cuda-bundle/p1"])
#            ... one receive per part but the last ...
#            run(command="scripts/cuda_device_check.sh run N", carry=["build-cuda-bundle/pN"], timeout_s=600)
#
# `prepare` builds test_cuda, op_consistency and geniex here (nvcc, sm_80 + sm_90) and bundles
# them with the shared libraries they need that a CUDA image may lack (cuBLAS stays: the
# device's toolkit has it), the model, make_random_gguf.py and the gguf wheel. When the bundle
# has no binaries, `run` configures and builds on the device instead (needs GTest, fmt, CLI11,
# nlohmann-json, PCRE2 and utf8proc there). Options through the environment: CHECK_SKIP_1B=1
# skips the 1B bench (saves ~1 min); LLAMA_CPP_SDIST=path/to/llama_cpp_python-*.tar.gz (placed
# in a part) builds llama.cpp's CUDA backend there for a same-file comparison (adds ~6-10 min
# of compile: only with device time to spare).
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUNDLE="$REPO/build-cuda-bundle"  # ignored by git (/build*/)
STAGE=/tmp/geniex-cuda-check       # on the device machine; survives between calls while warm
PART_BYTES=$((36 * 1024 * 1024))   # working tree (~14 MB) + one part stays under 64 MiB

die() { echo "cuda_device_check: $*" >&2; exit 1; }

prepare() {
  local build="${BUILD_DIR:-$REPO/build-cuda}"
  local model="${GENIEX_MODEL:-$HOME/.cache/geniex/models/SmolLM2-135M-Instruct.Q4_1.gguf}"
  [[ -f "$model" ]] || die "model not found: $model (set GENIEX_MODEL)"
  command -v nvcc >/dev/null || [[ -x /usr/local/cuda/bin/nvcc ]] || die "nvcc not found: the bundle needs the CUDA build"
  cmake -S "$REPO" -B "$build" -DCMAKE_BUILD_TYPE=Release -DGENIEX_BUILD_TESTS=ON -DGENIEX_CUDA=ON >/dev/null
  cmake --build "$build" -j"${JOBS:-2}" --target test_cuda op_consistency geniex_cli geniex_cuda
  rm -rf "$BUNDLE" && mkdir -p "$BUNDLE/payload/bin" "$BUNDLE/payload/lib" "$BUNDLE/payload/tools"
  # The CUDA backend is a plugin the runtime opens from next to the executable.
  cp "$build/tests/test_cuda" "$build/tests/op_consistency" "$build/tools/geniex" \
    "$build/lib/libgeniex_cuda.so" "$BUNDLE/payload/bin/"
  strip "$BUNDLE/payload/bin/"*
  # Shared libraries outside glibc and libstdc++ that a CUDA image may lack (libcudart included;
  # cuBLAS, 0.5 GB, is taken from the device's toolkit or its Python nvidia-cublas wheel).
  ldd "$BUNDLE/payload/bin/"* | awk '/=> \//{print $3}' | sort -u |
    grep -Ev '/(libc|libm|libdl|librt|libpthread|libgcc_s|libstdc\+\+|ld-linux[^/]*|libcuda|libcublas[^/]*)\.so' |
    xargs -r -I{} cp -L {} "$BUNDLE/payload/lib/" || true
  cp "$model" "$BUNDLE/payload/model.gguf"
  local tool="${MAKE_RANDOM_GGUF:-$REPO/../shared/tools/make_random_gguf.py}"
  if [[ -f "$tool" ]]; then
    cp "$tool" "$BUNDLE/payload/tools/"
    python3 -m pip download -q --no-deps --only-binary=:all: -d "$BUNDLE/payload/tools" gguf ||
      echo "prepare: no gguf wheel (the 1B bench will be skipped unless the device has gguf)"
  fi
  [[ -n "${LLAMA_CPP_SDIST:-}" ]] && cp "$LLAMA_CPP_SDIST" "$BUNDLE/payload/tools/"
  (cd "$BUNDLE" && tar cf stream.tar payload && rm -rf payload)
  local sum; sum=$(sha256sum "$BUNDLE/stream.tar" | cut -d' ' -f1)
  split -b "$PART_BYTES" -d -a 1 "$BUNDLE/stream.tar" "$BUNDLE/chunk"
  rm "$BUNDLE/stream.tar"
  local n=0
  for c in "$BUNDLE"/chunk*; do
    n=$((n + 1))
    mkdir -p "$BUNDLE/p$n" && mv "$c" "$BUNDLE/p$n/chunk"
  done
  for i in $(seq 1 $n); do printf '%s %s\n' "$n" "$sum" >"$BUNDLE/p$i/MANIFEST"; done
  du -sh "$BUNDLE"/p*
  echo "prepare: $n parts. On the device machine, back to back (it goes back after 30 s idle):"
  for i in $(seq 1 $((n - 1))); do
    echo "  run(command=\"scripts/cuda_device_check.sh receive $i\", carry=[\"build-cuda-bundle/p$i\"], timeout_s=60)"
  done
  echo "  run(command=\"scripts/cuda_device_check.sh run $n\", carry=[\"build-cuda-bundle/p$n\"], timeout_s=600)"
}

# Appends part i to the stream on the device (parts must come in order).
receive() {
  local i="$1"
  local part="$BUNDLE/p$i"
  [[ -f "$part/chunk" && -f "$part/MANIFEST" ]] || die "part $i was not carried (carry=[\"build-cuda-bundle/p$i\"])"
  mkdir -p "$STAGE"
  if [[ "$i" == 1 ]]; then rm -f "$STAGE/stream.tar" "$STAGE/received"; fi
  local have; have=$(cat "$STAGE/received" 2>/dev/null || echo 0)
  [[ "$have" == $((i - 1)) ]] || die "part $i arrived after part $have: the machine went back in between? start again at part 1"
  cat "$part/chunk" >>"$STAGE/stream.tar"
  echo "$i" >"$STAGE/received"
  echo "receive: part $i of $(cut -d' ' -f1 "$part/MANIFEST") stored ($(du -h "$STAGE/stream.tar" | cut -f1) so far)"
}

# Finds libcublas.so.13 on the device (toolkit, or the Python image's nvidia-cublas wheel).
cublas_dirs() {
  local d
  for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
    [[ -e "$d/libcublas.so.13" ]] && echo "$d"
  done
  python3 - <<'EOF' 2>/dev/null || true
import os, importlib.util
spec = importlib.util.find_spec("nvidia.cublas")
if spec and spec.submodule_search_locations:
    for p in spec.submodule_search_locations:
        if os.path.isdir(os.path.join(p, "lib")):
            print(os.path.join(p, "lib"))
EOF
}

run_checks() {
  local n="$1"
  receive "$n"
  local sum; sum=$(cut -d' ' -f2 "$BUNDLE/p$n/MANIFEST")
  [[ "$(sha256sum "$STAGE/stream.tar" | cut -d' ' -f1)" == "$sum" ]] || die "the reassembled bundle's checksum differs: start again at part 1"
  rm -rf "$STAGE/payload" && tar xf "$STAGE/stream.tar" -C "$STAGE"
  local P="$STAGE/payload" OUTD="${OUT:-$STAGE/out}"
  mkdir -p "$OUTD"
  export GENIEX_MODEL="$P/model.gguf" GENIEX_REQUIRE_MODEL=1
  export LD_LIBRARY_PATH="$P/lib:$(cublas_dirs | paste -sd:):${LD_LIBRARY_PATH:-}"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
  local bin="$P/bin"
  if ! "$bin/test_cuda" --gtest_list_tests >/dev/null 2>"$OUTD/ldd.log"; then
    echo "run: the bundled binaries do not start here ($(head -c 300 "$OUTD/ldd.log")); building on the device"
    cmake -S "$REPO" -B "$STAGE/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGENIEX_CUDA=ON \
      -DGENIEX_BUILD_BENCH=OFF >"$OUTD/configure.log" 2>&1 || die "configure failed on the device (see configure.log)"
    cmake --build "$STAGE/build" --target test_cuda op_consistency geniex_cli >"$OUTD/build.log" 2>&1 ||
      die "build failed on the device (see build.log)"
    bin="$STAGE/binlinks" && mkdir -p "$bin"
    ln -sf "$STAGE/build/tests/test_cuda" "$STAGE/build/tests/op_consistency" "$STAGE/build/tools/geniex" "$bin/"
  fi
  local t0=$SECONDS status=0

  echo "== 1. CUDA tests"
  timeout 180 "$bin/test_cuda" 2>&1 | tee "$OUTD/test_cuda.log" | grep -E '^\[  (FAILED|  OK|PASSED|SKIPPED) |prompt|tok/s|FAIL|no CUDA' || true
  grep -q '^\[  PASSED  \]' "$OUTD/test_cuda.log" && ! grep -q '^\[  FAILED  \]' "$OUTD/test_cuda.log" || status=1
  # On the GPU machine nothing may skip: a skip means the device or the model was not found.
  if grep -q '^\[  SKIPPED \]' "$OUTD/test_cuda.log"; then echo "run: tests skipped on the GPU machine"; status=1; fi

  echo "== 2. op-consistency harness"
  timeout 100 "$bin/op_consistency" >"$OUTD/op_consistency.log" 2>&1 || status=1
  grep -E '^(cuda|SKIP)' "$OUTD/op_consistency.log" | grep -Ev ' ok$' | head -40 || true
  if ! grep -q '^cuda ' "$OUTD/op_consistency.log"; then echo "run: the harness did not test the cuda backend"; status=1; fi
  "$bin/op_consistency" --support-matrix >"$OUTD/support_matrix.txt" 2>&1 || true

  echo "== 3. bench (median of 3)"
  local threads; threads=$(nproc)
  for dev in cpu gpu; do
    timeout 75 "$bin/geniex" bench -m "$GENIEX_MODEL" -p 512 -n 128 -r 3 -t "$threads" --device "$dev" --json \
      >"$OUTD/bench_smollm2_$dev.jsonl" 2>"$OUTD/bench_smollm2_$dev.err" || status=1
  done
  local have_1b=0
  if [[ -z "${CHECK_SKIP_1B:-}" && -f "$P/tools/make_random_gguf.py" ]]; then
    if ! python3 -c 'import gguf' 2>/dev/null && ls "$P"/tools/gguf-*.whl >/dev/null 2>&1; then
      python3 -m pip install -q --no-index --no-deps --target "$STAGE/site" "$P"/tools/gguf-*.whl && export PYTHONPATH="$STAGE/site"
    fi
    if timeout 90 python3 "$P/tools/make_random_gguf.py" "$STAGE/llama1b.gguf" llama3.2-1b q4_0 >"$OUTD/make_1b.log" 2>&1; then
      timeout 75 "$bin/geniex" bench -m "$STAGE/llama1b.gguf" -p 512 -n 128 -r 3 --device gpu --json \
        >"$OUTD/bench_llama1b_gpu.jsonl" 2>"$OUTD/bench_llama1b_gpu.err" && have_1b=1 || status=1
    else
      echo "run: could not make the random 1B file (see make_1b.log); its bench is skipped"
    fi
  fi
  if [[ -n "${LLAMA_CPP_SDIST:-}" ]] && ls "$P"/tools/llama_cpp_python-*.tar.gz >/dev/null 2>&1; then
    echo "== llama.cpp CUDA build from the sdist (slow)"
    tar xzf "$P"/tools/llama_cpp_python-*.tar.gz -C "$STAGE"
    local src; src=$(ls -d "$STAGE"/llama_cpp_python-*/vendor/llama.cpp)
    cmake -S "$src" -B "$STAGE/llama-build" -G Ninja -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
      -DLLAMA_CURL=OFF >"$OUTD/llama_configure.log" 2>&1 &&
      timeout 600 cmake --build "$STAGE/llama-build" --target llama-bench >"$OUTD/llama_build.log" 2>&1 &&
      "$STAGE/llama-build/bin/llama-bench" -m "$GENIEX_MODEL" -p 512 -n 128 -r 3 -ngl 99 -o md \
        >"$OUTD/llama_bench.md" 2>&1 || echo "run: llama.cpp build or bench failed (see llama_*.log)"
  fi

  echo "== summary ($((SECONDS - t0)) s)"
  python3 - "$OUTD" "$have_1b" <<'EOF'
import json, re, sys, pathlib
out, have_1b = pathlib.Path(sys.argv[1]), sys.argv[2] == "1"
def bench(name):
    rows = {}
    p = out / name
    if p.exists():
        for line in p.read_text().splitlines():
            try:
                j = json.loads(line)
            except ValueError:
                continue
            if "test" in j and "tokens_per_second" in j:
                rows[j["test"]] = f'{j["tokens_per_second"]:,.0f}'
    return rows
tc = (out / "test_cuda.log").read_text() if (out / "test_cuda.log").exists() else ""
oc = (out / "op_consistency.log").read_text() if (out / "op_consistency.log").exists() else ""
passed = re.search(r"\[  PASSED  \] (\d+) test", tc)
failed = re.findall(r"^\[  FAILED  \] (\S+)", tc, re.M)
cuda_lines = [l for l in oc.splitlines() if l.startswith("cuda ")]
n_ok = sum(l.endswith(" ok") for l in cuda_lines)
n_fail = sum(" FAIL" in l for l in cuda_lines)
n_unsup = sum(" unsupported:" in l for l in cuda_lines)
worst = {}
for l in cuda_lines:
    m = re.match(r"cuda\s+(\S+)\s+(\S+).*nmse (\S+)", l)
    if m:
        key = m.group(1) + " " + (m.group(2) if m.group(1) in ("matmul", "get_rows") else "")
        worst[key] = max(worst.get(key, 0.0), float(m.group(3)))
same = re.search(r"prompts with all 64 tokens identical: (\S+)", tc)
print(f"| check | result |\n|---|---|")
print(f"| test_cuda | {passed.group(1) if passed else '?'} passed, {len(set(failed))} failed {' '.join(sorted(set(failed)))} |")
print(f"| op harness, cuda vs cpu | {n_ok} ok, {n_fail} failed, {n_unsup} unsupported |")
print("| worst nmse per op | " + ", ".join(f"{k.strip()} {v:.1e}" for k, v in sorted(worst.items())) + " |")
print(f"| SmolLM2 greedy gpu = cpu (4 x 64) | {same.group(1) if same else '?'} prompts identical |")
s_cpu, s_gpu = bench("bench_smollm2_cpu.jsonl"), bench("bench_smollm2_gpu.jsonl")
print("\n| model | test | geniex cpu | geniex cuda | llama.cpp CUDA, H200 (BENCHMARKS.md) |\n|---|---|---:|---:|---:|")
for t in sorted(set(s_cpu) | set(s_gpu)):
    print(f"| SmolLM2-135M Q4_1 | {t} | {s_cpu.get(t, '-')} | {s_gpu.get(t, '-')} | not measured |")
if have_1b:
    ref = {"pp512": "35,173 (fa off)", "tg128": "833 (fa off)"}
    for t, v in sorted(bench("bench_llama1b_gpu.jsonl").items()):
        print(f"| Llama-3.2-1B-shape Q4_0 (random) | {t} | - | {v} | {ref.get(t, '-')} |")
EOF
  echo "logs: $OUTD"
  return $status
}

case "${1:-}" in
  prepare) prepare ;;
  receive) [[ $# -eq 2 ]] || die "usage: receive PART"; receive "$2" ;;
  run) [[ $# -eq 2 ]] || die "usage: run LAST_PART"; run_checks "$2" ;;
  *) sed -n '2,40p' "$0"; exit 2 ;;
esac
