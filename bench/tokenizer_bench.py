#!/usr/bin/env python3
"""Tokenizer encode throughput: GenieX against Hugging Face `tokenizers`, single thread.

For each family, on the same vocabulary, in the same run:
  corpus  the 2,123 strings of tests/data/tokenizer/corpus.jsonl, each encoded on its own
  big     one text of about --big-mb MB: the corpus strings joined by newlines, repeated
GenieX: `geniex tokenize --tokenizer FILE --bench RUNS` (encode in-process, timed in C++, JSON
out). HF: `tokenizers` in this process with RAYON_NUM_THREADS=1 and TOKENIZERS_PARALLELISM=false
(set before the import), measured three ways: encode() per string, encode_batch(), and
encode_batch_fast() (no offsets). Special tokens: none added (GenieX --no-special, HF
add_special_tokens=False); special-token literals in the text are parsed by both, as HF does for
added tokens. Each number is the median of --runs timed passes, by process CPU time (default:
the 2-core development VM is shared, and CPU time of a single-threaded loop hardly changes with
load) or wall time (--clock wall); both are recorded in --json. Both sides keep their word caches
between passes (GenieX's BPE cache, HF's BPE cache), so medians are warm; GenieX's first (cold)
pass is reported too. MB = 10^6 bytes of UTF-8 input.

Reference tokenizers come from scripts/tokenizer/hf_reference_bpe.py and hf_reference_spm.py
(build(family, tokdir)); SmolLM2's is built from its GGUF the way
scripts/tokenizer/make_tokenizer_fixture.py does. Families whose files are missing, or that this
GenieX build cannot load (e.g. SentencePiece before it lands), are reported and skipped.

Usage:
  python3 bench/tokenizer_bench.py [--geniex build/tools/geniex] [--runs 5] [--families smollm2,llama3]
                                   [--big-mb 2] [--clock cpu|wall] [--log bench/LOG.md] [--json out.json]
"""
import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

os.environ["RAYON_NUM_THREADS"] = "1"
os.environ["TOKENIZERS_PARALLELISM"] = "false"

import tokenizers  # noqa: E402  (after the thread settings)

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.join(ROOT, "scripts", "tokenizer"))
CORPUS = os.path.join(ROOT, "tests", "data", "tokenizer", "corpus.jsonl")
TOKDIR = os.environ.get("GENIEX_TOKENIZER_DIR") or os.path.expanduser("~/.cache/geniex/tokenizers")
MODEL = os.environ.get("GENIEX_MODEL") or os.path.expanduser("~/.cache/geniex/models/SmolLM2-135M-Instruct.Q4_1.gguf")

# family -> (file GenieX loads, how the HF reference is built)
FAMILIES = {
    "smollm2": (MODEL, "smollm2"),
    "llama3": (os.path.join(TOKDIR, "vocab-llama-bpe.gguf"), "bpe:llama3"),
    "qwen2": (os.path.join(TOKDIR, "vocab-qwen2.gguf"), "bpe:qwen2gguf"),
    "gpt2": (os.path.join(TOKDIR, "vocab-gpt-2.gguf"), "bpe:gpt2"),
    "llama2": (os.path.join(TOKDIR, "vocab-llama-spm.gguf"), "spm:llama2"),
    "mistral_v3": (os.path.join(TOKDIR, "mistral-v3.model"), "spm:mistral_v3"),
    "gemma3": (os.path.join(TOKDIR, "gemma-3-270m-q4_k_m.gguf"), "spm:gemma3"),
}
DEFAULT_FAMILIES = "smollm2,llama3,qwen2,llama2,mistral_v3,gemma3"

LLAMA3_PAT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
              r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def load_avg():
    try:
        return os.getloadavg()[0]
    except OSError:
        return float("nan")


def build_smollm2(path):
    import make_tokenizer_fixture as fx
    return fx.build_with_tokenizers(fx.read_gguf_tokenizer(path))


