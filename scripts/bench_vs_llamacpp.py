#!/usr/bin/env python3
# Side-by-side speed benchmark: GenieX (`geniex bench`) against llama.cpp (llama-cpp-python) on the same GGUF files, same run.
"""Benchmark GenieX against llama.cpp on the same model files in one run.

For every model file: pp<P> (prompt processing: P random token ids evaluated in one batch) and
tg<N> (N single-token decode steps), each the median of R repetitions on a fresh KV state.
With -d D both run after D random tokens already in the KV cache (evaluated before the clock
starts, again for each repetition): the tests are then named "pp<P> @ d<D>" and "tg<N> @ d<D>", as
llama-bench names them, and the decode roof (weights only) is not printed for them.

  GenieX:    `<geniex> bench -m FILE -p P -n N -r R -t T --json`, which prints one JSON object per
             line with keys test ("pp512"/"tg128"), tokens_per_second (median), model, threads,
             peak_rss_bytes.
  llama.cpp: llama-cpp-python in this process, CPU only, n_threads = n_threads_batch = T,
             n_batch = n_ubatch = 512, n_ctx 1024; one warm-up batch and one warm-up decode first.

Prints a markdown table (model, test, GenieX t/s, llama.cpp t/s, ratio GenieX / llama.cpp) and,
with --json-out, writes one JSON object per (model, test).

--rounds K alternates the two K times per model (GenieX, llama.cpp, GenieX, ...) and reports the
medians over the rounds and the range of the rounds' own ratios: on a shared VM whose speed drifts
over minutes, both columns then see the same machine.

--make-random creates the random-weight Llama-3.2-1B-shape Q4_0 file with
shared/tools/make_random_gguf.py in the cache (skipped when present) and adds it to the models.
That file carries a SentencePiece filler vocabulary: fine here (no text is involved).

Examples:
  scripts/bench_vs_llamacpp.py                           # default model (fetch_model.sh)
  scripts/bench_vs_llamacpp.py --make-random -r 3
  scripts/bench_vs_llamacpp.py a.gguf -r 3 --rounds 3
  scripts/bench_vs_llamacpp.py a.gguf -p 512 -n 64 -d 4096   # after 4096 tokens of context
  scripts/bench_vs_llamacpp.py a.gguf b.gguf --json-out bench.jsonl --skip-geniex
"""
import argparse
import json
import multiprocessing
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CACHE = Path(os.environ.get("GENIEX_CACHE", Path.home() / ".cache" / "geniex"))
DEFAULT_MODEL = CACHE / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
RANDOM_MODEL = CACHE / "models" / "llama3.2-1b-random-q4_0.gguf"


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def find_make_random_tool():
    for cand in (Path("/work/shared/tools/make_random_gguf.py"), REPO.parent / "shared" / "tools" / "make_random_gguf.py",
                 REPO / "shared" / "tools" / "make_random_gguf.py"):
        if cand.is_file():
            return cand
    sys.exit("bench: make_random_gguf.py not found (looked in /work/shared/tools and ../shared/tools)")


def make_random_model():
    if RANDOM_MODEL.is_file() and RANDOM_MODEL.stat().st_size > 0:
        log(f"bench: random model already present: {RANDOM_MODEL}")
        return RANDOM_MODEL
    RANDOM_MODEL.parent.mkdir(parents=True, exist_ok=True)
    tmp = RANDOM_MODEL.with_suffix(".gguf.part")
    log(f"bench: writing {RANDOM_MODEL} (Llama-3.2-1B shape, Q4_0, random weights)")
    subprocess.run([sys.executable, str(find_make_random_tool()), str(tmp), "llama3.2-1b", "q4_0"], check=True)
    tmp.rename(RANDOM_MODEL)
    return RANDOM_MODEL


# ---------------------------------------------------------------------------------------------
# GenieX

def run_geniex(binary, model, args):
    """Returns {test: record} from `geniex bench --json`, or {} (with a message) when unavailable."""
    if not os.access(binary, os.X_OK):
        log(f"bench: GenieX binary {binary} not found or not executable; GenieX column left empty")
        return {}
    cmd = [str(binary), "bench", "-m", str(model), "-p", str(args.p), "-n", str(args.n), "-d", str(args.d),
           "-r", str(args.r), "-t", str(args.threads), "--json"]
    log("bench: " + " ".join(cmd))
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        log(f"bench: geniex failed (exit {proc.returncode}):\n{proc.stderr.strip()[-2000:]}")
        return {}
    out = {}
    for line in proc.stdout.splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            log(f"bench: ignoring unparsable geniex line: {line[:200]}")
            continue
        if "test" in rec and "tokens_per_second" in rec:
            out[rec["test"]] = rec
    if not out:
        log("bench: geniex printed no JSON results")
    return out


