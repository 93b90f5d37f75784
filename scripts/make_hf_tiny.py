#!/usr/bin/env python3
"""Tiny random-weight Hugging Face checkpoints and their reference logits (transformers, float32).

What it writes (tests/data/hf_tiny/):
  <name>/            what PreTrainedModel.save_pretrained writes (config.json, generation_config.json,
                     model.safetensors, or model-0000K-of-0000N.safetensors + model.safetensors.index.json
                     for the sharded one) plus the tokenizer (tokenizer.json, tokenizer_config.json with a
                     ChatML-like chat_template), the same tokenizer in every folder
  refs.json          reference logits, computed by transformers with attn_implementation="eager" in float32
                     from the model reloaded from the folder (bf16/f16 weights upcast exactly), so the
                     references describe the files on disk

Models (hidden 64, intermediate 128, 4 heads, 2 KV heads, head_dim 16, vocab 512, 2 layers unless said):
  llama31  LlamaForCausalLM, untied, rope llama3 scaling (theta 500000, factor 8, low 1, high 4,
           original context 64 so that the low, medium and high frequency bands all occur), float32
  smollm2  LlamaForCausalLM, tied embeddings, theta 100000, bfloat16
  mistral  MistralForCausalLM, untied, sliding_window 24, float16, sharded into 3 files with an index
  qwen2    Qwen2ForCausalLM, q/k/v biases (random, non-zero), tied like Qwen2.5-0.5B, bfloat16
  qwen3    Qwen3ForCausalLM, q_norm/k_norm, explicit head_dim 16, tied like Qwen3-0.6B, float32
  gemma3   Gemma3ForCausalLM (Gemma3TextConfig), 3 layers (sliding, sliding, full), sliding_window 16,
           rope theta 1e6 global / 10000 local, query_pre_attn_scalar 16, gelu_pytorch_tanh, bfloat16

refs.json:
  {"generator": "scripts/make_hf_tiny.py", "transformers_version": str, "torch_version": str,
   "models": {NAME: {"dtype_on_disk": "float32"|"bfloat16"|"float16", "sliding_window": int|null,
                     "prompts": [{"name": "short"|"long", "tokens": [ids], "positions": [p, ...],
                                  "logits": [[vocab floats] per listed position]}],
                     "greedy": [16 ids: argmax continuation of the short prompt, prompt excluded]}}}
  "short" is 8 ids (all 8 positions listed), "long" is 100 ids (BOS then a fixed text), positions
  0 15 16 23 24 31 32 50 75 99. Floats are rounded to 6 significant digits.

The script also asserts that transformers really applies the sliding window (mistral, gemma3): the
logits at position W-1 equal those of the same weights with the window disabled and those at W differ,
i.e. query i attends key j iff 0 <= i - j < W.

Run:     pip install torch transformers tokenizers safetensors   (written with transformers 5.24, CPU torch)
         python3 scripts/make_hf_tiny.py
Output is deterministic (fixed seeds, one thread): two runs give byte-identical files.
The C++ test suite only reads the committed files; it never needs this script.
"""
import json
import os
import shutil
import sys

try:
    import tokenizers
    import torch
    import transformers
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import (AutoModelForCausalLM, AutoTokenizer, Gemma3ForCausalLM, Gemma3TextConfig,
                              LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM, Qwen2Config,
                              Qwen2ForCausalLM, Qwen3Config, Qwen3ForCausalLM)
except ImportError as e:
    sys.exit(f"make_hf_tiny: {e} (pip install torch transformers tokenizers safetensors)")

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT_DIR = os.path.join(REPO, "tests", "data", "hf_tiny")
TRAIN_TEXT = "/usr/share/common-licenses/GPL-3"

VOCAB = 512
SPECIALS = ["<|pad|>", "<|bos|>", "<|eos|>", "<|im_start|>", "<|im_end|>"]  # ids 0..4
PAD_ID, BOS_ID, EOS_ID, IM_END_ID = 0, 1, 2, 4
CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

