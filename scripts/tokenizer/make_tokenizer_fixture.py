#!/usr/bin/env python3
"""Builds the Hugging Face reference outputs for the tokenizer tests.

Writes, from the SmolLM2 GGUF:
  tests/data/tokenizer/smollm2_hf_ids.jsonl   {"text": ..., "ids": [...]} per corpus line
  tests/data/tokenizer/chat_templates.json    expected chat-template renderings

Reference tokenizer. The preferred route is transformers' own GGUF loader
(AutoTokenizer.from_pretrained(dir, gguf_file=name)). In transformers 5.x that loader imports
torch, and this script must run without torch, so when it fails we build the HF `tokenizers`
Tokenizer directly from the GGUF vocabulary and merges with the pre-tokenizer of SmolLM2's own
tokenizer.json: Sequence[Digits(individual_digits=True), ByteLevel(add_prefix_space=False,
use_regex=True)], a ByteLevel decoder, and the GGUF's control tokens (token_type 3) added as
special tokens (user-defined tokens, type 4, as plain added tokens), so special-token literals
in the text are always parsed, as HF does. The script prints which route it took.

It also reports how transformers' torch-free GGUF tokenizer mapping
(transformers.integrations.gguf.gguf_tokenizer_mapping, when importable) would differ: it has no
split rule for tokenizer.ggml.pre = "smollm" and so falls back to the plain GPT-2 pre-tokenizer,
which does not split digits one by one.

Chat templates are rendered with transformers.utils.chat_template_utils.render_jinja_template,
the function apply_chat_template(..., tokenize=False) uses (falls back to jinja2 with
trim_blocks/lstrip_blocks when that import fails).

Usage: python3 scripts/tokenizer/make_tokenizer_fixture.py [model.gguf]
       (default: $GENIEX_MODEL or ~/.cache/geniex/models/SmolLM2-135M-Instruct.Q4_1.gguf)
"""
import json
import os
import sys

import gguf  # pip install gguf

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.normpath(os.path.join(HERE, "..", "..", "tests", "data", "tokenizer"))
DEFAULT_MODEL = os.environ.get(
    "GENIEX_MODEL", os.path.expanduser("~/.cache/geniex/models/SmolLM2-135M-Instruct.Q4_1.gguf"))


def read_gguf_tokenizer(path):
    r = gguf.GGUFReader(path)

    def field(key):
        f = r.fields.get(key)
        if f is None:
            return None
        if f.types[0] == gguf.GGUFValueType.ARRAY:
            if f.types[1] == gguf.GGUFValueType.STRING:
                return [bytes(f.parts[i]).decode("utf-8") for i in f.data]
            return [f.parts[i].tolist()[0] for i in f.data]
        if f.types[0] == gguf.GGUFValueType.STRING:
            return bytes(f.parts[f.data[0]]).decode("utf-8")
        return f.parts[f.data[0]].tolist()[0]

    d = {
        "architecture": field("general.architecture"),
        "tokenizer_type": field("tokenizer.ggml.model"),
        "pre_tokenizer_type": field("tokenizer.ggml.pre"),
        "tokens": field("tokenizer.ggml.tokens"),
        "token_type": field("tokenizer.ggml.token_type"),
        "merges": field("tokenizer.ggml.merges"),
        "bos_token_id": field("tokenizer.ggml.bos_token_id"),
        "eos_token_id": field("tokenizer.ggml.eos_token_id"),
        "chat_template": field("tokenizer.chat_template"),
    }
    return d


def build_with_tokenizers(d):
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    vocab = {tok: i for i, tok in enumerate(d["tokens"])}
    merges = [tuple(m.split(" ", 1)) for m in d["merges"]]
    tk = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tk.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    ])
    tk.decoder = decoders.ByteLevel()
    types = d["token_type"] or [1] * len(d["tokens"])
    tk.add_special_tokens([AddedToken(t, normalized=False, special=True)
                           for t, ty in zip(d["tokens"], types) if ty == 3])
    user = [AddedToken(t, normalized=False, special=False) for t, ty in zip(d["tokens"], types) if ty == 4]
    if user:
        tk.add_tokens(user)
    return tk


