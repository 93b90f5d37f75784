#!/usr/bin/env python3
"""Dynamic instruction counts of AArch64 kernels under qemu-user (there is no ARM hardware here).

Runs an AArch64 test binary under `qemu-aarch64 -cpu max` with qemu's translation and execution
log (-d in_asm,exec,nochain), then sums, per function, the instructions executed and how many
of them were SMMLA / USMMLA / SDOT / USDOT (classified from the binary's own objdump, since
qemu 7's disassembler prints those as raw words). Prints instructions per such operation:
the measure the kernel work on ARM is judged by in bench/LOG.md.

  scripts/arm_instr_count.py build-arm/tests/arm/test_quant 'PackedX8z.Q*K*' 'kz|k_mm'

Arguments: binary, gtest filter, regex of function names to print (default: all with any).
Needs qemu-user and binutils-aarch64-linux-gnu (scripts/setup.sh installs both). The log is
large (about 2 GB for the example) and is deleted afterwards.
"""
import bisect
import collections
import os
import re
import subprocess
import sys
import tempfile

MM_OPS = {"smmla", "usmmla", "sdot", "usdot"}
BASE = 0x5500000000  # where qemu-user loads a position-independent executable


def symbols(binary):
    out = subprocess.run(["aarch64-linux-gnu-nm", "-C", "--defined-only", "-n", binary],
                         capture_output=True, text=True, check=True).stdout
    syms = []
    for line in out.splitlines():
        m = re.match(r"([0-9a-f]+) [tTwW] (.*)", line)
        if m:
            syms.append((int(m.group(1), 16) + BASE, m.group(2)))
    return syms


def mm_addresses(binary):
    out = subprocess.run(["aarch64-linux-gnu-objdump", "-d", "--no-show-raw-insn", binary],
                         capture_output=True, text=True, check=True).stdout
    pcs = set()
    for line in out.splitlines():
        m = re.match(r"^\s+([0-9a-f]+):\s+(\S+)", line)
        if m and m.group(2) in MM_OPS:
            pcs.add(int(m.group(1), 16) + BASE)
    return pcs


def count(log, mm_pcs):
    blocks = {}  # translated block start -> [instructions, mm ops]
    runs = collections.Counter()
    cur = None
    with open(log, errors="replace") as f:
        for line in f:
            m = re.match(r"^0x([0-9a-f]+):\s", line)
            if m:
                pc = int(m.group(1), 16)
                if cur is None:
                    cur = pc
                    blocks[cur] = [0, 0]
                blocks[cur][0] += 1
                blocks[cur][1] += pc in mm_pcs
                continue
            if line.startswith("IN:") or not line.strip():
                cur = None
                continue
            m = re.search(r"Trace \d+: 0x[0-9a-f]+ \[[0-9a-f]+/([0-9a-f]+)/", line)
            if m:
                runs[int(m.group(1), 16)] += 1
    return blocks, runs


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    binary, gfilter = sys.argv[1], sys.argv[2]
    pattern = re.compile(sys.argv[3] if len(sys.argv) > 3 else ".")
    syms = symbols(binary)
    addrs = [a for a, _ in syms]
    mm_pcs = mm_addresses(binary)
    fd, log = tempfile.mkstemp(suffix=".qemu.log")
    os.close(fd)
    try:
        r = subprocess.run(["qemu-aarch64", "-L", "/usr/aarch64-linux-gnu", "-cpu", "max", "-d", "in_asm,exec,nochain",
                            "-D", log, binary, f"--gtest_filter={gfilter}", "--gtest_brief=1"])
        if r.returncode != 0:
            sys.exit(f"{binary} failed under qemu (exit {r.returncode})")
        blocks, runs = count(log, mm_pcs)
    finally:
        os.unlink(log)
    total, mm = collections.Counter(), collections.Counter()
    for pc, n in runs.items():
        if pc in blocks:
            i = bisect.bisect_right(addrs, pc) - 1
            name = syms[i][1] if i >= 0 else "?"
            total[name] += blocks[pc][0] * n
            mm[name] += blocks[pc][1] * n
    print(f"{'instructions':>12} {'mm/dot ops':>10} {'per op':>7}  function")
    for name in sorted(total, key=lambda k: -total[k]):
        if mm[name] and pattern.search(name):
            short = re.sub(r"geniex::cpu::\(anonymous namespace\)::", "", name)
            print(f"{total[name]:12d} {mm[name]:10d} {total[name] / mm[name]:7.2f}  {short[:110]}")


if __name__ == "__main__":
    main()