# ---------------------------------------------------------------------------------------------
# llama.cpp

def run_llamacpp(model, args):
    """Returns ({test: tokens_per_second}, info) measured with llama-cpp-python in a child
    process, so that its peak resident memory can be read: info["llamacpp_peak_rss_bytes"] is
    the child's peak RSS minus its RSS after importing Python, numpy and llama_cpp (what the
    model, its context and the runs added), comparable with GenieX's whole-process peak."""
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=_llamacpp_child, args=(str(model), args, queue))
    proc.start()
    # Poll: a child killed by a signal (llama.cpp's AMX path faults on some CPUs, see
    # bench/LOG.md) never answers, and a plain get() would wait forever.
    results, info = {}, {}
    while True:
        try:
            results, info = queue.get(timeout=1.0)
            break
        except Exception:  # queue.Empty
            if not proc.is_alive():
                try:  # answered just before it ended
                    results, info = queue.get(timeout=1.0)
                    break
                except Exception:
                    pass
                code = proc.exitcode
                how = f"signal {-code}" if code is not None and code < 0 else f"exit code {code}"
                log(f"bench: llama.cpp run failed: its process ended with {how} before answering"
                    " (llama.cpp column left empty)")
                break
    proc.join()
    return results, info


def _llamacpp_child(model, args, queue):
    try:
        queue.put(_llamacpp_measure(model, args))
    except Exception as e:
        log(f"bench: llama.cpp run failed: {e}")
        queue.put(({}, {}))


def _llamacpp_measure(model, args):
    try:
        import numpy as np
        import llama_cpp
        from llama_cpp import Llama
    except ImportError:
        log("bench: llama-cpp-python is not installed; llama.cpp column left empty")
        return {}, {}
    rss_after_imports = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

    n_ctx = max(1024, args.d + max(args.p, args.n))
    llm = Llama(model_path=str(model), n_ctx=n_ctx, n_batch=512, n_ubatch=512, n_threads=args.threads,
                n_threads_batch=args.threads, n_gpu_layers=0, logits_all=False, flash_attn=args.flash_attn,
                verbose=False)
    ctx = llm.ctx
    mem = llama_cpp.llama_get_memory(ctx)
    n_vocab = llm.n_vocab()
    rng = np.random.default_rng(1234)

    prefix = rng.integers(0, n_vocab, size=args.d).tolist()

    def clear_kv():
        # An empty cache, then the -d prefix (not timed); returns the next position.
        llama_cpp.llama_memory_clear(mem, True)
        llm.reset()
        for i in range(0, len(prefix), 512):
            decode_batch(prefix[i:i + 512], i)
        llama_cpp.llama_synchronize(ctx)
        return len(prefix)

    def decode_batch(tokens, pos0):
        # Direct llama_decode of one batch (last token's logits only), as llama-bench does.
        n = len(tokens)
        batch = llama_cpp.llama_batch_init(n, 0, 1)
        try:
            for i, t in enumerate(tokens):
                batch.token[i] = int(t)
                batch.pos[i] = pos0 + i
                batch.n_seq_id[i] = 1
                batch.seq_id[i][0] = 0
                batch.logits[i] = i == n - 1
            batch.n_tokens = n
            rc = llama_cpp.llama_decode(ctx, batch)
            if rc != 0:
                raise RuntimeError(f"llama_decode returned {rc}")
        finally:
            llama_cpp.llama_batch_free(batch)

    def pp_once(tokens):
        pos0 = clear_kv()
        t0 = time.perf_counter()
        for i in range(0, len(tokens), 512):  # n_batch 512: one batch for pp512
            decode_batch(tokens[i:i + 512], pos0 + i)
        llama_cpp.llama_synchronize(ctx)
        return len(tokens) / (time.perf_counter() - t0)

    # Prebuilt single-token batch for tg: the loop below is almost pure llama_decode.
    one = llama_cpp.llama_batch_init(1, 0, 1)
    one.n_tokens = 1
    one.n_seq_id[0] = 1
    one.seq_id[0][0] = 0
    one.logits[0] = True

    def tg_once(tokens):
        pos0 = clear_kv()
        t0 = time.perf_counter()
        for i, t in enumerate(tokens):
            one.token[0] = int(t)
            one.pos[0] = pos0 + i
            rc = llama_cpp.llama_decode(ctx, one)
            if rc != 0:
                raise RuntimeError(f"llama_decode returned {rc}")
            llama_cpp.llama_get_logits_ith(ctx, -1)  # as a generation loop would read them
        llama_cpp.llama_synchronize(ctx)
        return len(tokens) / (time.perf_counter() - t0)

    results = {}
    try:
        if args.p > 0:
            pp_once(rng.integers(0, n_vocab, size=min(args.p, 512)).tolist())  # warm-up
            runs = [pp_once(rng.integers(0, n_vocab, size=args.p).tolist()) for _ in range(args.r)]
            results[test_name("pp", args.p, args.d)] = statistics.median(runs)
            log(f"bench: llama.cpp {test_name('pp', args.p, args.d)}: " + ", ".join(f"{x:.1f}" for x in runs) + " t/s")
        if args.n > 0:
            tg_once(rng.integers(0, n_vocab, size=4).tolist())  # warm-up
            runs = [tg_once(rng.integers(0, n_vocab, size=args.n).tolist()) for _ in range(args.r)]
            results[test_name("tg", args.n, args.d)] = statistics.median(runs)
            log(f"bench: llama.cpp {test_name('tg', args.n, args.d)}: " + ", ".join(f"{x:.1f}" for x in runs) + " t/s")
    finally:
        llama_cpp.llama_batch_free(one)
        if hasattr(llm, "close"):
            llm.close()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    info = {"llama_cpp_python_version": llama_cpp.__version__, "flash_attn": args.flash_attn,
            "llamacpp_peak_rss_bytes": peak - rss_after_imports, "llamacpp_python_baseline_rss_bytes": rss_after_imports}
    return results, info