def try_transformers_autotokenizer(path):
    try:
        from transformers import AutoTokenizer
        return AutoTokenizer.from_pretrained(os.path.dirname(path), gguf_file=os.path.basename(path))
    except Exception as e:  # noqa: BLE001 - report and fall back
        print(f"transformers AutoTokenizer GGUF loading failed ({type(e).__name__}: {str(e)[:120]}); "
              "building the HF tokenizers Tokenizer directly")
        return None


def try_transformers_mapping(d):
    """transformers' own GGUF tokenizer mapping, called without its torch-based file reader."""
    try:
        from transformers.integrations.gguf.gguf_tokenizer_mapping import convert_gguf_tokenizer
    except Exception as e:  # noqa: BLE001
        print(f"(transformers GGUF tokenizer mapping not importable: {type(e).__name__})")
        return None
    td = {k: d[k] for k in ("tokenizer_type", "pre_tokenizer_type", "tokens", "token_type", "merges",
                            "bos_token_id", "eos_token_id") if d.get(k) is not None}
    try:
        backend, _ = convert_gguf_tokenizer(d["architecture"], td)
        return backend
    except Exception as e:  # noqa: BLE001
        print(f"(transformers GGUF tokenizer mapping failed: {type(e).__name__}: {str(e)[:120]})")
        return None


def render(template, messages, add_generation_prompt, bos="", eos=""):
    try:
        from transformers.utils.chat_template_utils import render_jinja_template
        out = render_jinja_template(conversations=[messages], chat_template=template,
                                    add_generation_prompt=add_generation_prompt,
                                    bos_token=bos, eos_token=eos)
        rendered = out[0] if isinstance(out, tuple) else out
        return rendered[0] if isinstance(rendered, list) else rendered
    except ImportError:
        import jinja2.sandbox
        env = jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
        return env.from_string(template).render(messages=messages, add_generation_prompt=add_generation_prompt,
                                                bos_token=bos, eos_token=eos)


CONVERSATIONS = [
    [{"role": "user", "content": "hi"}],
    [{"role": "system", "content": "You are a pirate."}, {"role": "user", "content": "Hello there!"}],
    [{"role": "user", "content": "What is 2+2?"}, {"role": "assistant", "content": "4."},
     {"role": "user", "content": "And 3+3?\nExplain briefly."}],
    [{"role": "system", "content": ""}, {"role": "user", "content": "  spaced  \n\n"}],
    [{"role": "user", "content": "\u4f60\u597d \U0001F600 caf\u00e9"}, {"role": "assistant", "content": "<b>ok</b>"}],
    [],
]

