#!/usr/bin/env python3
"""Load time and peak memory: GenieX (repacking at load, and mapping its packed-weights cache)
against llama.cpp (llama-cpp-python from PyPI) on the same GGUF files, in one run.

Each round runs, one after the other, every model's three loads: GenieX without a cache
(`geniex run ... -n 1`), GenieX with `--packed-cache-dir` (a hit: the cache is written once
before the rounds, and that first write is reported on its own), and llama.cpp building a
`Llama` with the same context and threads. Load time is what each reports for building the
model (GenieX's `load time`, llama.cpp's constructor), without process start or the Python
import; peak RSS is the process's (wait4). Medians over the rounds, and the ratios.

  python3 scripts/bench_load.py [--rounds 5] [-t 2] [-c 512] MODEL.gguf...
"""
import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

LLAMA_SNIPPET = r"""
import sys, time
from llama_cpp import Llama
t0 = time.perf_counter()
m = Llama(model_path=sys.argv[1], n_threads=int(sys.argv[2]), n_ctx=int(sys.argv[3]), verbose=False)
print("load_ms %.3f" % ((time.perf_counter() - t0) * 1000.0))
"""


def run_measured(cmd, env=None):
    """Runs cmd; returns (stdout+stderr text, peak RSS in MiB)."""
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
    out = p.stdout.read().decode("utf-8", "replace")
    _, status, usage = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode != 0:
        sys.exit(f"bench_load: {' '.join(cmd)} failed ({p.returncode}):\n{out[-2000:]}")
    return out, usage.ru_maxrss / 1024.0


def geniex_load(geniex, model, threads, ctx, cache_dir=None):
    cmd = [geniex, "run", "-m", model, "-p", "Hi", "-n", "1", "--temp", "0", "--device", "cpu",
           "-t", str(threads), "-c", str(ctx)]
    if cache_dir:
        cmd += ["--packed-cache-dir", cache_dir]
    out, rss = run_measured(cmd)
    m = re.search(r"load time\s+([0-9.]+) ms", out)
    if not m:
        sys.exit(f"bench_load: no load time in geniex's output:\n{out[-2000:]}")
    status = re.search(r"packed cache\s+(\S+)", out)
    return float(m.group(1)), rss, status.group(1) if status else "off"


def llama_load(model, threads, ctx):
    out, rss = run_measured([sys.executable, "-c", LLAMA_SNIPPET, model, str(threads), str(ctx)])
    m = re.search(r"load_ms ([0-9.]+)", out)
    if not m:
        sys.exit(f"bench_load: no load time from llama.cpp:\n{out[-2000:]}")
    return float(m.group(1)), rss


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("models", nargs="+", help="GGUF files")
    ap.add_argument("--geniex", default=str(REPO / "build" / "tools" / "geniex"))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("-c", "--ctx", type=int, default=512)
    args = ap.parse_args()
    try:
        import llama_cpp  # noqa: F401
    except ImportError:
        sys.exit("bench_load: llama-cpp-python is not installed (pip install llama-cpp-python)")

    cache_dir = tempfile.mkdtemp(prefix="geniex_bench_load_")
    try:
        rows = []
        first = {}
        samples = {m: {"repack": [], "hit": [], "llama": []} for m in args.models}
        for model in args.models:
            ms, rss, status = geniex_load(args.geniex, model, args.threads, args.ctx, cache_dir)
            if status != "written":
                sys.exit(f"bench_load: the first cached load of {model} says '{status}', not 'written'")
            first[model] = (ms, rss)
        for r in range(args.rounds):
            for model in args.models:
                s = samples[model]
                s["repack"].append(geniex_load(args.geniex, model, args.threads, args.ctx)[:2])
                ms, rss, status = geniex_load(args.geniex, model, args.threads, args.ctx, cache_dir)
                if status != "hit":
                    sys.exit(f"bench_load: a cached load of {model} says '{status}', not 'hit'")
                s["hit"].append((ms, rss))
                s["llama"].append(llama_load(model, args.threads, args.ctx))
            print(f"bench_load: round {r + 1}/{args.rounds} done", file=sys.stderr)

        def med(xs, i):
            return statistics.median(x[i] for x in xs)

        print(f"\nload time (ms) and peak RSS (MiB), medians of {args.rounds} rounds, {args.threads} threads, ctx {args.ctx}\n")
        print("| file | GenieX repack | GenieX cache hit | llama.cpp | repack / llama | hit / llama | "
              "first cached load (writes) | RSS repack / hit / llama |")
        print("|---|---:|---:|---:|---:|---:|---:|---|")
        for model in args.models:
            s = samples[model]
            rp, hit, ll = med(s["repack"], 0), med(s["hit"], 0), med(s["llama"], 0)
            print(f"| {Path(model).name} | {rp:.0f} ({min(x[0] for x in s['repack']):.0f}-{max(x[0] for x in s['repack']):.0f}) "
                  f"| {hit:.0f} ({min(x[0] for x in s['hit']):.0f}-{max(x[0] for x in s['hit']):.0f}) "
                  f"| {ll:.0f} ({min(x[0] for x in s['llama']):.0f}-{max(x[0] for x in s['llama']):.0f}) "
                  f"| {rp / ll:.2f} | {hit / ll:.2f} | {first[model][0]:.0f} "
                  f"| {med(s['repack'], 1):.0f} / {med(s['hit'], 1):.0f} / {med(s['llama'], 1):.0f} |")
    finally:
        shutil.rmtree(cache_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