# ---------------------------------------------------------------------------------------------

def test_name(kind, n, depth):
    """The test's name as `geniex bench` (and llama-bench) print it: pp512, tg128 @ d4096."""
    return f"{kind}{n}" + (f" @ d{depth}" if depth > 0 else "")


def fmt(x):
    return "n/a" if x is None else f"{x:.1f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("models", nargs="*", help="GGUF files (default: the default model)")
    ap.add_argument("--geniex", default=str(REPO / "build" / "tools" / "geniex"), help="path of the geniex binary")
    ap.add_argument("-p", type=int, default=512, help="prompt tokens for pp (default 512)")
    ap.add_argument("-n", type=int, default=128, help="generated tokens for tg (default 128)")
    ap.add_argument("-d", type=int, default=0,
                    help="context depth: tokens already in the KV cache before each test (default 0)")
    ap.add_argument("-r", type=int, default=3, help="repetitions; the median is reported (default 3)")
    ap.add_argument("-t", "--threads", type=int, default=2, help="threads for both (default 2)")
    ap.add_argument("--rounds", type=int, default=1,
                    help="alternate GenieX and llama.cpp this many times per model (each with -r repetitions) "
                         "and report the medians over rounds, so that a machine whose speed drifts (a shared VM) "
                         "skews both columns alike (default 1)")
    ap.add_argument("--flash-attn", action="store_true", help="llama.cpp with flash attention (default off)")
    ap.add_argument("--json-out", help="also write JSON lines here")
    ap.add_argument("--make-random", action="store_true",
                    help="create the random Llama-3.2-1B-shape Q4_0 file in the cache and add it to the models")
    ap.add_argument("--skip-geniex", action="store_true")
    ap.add_argument("--skip-llamacpp", action="store_true")
    args = ap.parse_args()
    if args.d < 0 or args.p < 0 or args.n < 0:
        sys.exit("bench: -p, -n and -d take counts >= 0")

    models = [Path(m) for m in args.models]
    if args.make_random:
        rnd = make_random_model()
        if rnd not in models:
            models.append(rnd)
    if not args.models:
        models.insert(0, DEFAULT_MODEL)
    for m in models:
        if not m.is_file():
            sys.exit(f"bench: no model file {m} (scripts/fetch_model.sh fetches the default one)")

    load_before = os.getloadavg()[0]
    if load_before > (os.cpu_count() or 1) * 0.5:
        log(f"bench: WARNING: load average {load_before:.1f} on {os.cpu_count()} CPUs; other work skews both columns "
            "(llama.cpp's OpenMP threads suffer most from oversubscription)")
    rows = []
    rounds = max(1, args.rounds)
    for model in models:
        gx_rounds, lc_rounds, info = [], [], {}
        for k in range(rounds):
            if rounds > 1:
                log(f"bench: {model.name}: round {k + 1} of {rounds}")
            gx_rounds.append({} if args.skip_geniex else run_geniex(args.geniex, model, args))
            lc, info_k = ({}, {}) if args.skip_llamacpp else run_llamacpp(model, args)
            lc_rounds.append(lc)
            if info_k:
                peak = max(info.get("llamacpp_peak_rss_bytes", 0), info_k.get("llamacpp_peak_rss_bytes", 0))
                info = {**info_k, "llamacpp_peak_rss_bytes": peak}
        for test in [test_name("pp", args.p, args.d), test_name("tg", args.n, args.d)]:
            gs = [r[test]["tokens_per_second"] for r in gx_rounds if test in r]
            cs = [r[test] for r in lc_rounds if test in r]
            g = statistics.median(gs) if gs else None
            c = statistics.median(cs) if cs else None
            # The GenieX record of the last round for the roof and memory fields; peak RSS the
            # highest of all rounds.
            gx = next((r for r in reversed(gx_rounds) if test in r), {})
            gx_peak = max((r[test].get("peak_rss_bytes") or 0 for r in gx_rounds if test in r), default=0) or None
            paired = [a / b for a, b in zip([r.get(test, {}).get("tokens_per_second") for r in gx_rounds],
                                            [r.get(test) for r in lc_rounds]) if a is not None and b]
            rows.append({
                "model": model.name, "test": test, "threads": args.threads, "repetitions": args.r,
                "rounds": rounds, "geniex_tps": g, "llamacpp_tps": c,
                "ratio": (g / c) if (g is not None and c) else None,
                "round_ratios": [round(x, 3) for x in paired],
                "geniex_peak_rss_bytes": gx_peak,
                "roof_tps": gx.get(test, {}).get("roof_tokens_per_second"),
                "read_bandwidth_bytes_per_s": gx.get(test, {}).get("read_bandwidth_bytes_per_s"),
                "bytes_per_token": gx.get(test, {}).get("bytes_per_token"),
                "load_avg_1m": round(os.getloadavg()[0], 2),
                **info,
            })

    if rounds > 1:
        print(f"{args.threads} threads, median of {args.r} per round, median of {rounds} alternating rounds; "
              "ratio = GenieX / llama.cpp (range: the rounds' own ratios)\n")
        print("| model | test | GenieX t/s | llama.cpp t/s | ratio | range |")
        print("|---|---|---:|---:|---:|---|")
    else:
        print(f"{args.threads} threads, median of {args.r}; ratio = GenieX / llama.cpp\n")
        print("| model | test | GenieX t/s | llama.cpp t/s | ratio |")
        print("|---|---|---:|---:|---:|")
    for r in rows:
        ratio = "n/a" if r["ratio"] is None else f"{r['ratio']:.2f}"
        line = f"| {r['model']} | {r['test']} | {fmt(r['geniex_tps'])} | {fmt(r['llamacpp_tps'])} | {ratio} |"
        if rounds > 1:
            rr = r["round_ratios"]
            line += f" {min(rr):.2f}-{max(rr):.2f} |" if rr else " n/a |"
        print(line)
    mems = [r for r in rows if r.get("geniex_peak_rss_bytes") and r.get("llamacpp_peak_rss_bytes")]
    if mems:
        print("\npeak resident memory after the tests of each model (GenieX: whole process; llama.cpp: its child "
              "process minus Python's own RSS after imports)\n")
        print("| model | after test | GenieX MiB | llama.cpp MiB | ratio |")
        print("|---|---|---:|---:|---:|")
        for r in mems:
            g, c = r["geniex_peak_rss_bytes"] / 2**20, r["llamacpp_peak_rss_bytes"] / 2**20
            print(f"| {r['model']} | {r['test']} | {g:.0f} | {c:.0f} | {g / c:.2f} |")
    roofs = [r for r in rows if r.get("roof_tps")]
    if roofs:
        print("\ndecode roof = read bandwidth (geniex bench, same threads) / weight bytes read per token\n")
        print("| model | test | bandwidth GB/s | MiB per token | roof t/s | GenieX % of roof | llama.cpp % of roof |")
        print("|---|---|---:|---:|---:|---:|---:|")
        for r in roofs:
            g = "n/a" if r["geniex_tps"] is None else f"{100 * r['geniex_tps'] / r['roof_tps']:.0f}%"
            c = "n/a" if r["llamacpp_tps"] is None else f"{100 * r['llamacpp_tps'] / r['roof_tps']:.0f}%"
            print(f"| {r['model']} | {r['test']} | {r['read_bandwidth_bytes_per_s'] / 1e9:.1f} | "
                  f"{r['bytes_per_token'] / 2**20:.1f} | {r['roof_tps']:.1f} | {g} | {c} |")
    if args.json_out:
        with open(args.json_out, "w") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")
        log(f"bench: wrote {args.json_out}")


if __name__ == "__main__":
    main()