# Small templates exercising the Jinja subset, rendered by the same engine as HF. (Jinja raises on
# an attribute of an undefined value; GenieX renders it as empty, so no case does that.)
TEMPLATES = [
    "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}",
    "{%- for m in messages -%}\n  [{{ loop.index }}/{{ loop.length }}] {{ m['role'] | upper }}\n{%- endfor %}",
    "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'system' %}<<SYS>>{{ message['content'] | trim }}<</SYS>>{% elif message['role'] == 'user' %}[INST] {{ message['content'] }} [/INST]{% else %} {{ message['content'] }}{{ eos_token }}{% endif %}{% endfor %}",
    "{% if messages | length > 0 and messages[0].role == 'system' %}{% set sys = messages[0].content %}{% set rest = messages[1:] %}{% else %}{% set sys = 'default' %}{% set rest = messages %}{% endif %}SYS={{ sys }}\n{% for m in rest %}{{ loop.index0 }}{% if loop.first %}F{% endif %}{% if loop.last %}L{% endif %}:{{ m.content }}|{% endfor %}",
    "{# comment #}\n{% for m in messages %}\n    {% if not loop.first %}, {% endif %}\n    {{- m.role ~ '=' ~ m.content -}}\n{% endfor %}\n{% if add_generation_prompt %}\n>>{% endif %}",
    "{% for m in messages %}{{ '<|' + m.role + '|>\n' + m.content + '<|end|>\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>\n' }}{% else %}{{ eos_token }}{% endif %}",
    "{{ 'x' if messages else 'empty' }} {{ messages|length }} {{ undefined_var }}|{% if missing is defined %}D{% else %}U{% endif %}",
    "{% for m in messages %}{% if m.role != 'user' and m.role != 'system' %}A{% elif not m.content %}E{% else %}{{ m.content|length }}{% endif %}{% endfor %}",
    "  {% if true %}\n  indented\n  {% endif %}\n{%+ if true %}keep{% endif +%}\nX",
    "{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}{% endfor %}{{ ns.n }} {{ [1, 2, 3] | join(',') }} {{ 7 // 2 }} {{ 7 % 3 }} {{ 'a' * 3 }} {{ 'Hi'.lower() }} {{ 'abc'.startswith('a') }} {{ ' x '.strip() }}",
    "{{ messages[-1]['content'] if messages else '' }}{{ missing_var | default('none') }} {{ (messages | first).role if messages else 'no' }}",
]


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else DEFAULT_MODEL
    d = read_gguf_tokenizer(path)
    print(f"model={d['tokenizer_type']} pre={d['pre_tokenizer_type']} vocab={len(d['tokens'])} "
          f"merges={len(d['merges'])}")
    hf = try_transformers_autotokenizer(path)
    route = "transformers.AutoTokenizer(gguf_file=...)"
    if hf is not None:
        enc = lambda s: hf(s, add_special_tokens=False).input_ids  # noqa: E731
    else:
        tk = build_with_tokenizers(d)
        route = "tokenizers.Tokenizer built from GGUF vocab/merges + SmolLM2 tokenizer.json pre-tokenizer"
        enc = lambda s: tk.encode(s, add_special_tokens=False).ids  # noqa: E731
    print("reference:", route)

    with open(os.path.join(DATA, "corpus.jsonl"), encoding="utf-8") as f:
        corpus = [json.loads(line)["text"] for line in f if line.strip()]
    out_path = os.path.join(DATA, "smollm2_hf_ids.jsonl")
    with open(out_path, "w", encoding="utf-8") as f:
        for s in corpus:
            f.write(json.dumps({"text": s, "ids": enc(s)}, ensure_ascii=False) + "\n")
    print(f"wrote {len(corpus)} lines to {out_path} ({os.path.getsize(out_path)} bytes)")

    mapping = try_transformers_mapping(d)
    if mapping is not None:
        diff = [s for s in corpus if mapping.encode(s, add_special_tokens=False).ids != enc(s)]
        print(f"transformers GGUF mapping (pre '{d['pre_tokenizer_type']}') differs from the reference on "
              f"{len(diff)}/{len(corpus)} lines, e.g. {diff[:3]!r}")

    template = d["chat_template"] or ""
    cases = {"smollm2_template": template, "smollm2": [], "templates": []}
    for conv in CONVERSATIONS:
        for agp in (False, True):
            cases["smollm2"].append({"messages": conv, "add_generation_prompt": agp,
                                     "expected": render(template, conv, agp)})
    for src in TEMPLATES:
        for conv in CONVERSATIONS[:4] + [[]]:
            for agp in (False, True):
                try:
                    expected = render(src, conv, agp, bos="<s>", eos="</s>")
                except Exception as e:  # noqa: BLE001
                    print(f"template failed in reference renderer: {src[:60]!r}: {e}")
                    continue
                cases["templates"].append({"source": src, "messages": conv, "add_generation_prompt": agp,
                                           "bos_token": "<s>", "eos_token": "</s>", "expected": expected})
    tpath = os.path.join(DATA, "chat_templates.json")
    with open(tpath, "w", encoding="utf-8") as f:
        json.dump(cases, f, ensure_ascii=False, indent=1)
    print(f"wrote {len(cases['smollm2'])} SmolLM2 and {len(cases['templates'])} template cases to {tpath}")


if __name__ == "__main__":
    main()
