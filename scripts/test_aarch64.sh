#!/usr/bin/env bash
# AArch64 check (Snapdragon-class CPUs), run by scripts/test.sh in CI:
#   1. cross-compiles the GENIEX_MINIMAL build with cmake/toolchain-aarch64.cmake (Debian's
#      g++-aarch64-linux-gnu; GoogleTest from /usr/src/googletest) into build-arm/
#   2. runs the kernel, core and scheduler tests under qemu-aarch64 on three CPU models, each
#      reaching a different kernel table: cortex-a53 (Armv8.0: "neon"), cortex-a76 (+dotprod:
#      "dotprod"), max (+dotprod +i8mm: "i8mm"); the dispatcher must pick exactly that table,
#      and GENIEX_CPU_DISABLE on `max` must step it down (the run-time choice reads HWCAP/HWCAP2)
#   3. end to end: greedy token ids of SmolLM2 (GENIEX_MODEL) from a fixed token-id prompt,
#      under each CPU model, must equal the native x86 build's ids (build/tests/greedy_ids,
#      built here when missing); SmolLM2 requantized to Q4_K_M (with the host CLI, when built)
#      must give the same ids and margins repacked for SMMLA as in the file layout
# Installs nothing (scripts/setup.sh does). Without the cross toolchain or qemu it prints why
# and skips (exit 0), unless GENIEX_REQUIRE_AARCH64=1 (CI), where that is a failure.
# qemu timings mean nothing; only correctness is checked.
# Environment: GENIEX_ARM_BUILD (default build-arm), GENIEX_HOST_BUILD (native build with
# greedy_ids, default build), GENIEX_JOBS (default 2), GENIEX_ARM_TOKENS (default 24).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

BUILD="${GENIEX_ARM_BUILD:-build-arm}"
HOST_BUILD="${GENIEX_HOST_BUILD:-build}"
JOBS="${GENIEX_JOBS:-2}"
N_GEN="${GENIEX_ARM_TOKENS:-24}"
SYSROOT=/usr/aarch64-linux-gnu
START=$SECONDS
step() { printf '\n=== aarch64 [%4ds] %s\n' "$((SECONDS - START))" "$*"; }
fail() { echo "test_aarch64.sh: FAIL: $*" >&2; exit 1; }