SHORT_TEXT = "The quick brown fox jumps over the lazy dog"
LONG_TEXT = (
    "Once upon a time, in a quiet village between two rivers, there lived a clockmaker who "
    "repaired every clock in the valley. Each morning she opened her shop, wound the great "
    "brass pendulum, and listened to the ticking of a hundred small machines. Travellers "
    "brought her broken watches, and children came to watch the gears turn. One winter a "
    "stranger arrived with a clock that ran backwards, and nobody in the village could say "
    "where it had been made or why it kept such careful time."
)
LONG_POSITIONS = [0, 15, 16, 23, 24, 31, 32, 50, 75, 99]
GREEDY_STEPS = 16
MIN_MARGIN = 0.01  # logits; float32 reimplementations differ by ~1e-5
MIN_DISTINCT = 5

COMMON = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_attention_heads=4,
              num_key_value_heads=2, head_dim=16, num_hidden_layers=2, max_position_embeddings=256,
              bos_token_id=BOS_ID, eos_token_id=EOS_ID, pad_token_id=PAD_ID)

# name -> (model class, config class, config kwargs, dtype on disk, max_shard_size or None)
MODELS = {
    "llama31": (LlamaForCausalLM, LlamaConfig, dict(
        COMMON, rms_norm_eps=1e-5, tie_word_embeddings=False,
        rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                         "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                         "original_max_position_embeddings": 64}),
        torch.float32, None),
    "smollm2": (LlamaForCausalLM, LlamaConfig, dict(
        COMMON, rms_norm_eps=1e-5, tie_word_embeddings=True,
        rope_parameters={"rope_type": "default", "rope_theta": 100000.0}),
        torch.bfloat16, None),
    "mistral": (MistralForCausalLM, MistralConfig, dict(
        COMMON, rms_norm_eps=1e-5, tie_word_embeddings=False, sliding_window=24,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0}),
        torch.float16, "120KB"),
    "qwen2": (Qwen2ForCausalLM, Qwen2Config, dict(
        {k: v for k, v in COMMON.items() if k != "head_dim"}, rms_norm_eps=1e-6, tie_word_embeddings=True,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}),
        torch.bfloat16, None),
    "qwen3": (Qwen3ForCausalLM, Qwen3Config, dict(
        COMMON, rms_norm_eps=1e-6, tie_word_embeddings=True,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}),
        torch.float32, None),
    "gemma3": (Gemma3ForCausalLM, Gemma3TextConfig, dict(
        COMMON, num_hidden_layers=3, rms_norm_eps=1e-6, tie_word_embeddings=True,
        layer_types=["sliding_attention", "sliding_attention", "full_attention"], sliding_window=16,
        rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": 1000000.0},
                         "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}},
        query_pre_attn_scalar=16, hidden_activation="gelu_pytorch_tanh",
        final_logit_softcapping=None, attn_logit_softcapping=None),
        torch.bfloat16, None),
}
DTYPE_NAMES = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}


def build_tokenizer():
    with open(TRAIN_TEXT, encoding="utf-8") as f:
        text = f.read()
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, min_frequency=2, special_tokens=SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator([line for line in text.splitlines() if line.strip()], trainer=trainer)
    assert tok.get_vocab_size() == VOCAB, tok.get_vocab_size()
    for i, s in enumerate(SPECIALS):
        assert tok.token_to_id(s) == i, (s, tok.token_to_id(s))
    return tok


def tokenizer_config():
    added = {str(i): {"content": s, "lstrip": False, "normalized": False, "rstrip": False,
                      "single_word": False, "special": True} for i, s in enumerate(SPECIALS)}
    return {"added_tokens_decoder": added, "bos_token": SPECIALS[BOS_ID], "eos_token": SPECIALS[EOS_ID],
            "pad_token": SPECIALS[PAD_ID], "add_bos_token": False, "add_eos_token": False,
            "clean_up_tokenization_spaces": False, "model_max_length": 4096,
            "tokenizer_class": "PreTrainedTokenizerFast", "chat_template": CHAT_TEMPLATE}