def build_llama3_fallback(path):
    """Llama 3 reference from vocab-llama-bpe.gguf, for when hf_reference_bpe.py is absent."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers
    import make_tokenizer_fixture as fx
    d = fx.read_gguf_tokenizer(path)
    types = d["token_type"] or [1] * len(d["tokens"])
    vocab = {t: i for i, (t, ty) in enumerate(zip(d["tokens"], types)) if ty not in (3, 4)}
    merges = [tuple(m.split(" ", 1)) for m in d["merges"]]
    tk = Tokenizer(models.BPE(vocab=vocab, merges=merges, ignore_merges=True))
    tk.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_PAT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
    ])
    tk.decoder = decoders.ByteLevel()
    for i, (t, ty) in enumerate(zip(d["tokens"], types)):
        if ty in (3, 4):
            tk.add_tokens([AddedToken(t, special=ty == 3, normalized=False)])
    return tk


def build_reference(family, how, path):
    if how == "smollm2":
        return build_smollm2(path), "make_tokenizer_fixture.build_with_tokenizers"
    kind, name = how.split(":")
    try:
        mod = __import__("hf_reference_bpe" if kind == "bpe" else "hf_reference_spm")
    except ImportError:
        if family == "llama3":
            return build_llama3_fallback(path), "built here (hf_reference_bpe.py absent)"
        raise
    return mod.build(name, TOKDIR), f"{mod.__name__}.build({name!r})"


def time_runs(fn, runs):
    """{"wall": [...], "cpu": [...]} seconds per run; cpu is the process CPU time (all threads)."""
    out = {"wall": [], "cpu": []}
    for _ in range(runs):
        t0, c0 = time.perf_counter(), time.process_time()
        fn()
        out["cpu"].append(time.process_time() - c0)
        out["wall"].append(time.perf_counter() - t0)
    return out


def hf_measure(tk, texts, big, runs):
    res = {}
    res["corpus_encode"] = time_runs(lambda: [tk.encode(s, add_special_tokens=False) for s in texts], runs)
    res["corpus_batch"] = time_runs(lambda: tk.encode_batch(texts, add_special_tokens=False), runs)
    if hasattr(tk, "encode_batch_fast"):
        res["corpus_batch_fast"] = time_runs(lambda: tk.encode_batch_fast(texts, add_special_tokens=False), runs)
    res["big_encode"] = time_runs(lambda: tk.encode(big, add_special_tokens=False), runs)
    tokens = {"corpus": sum(len(e.ids) for e in tk.encode_batch(texts, add_special_tokens=False)),
              "big": len(tk.encode(big, add_special_tokens=False).ids)}
    return res, tokens


def geniex_measure(binary, path, input_file, unit, runs):
    cmd = [binary, "tokenize", "--tokenizer", path, "--no-special", "--bench", str(runs), "-f", input_file,
           "--bench-unit", unit]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(p.stderr.strip().splitlines()[-1] if p.stderr.strip() else f"exit {p.returncode}")
    return json.loads(p.stdout)


def mbps(nbytes, seconds):
    return nbytes / seconds / 1e6 if seconds > 0 else float("nan")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--geniex", default=os.path.join(ROOT, "build", "tools", "geniex"))
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--families", default=DEFAULT_FAMILIES, help=f"comma list of {', '.join(FAMILIES)}")
    ap.add_argument("--big-mb", type=float, default=2.0, help="size of the big text in MB")
    ap.add_argument("--clock", choices=("cpu", "wall"), default="cpu",
                    help="rates from process CPU time (default; robust on a loaded machine) or wall time")
    ap.add_argument("--log", help="append the table as a dated section to this markdown file")
    ap.add_argument("--json", help="write all measurements to this file")
    args = ap.parse_args()

    with open(CORPUS, encoding="utf-8") as f:
        texts = [json.loads(line)["text"] for line in f if line.strip()]
    corpus_bytes = sum(len(s.encode("utf-8")) for s in texts)
    joined = "\n".join(texts) + "\n"
    reps = max(1, int(args.big_mb * 1e6 / len(joined.encode("utf-8")) + 0.5))
    big = joined * reps
    big_bytes = len(big.encode("utf-8"))

    tmp = tempfile.mkdtemp(prefix="geniex_tokbench_")
    big_file = os.path.join(tmp, "big.txt")
    with open(big_file, "w", encoding="utf-8", newline="") as f:
        f.write(big)

    print(f"tokenizers {tokenizers.__version__} (RAYON_NUM_THREADS=1), geniex {args.geniex}, runs {args.runs}, "
          f"{args.clock} time")
    print(f"corpus: {len(texts)} strings, {corpus_bytes} bytes; big: {reps} x corpus = {big_bytes} bytes")

    rows, skipped, records = [], [], []
    for family in [f.strip() for f in args.families.split(",") if f.strip()]:
        if family not in FAMILIES:
            sys.exit(f"unknown family {family!r} (known: {', '.join(FAMILIES)})")
        path, how = FAMILIES[family]
        if not os.path.exists(path):
            skipped.append((family, f"{path} not found"))
            continue
        try:
            tk, route = build_reference(family, how, path)
        except Exception as e:  # noqa: BLE001 - report and go on
            skipped.append((family, f"HF reference failed: {type(e).__name__}: {str(e)[:100]}"))
            continue
        load_before = load_avg()
        try:
            gx_corpus = geniex_measure(args.geniex, path, CORPUS, "jsonl", args.runs)
            gx_big = geniex_measure(args.geniex, path, big_file, "all", args.runs)
        except RuntimeError as e:
            skipped.append((family, f"geniex: {e}"))
            continue
        hf, hf_tokens = hf_measure(tk, texts, big, args.runs)
        load_after = load_avg()
        med = {k: statistics.median(v[args.clock]) for k, v in hf.items()}
        gx_key, gx_first = ("median_cpu_s", gx_corpus["cpu_seconds"][0]) if args.clock == "cpu" else (
            "median_s", gx_corpus["first_s"])
        rec = {"family": family, "file": path, "reference": route, "load": [load_before, load_after],
               "geniex_corpus": gx_corpus, "geniex_big": gx_big, "hf_seconds": hf, "hf_tokens": hf_tokens}
        records.append(rec)
        gx_c, gx_b = mbps(corpus_bytes, gx_corpus[gx_key]), mbps(big_bytes, gx_big[gx_key])
        hf_c, hf_cb = mbps(corpus_bytes, med["corpus_encode"]), mbps(corpus_bytes, med["corpus_batch"])
        hf_cf = mbps(corpus_bytes, med["corpus_batch_fast"]) if "corpus_batch_fast" in med else float("nan")
        hf_b = mbps(big_bytes, med["big_encode"])
        same = "yes" if (gx_corpus["tokens"] == hf_tokens["corpus"] and gx_big["tokens"] == hf_tokens["big"]) else (
            f"no ({gx_corpus['tokens']}/{hf_tokens['corpus']}, {gx_big['tokens']}/{hf_tokens['big']})")
        rows.append((family, gx_c, mbps(corpus_bytes, gx_first), hf_c, hf_cb, hf_cf, gx_c / hf_c,
                     gx_c / max(hf_cb, hf_cf if hf_cf == hf_cf else 0), gx_b, hf_b, gx_b / hf_b, same,
                     f"{load_before:.1f}/{load_after:.1f}"))
        print(f"{family}: done (load {load_before:.1f} -> {load_after:.1f})", flush=True)

    head = ("| family | GenieX corpus MB/s (cold) | HF encode | HF encode_batch | HF batch_fast | ratio vs encode "
            "| ratio vs best batch | GenieX big MB/s | HF big | ratio big | same token counts | load 1m |")
    sep = "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|"
    lines = [head, sep]
    for r in rows:
        lines.append(f"| {r[0]} | {r[1]:.2f} ({r[2]:.2f}) | {r[3]:.2f} | {r[4]:.2f} | {r[5]:.2f} | {r[6]:.2f} | "
                     f"{r[7]:.2f} | {r[8]:.2f} | {r[9]:.2f} | {r[10]:.2f} | {r[11]} | {r[12]} |")
    table = "\n".join(lines)
    print()
    print(table)
    for fam, why in skipped:
        print(f"skipped {fam}: {why}")

    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"records": records, "skipped": skipped}, f, indent=1)
    if args.log:
        stamp = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
        with open(args.log, "a", encoding="utf-8") as f:
            f.write(f"\n## {stamp}: tokenizer encode throughput, GenieX vs HF tokenizers "
                    f"{tokenizers.__version__} (bench/tokenizer_bench.py)\n\n")
            f.write(f"Single thread (HF: RAYON_NUM_THREADS=1, TOKENIZERS_PARALLELISM=false), medians of "
                    f"{args.runs} warm passes timed by {args.clock} time, MB/s of UTF-8 input; corpus = {len(texts)} strings "
                    f"({corpus_bytes} bytes) encoded one by one, big = one {big_bytes / 1e6:.1f} MB text. "
                    f"Ratio = GenieX / HF. Load average (1 min) before/after each family on the 2-core VM.\n\n")
            f.write(table + "\n")
            for fam, why in skipped:
                f.write(f"\n- {fam}: not measured ({why})")
            if skipped:
                f.write("\n")
        print(f"appended to {args.log}")


if __name__ == "__main__":
    main()