missing=()
command -v aarch64-linux-gnu-g++ >/dev/null 2>&1 || missing+=(g++-aarch64-linux-gnu)
command -v qemu-aarch64 >/dev/null 2>&1 || missing+=(qemu-user)
[ -f /usr/src/googletest/CMakeLists.txt ] || missing+=(googletest)
if [ ${#missing[@]} -gt 0 ]; then
  msg="missing ${missing[*]} (scripts/setup.sh installs them)"
  [ "${GENIEX_REQUIRE_AARCH64:-0}" = "1" ] && fail "aarch64 checks cannot run: $msg"
  echo "test_aarch64.sh: SKIP: aarch64 checks skipped: $msg"
  exit 0
fi

# CPU model -> the kernel table the dispatcher must choose on it.
CPUS=(cortex-a53 cortex-a76 max)
declare -A ISA=([cortex-a53]=neon [cortex-a76]=dotprod [max]=i8mm)
declare -A RESULT
qemu() {  # qemu CPU_MODEL PROGRAM ARGS...
  local cpu="$1"
  shift
  qemu-aarch64 -L "$SYSROOT" -cpu "$cpu" "$@"
}

step "cross build ($BUILD, aarch64-linux-gnu-g++, GENIEX_MINIMAL, -j$JOBS)"
cmake -S . -B "$BUILD" -DCMAKE_TOOLCHAIN_FILE=cmake/toolchain-aarch64.cmake -DGENIEX_MINIMAL=ON \
  -DCMAKE_BUILD_TYPE=Release -DGENIEX_WERROR=ON -DGENIEX_BUILD_TESTS=ON >/dev/null
cmake --build "$BUILD" -j "$JOBS" --target test_quant test_core test_graph greedy_ids
T="$BUILD/tests/arm"
grep -q 'Machine: *AArch64' <<<"$(aarch64-linux-gnu-readelf -h "$T/test_quant")" || fail "$T/test_quant is not an AArch64 program"
# Files built with +dotprod / +i8mm must define no weak (COMDAT) symbols: the linker could keep
# such a copy of an inline function for the whole program, and older CPUs would trap on it.
mapfile -t ext_objs < <(find "$BUILD/CMakeFiles/geniex_cpu_kernels.dir" -name 'kernels_neon_*.cpp.o')
[ "${#ext_objs[@]}" -eq 2 ] || fail "expected the dotprod and i8mm kernel objects, found: ${ext_objs[*]}"
for o in "${ext_objs[@]}"; do
  weak="$(aarch64-linux-gnu-nm -C --defined-only "$o" | grep -E ' [WVuv] ' || true)"
  [ -z "$weak" ] || fail "$o defines weak symbols compiled for a newer CPU:
$weak"
done

for cpu in "${CPUS[@]}"; do
  step "tests under qemu -cpu $cpu (expects the ${ISA[$cpu]} kernels)"
  GENIEX_EXPECT_ISA="${ISA[$cpu]}" qemu "$cpu" "$T/test_quant" --gtest_brief=1 \
    || fail "test_quant under -cpu $cpu"
  qemu "$cpu" "$T/test_graph" --gtest_brief=1 || fail "test_graph under -cpu $cpu"
  RESULT[$cpu]="test_quant ok, test_graph ok"
done

step "run-time choice: GENIEX_CPU_DISABLE on -cpu max"
for case in "i8mm:dotprod" "dotprod,i8mm:neon"; do
  GENIEX_CPU_DISABLE="${case%%:*}" GENIEX_EXPECT_ISA="${case##*:}" qemu max "$T/test_quant" \
    --gtest_brief=1 --gtest_filter='NeonKernels.DispatchFollowsCpuFeatures:NeonKernels.RandomBlocksMatchScalar' \
    || fail "dispatch with GENIEX_CPU_DISABLE=${case%%:*} on -cpu max"
done

step "core tests under qemu -cpu max"
qemu max "$T/test_core" --gtest_brief=1 || fail "test_core under -cpu max"

greedy="skipped (GENIEX_MODEL not set or missing)"
if [ -n "${GENIEX_MODEL:-}" ] && [ -f "$GENIEX_MODEL" ]; then
  step "end to end: greedy ids, native x86 vs qemu ($N_GEN tokens)"
  HOST_BIN="$HOST_BUILD/tests/greedy_ids"
  if [ ! -x "$HOST_BIN" ]; then
    if [ ! -f "$HOST_BUILD/CMakeCache.txt" ]; then
      HOST_BUILD="$BUILD/host"
      cmake -S . -B "$HOST_BUILD" -DGENIEX_MINIMAL=ON -DCMAKE_BUILD_TYPE=Release -DGENIEX_WERROR=ON >/dev/null
      HOST_BIN="$HOST_BUILD/tests/arm/greedy_ids"
    fi
    cmake --build "$HOST_BUILD" -j "$JOBS" --target greedy_ids
  fi
  # SmolLM2's chat prompt "What is the capital of France?" as token ids (no tokenizer needed).
  PROMPT=(1 4093 198 1780 314 260 3575 282 4649 47 2 198 1 520 9531 198)
  "$HOST_BIN" "$GENIEX_MODEL" "$N_GEN" 2 "${PROMPT[@]}" >"$BUILD/greedy.native" \
    || fail "native greedy_ids: $(cat "$BUILD/greedy.native")"
  want="$(grep '^ids:' "$BUILD/greedy.native")"
  echo "native x86 ($(grep '^kernels q4_1' "$BUILD/greedy.native")): $want"
  for cpu in "${CPUS[@]}"; do
    out="$BUILD/greedy.$cpu"
    qemu "$cpu" "$T/greedy_ids" "$GENIEX_MODEL" "$N_GEN" 2 "${PROMPT[@]}" >"$out" \
      || fail "greedy_ids under -cpu $cpu: $(cat "$out")"
    grep -q "^kernels q4_1: ${ISA[$cpu]}\$" "$out" || fail "greedy_ids under -cpu $cpu did not use the ${ISA[$cpu]} kernels: $(grep '^kernels' "$out" | tr '\n' ' ')"
    # SmolLM2's Q8_0 weight (the tied embedding / output) is repacked for SMMLA only with i8mm.
    if [ "${ISA[$cpu]}" = i8mm ]; then
      grep -q '^packed: .*q8_0x8z x' "$out" || fail "greedy_ids under -cpu $cpu did not repack the Q8_0 weight: $(grep '^packed' "$out")"
    else
      ! grep -q 'x8z' "$out" || fail "greedy_ids under -cpu $cpu repacked for SMMLA without i8mm: $(grep '^packed' "$out")"
    fi
    got="$(grep '^ids:' "$out")"
    echo "qemu -cpu $cpu (${ISA[$cpu]}, $(grep '^packed' "$out")): $got ($(grep '^min_margin' "$out"))"
    [ "$got" = "$want" ] || fail "greedy ids under -cpu $cpu differ from the native build's
  native: $want
  $cpu:  $got"
    RESULT[$cpu]+=", greedy $N_GEN tokens = native"
  done
  greedy="identical to native x86 on every CPU model"

  # The K-quant and 5-bit layouts: SmolLM2 requantized to Q4_K_M (its 1536-wide rows are Q4_K or
  # Q6_K, the 576-wide ones fall back to Q5_0 / Q8_0) and to Q5_K_M (Q5_K, Q6_K; Q5_1 / Q8_0)
  # must run repacked under -cpu max and give the very logits of the file layout (the kernels
  # are bit for bit the file-layout i8mm ones): same ids, same smallest margin.
  HOST_CLI="$HOST_BUILD/tools/geniex"
  if [ -x "$HOST_CLI" ]; then
    for mix in "q4_k_m:q4_kx8z q6_kx8z q5_0x8z" "q5_k_m:q5_kx8z q6_kx8z q5_1x8z"; do
      name="${mix%%:*}"
      layouts="${mix#*:}"
      step "end to end: ${name^^}, repacked ($layouts) vs file layout under qemu -cpu max"
      KM="$BUILD/smollm2-$name.gguf"
      "$HOST_CLI" quantize "$GENIEX_MODEL" "$KM" "$name" --force >"$BUILD/quantize.log" 2>&1 \
        || fail "geniex quantize to $name: $(tail -5 "$BUILD/quantize.log")"
      qemu max "$T/greedy_ids" "$KM" "$N_GEN" 2 "${PROMPT[@]}" >"$BUILD/greedy.$name" \
        || fail "greedy_ids on $name: $(cat "$BUILD/greedy.$name")"
      GENIEX_REPACK=0 qemu max "$T/greedy_ids" "$KM" "$N_GEN" 2 "${PROMPT[@]}" >"$BUILD/greedy.$name.0" \
        || fail "greedy_ids on $name, GENIEX_REPACK=0: $(cat "$BUILD/greedy.$name.0")"
      for layout in $layouts; do
        grep -q "^packed: .*$layout x" "$BUILD/greedy.$name" \
          || fail "no $layout weights in $name under -cpu max: $(grep '^packed' "$BUILD/greedy.$name")"
      done
      ! grep -q 'x8z' "$BUILD/greedy.$name.0" || fail "GENIEX_REPACK=0 still repacked: $(grep '^packed' "$BUILD/greedy.$name.0")"
      km="$(grep -E '^(ids|min_margin):' "$BUILD/greedy.$name")"
      km0="$(grep -E '^(ids|min_margin):' "$BUILD/greedy.$name.0")"
      echo "${name^^} repacked ($(grep '^packed' "$BUILD/greedy.$name")): $(echo $km)"
      [ "$km" = "$km0" ] || fail "$name: repacked and file-layout runs differ
  repacked:    $(echo $km)
  file layout: $(echo $km0)"
      greedy+="; ${name^^} repacked = file layout"
    done
  fi
fi

step "summary"
for cpu in "${CPUS[@]}"; do
  printf '  %-11s %-8s %s\n' "$cpu" "${ISA[$cpu]}" "${RESULT[$cpu]}"
done
echo "  dispatch steps down with GENIEX_CPU_DISABLE on max: ok; test_core: ok; end to end: $greedy"
echo "aarch64: all checks passed in $((SECONDS - START)) s"