def write_tokenizer(tok, folder):
    tok.save(os.path.join(folder, "tokenizer.json"), pretty=True)
    with open(os.path.join(folder, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(tokenizer_config(), f, indent=2, sort_keys=True)
        f.write("\n")


def init_weights(model, family, seed):
    """Deterministic, well-conditioned weights: N(0, 0.1) for matrices (0.15 for q/k), N(0, 0.1) for
    biases, 1+U(-0.1,0.1) for norm gains; the order is that of the sorted parameter names."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            if name.endswith("norm.weight"):
                u = torch.rand(p.shape, generator=gen) * 0.2 - 0.1
                if family != "gemma3":
                    p.copy_(1.0 + u)
                elif name == "model.norm.weight":
                    p.copy_(1.0 + u)  # gain ~2 on the final norm: compensates the small tied embedding
                else:
                    p.copy_(u)  # Gemma's RMSNorm multiplies by (1 + weight): store the zero-centred part
            elif name == "model.embed_tokens.weight" and family == "gemma3":
                # scaled by sqrt(hidden) = 8 at the input; a smaller table keeps the token's own
                # embedding from dominating the tied output (else greedy decoding repeats one token)
                p.copy_(torch.randn(p.shape, generator=gen) * 0.05)
            elif name.endswith(".bias"):
                p.copy_(torch.randn(p.shape, generator=gen) * 0.1)
            elif name.endswith(("q_proj.weight", "k_proj.weight")):
                p.copy_(torch.randn(p.shape, generator=gen) * 0.15)
            else:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.1)


def logits_of(model, ids):
    with torch.no_grad():
        out = model(input_ids=torch.tensor([ids]), use_cache=False)
    return out.logits[0].float()


def greedy(model, ids, steps):
    seq, new, margins = list(ids), [], []
    for _ in range(steps):
        last = logits_of(model, seq)[-1]
        top = torch.topk(last, 2)
        margins.append(float(top.values[0] - top.values[1]))
        nxt = int(top.indices[0])
        seq.append(nxt)
        new.append(nxt)
    return new, min(margins)


def round6(x):
    return [float(f"{v:.6g}") for v in x]


def check_window(name, model, window, ids):
    """Same weights, window disabled: positions < W identical, position W different."""
    cfg = model.config.__class__.from_dict(model.config.to_dict())
    cfg.sliding_window = None if name == "mistral" else 100000
    cfg._attn_implementation = "eager"
    wide = model.__class__(cfg).eval()
    missing, unexpected = wide.load_state_dict(model.state_dict(), strict=False)
    assert not unexpected and all("inv_freq" in m or "embed_scale" in m for m in missing), (missing, unexpected)
    a, b = logits_of(model, ids), logits_of(wide, ids)
    before = float((a[:window] - b[:window]).abs().max())
    at = float((a[window] - b[window]).abs().max())
    last = float((a[-1] - b[-1]).abs().max())
    assert before < 1e-5, f"{name}: logits before the window edge changed by {before}"
    assert at > 1e-3 and last > 1e-3, f"{name}: sliding window not applied ({at}, {last})"
    print(f"  window {window}: max |diff| positions <{window}: {before:.2e}, at {window}: {at:.3f}, "
          f"at {len(ids) - 1}: {last:.3f}")


def save_model(name, folder, tok, seed):
    cls, cfg_cls, kwargs, dtype, shard = MODELS[name]
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder)
    torch.manual_seed(seed)
    cfg = cfg_cls(**kwargs)
    cfg._attn_implementation = "eager"
    model = cls(cfg).eval()
    init_weights(model, name, seed)
    model.to(dtype)
    if shard:
        model.save_pretrained(folder, max_shard_size=shard)
    else:
        model.save_pretrained(folder)
    write_tokenizer(tok, folder)


def load_ref(name, folder):
    ref = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, attn_implementation="eager").eval()
    assert isinstance(ref, MODELS[name][0]), type(ref)
    assert all(p.dtype == torch.float32 for p in ref.parameters())
    return ref


def make_model(name, tok, prompts):
    """Saves the model, reloads it in float32 and computes its references. Seeds whose greedy decode
    has a near tie (top-1/top-2 logit margin under MIN_MARGIN) or that keeps repeating one token (fewer
    than MIN_DISTINCT different ids) or that emits <|eos|>/<|im_end|> are skipped, deterministically."""
    folder = os.path.join(OUT_DIR, name)
    base = sum(map(ord, name)) * 7919
    for attempt in range(20):
        save_model(name, folder, tok, base + attempt)
        ref = load_ref(name, folder)
        new, margin = greedy(ref, prompts["short"][0], GREEDY_STEPS)
        if margin >= MIN_MARGIN and len(set(new)) >= MIN_DISTINCT and not {EOS_ID, IM_END_ID} & set(new):
            break
        print(f"  seed {base + attempt}: greedy {new} has a near tie ({margin:.5f}), repeats or ends, next seed")
    else:
        sys.exit(f"make_hf_tiny: {name}: no seed with a usable greedy decode")
    print(f"  seed {base + attempt}; greedy {new} (smallest top-1/top-2 margin {margin:.4f})")

    if name == "qwen2":
        for layer in ref.model.layers:
            for proj in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj):
                assert float(proj.bias.detach().abs().min()) > 0
    window = None
    if name in ("mistral", "gemma3"):
        window = ref.config.sliding_window
        check_window(name, ref, window, prompts["long"][0])

    entry = {"dtype_on_disk": DTYPE_NAMES[MODELS[name][3]], "sliding_window": window, "prompts": []}
    for pname in ("short", "long"):
        ids, positions = prompts[pname]
        lg = logits_of(ref, ids)
        assert torch.isfinite(lg).all()
        sel = lg[positions]
        std = float(sel.std(dim=-1).min())
        distinct = len(set(int(i) for i in sel.argmax(dim=-1)))
        assert std > 0.2 and distinct >= 3, f"{name}/{pname}: degenerate logits (std {std}, {distinct} argmax)"
        entry["prompts"].append({"name": pname, "tokens": ids, "positions": positions,
                                 "logits": [round6(row.tolist()) for row in sel]})
        print(f"  {pname}: min logit std {std:.3f}, {distinct} distinct argmax over {len(positions)} positions")
    entry["greedy"] = new
    return entry


def make_prompts(tok):
    short = [BOS_ID] + tok.encode(SHORT_TEXT).ids
    assert len(short) >= 8, len(short)
    long_ids = [BOS_ID] + tok.encode(LONG_TEXT).ids
    assert len(long_ids) >= 100, len(long_ids)
    return {"short": (short[:8], list(range(8))), "long": (long_ids[:100], LONG_POSITIONS)}


def check_hf_tokenizer(folder, tok, prompts):
    hf = AutoTokenizer.from_pretrained(folder)
    assert len(hf) == VOCAB and hf.bos_token_id == BOS_ID and hf.eos_token_id == EOS_ID
    assert hf.encode(LONG_TEXT, add_special_tokens=False) == tok.encode(LONG_TEXT).ids
    assert hf.encode(LONG_TEXT) == tok.encode(LONG_TEXT).ids, "the tokenizer must not add BOS by itself"
    assert hf.decode(prompts["long"][0][1:]) == tok.decode(prompts["long"][0][1:])
    chat = hf.apply_chat_template([{"role": "user", "content": "Hi"}], tokenize=False, add_generation_prompt=True)
    assert chat == "<|bos|><|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n", repr(chat)


def main():
    torch.set_num_threads(1)
    transformers.utils.logging.disable_progress_bar()
    torch.use_deterministic_algorithms(True)
    os.makedirs(OUT_DIR, exist_ok=True)
    tok = build_tokenizer()
    prompts = make_prompts(tok)
    refs = {"generator": "scripts/make_hf_tiny.py", "transformers_version": transformers.__version__,
            "torch_version": torch.__version__.split("+")[0], "models": {}}
    for name in MODELS:
        print(name)
        refs["models"][name] = make_model(name, tok, prompts)
    check_hf_tokenizer(os.path.join(OUT_DIR, "llama31"), tok, prompts)
    with open(os.path.join(OUT_DIR, "refs.json"), "w", encoding="utf-8") as f:
        json.dump(refs, f, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {OUT_DIR} (tokenizers {tokenizers.__version__})")


if __name__ == "__main__":
    main()
