#!/usr/bin/env python3
"""Builds tests/data/tokenizer/chat_templates_families.json: real chat templates of the model
families GenieX supports, rendered by transformers for a set of conversations.

Reference: transformers.utils.chat_template_utils.render_jinja_template, the function
apply_chat_template(tokenize=False) uses. Its jinja2 environment (ImmutableSandboxedEnvironment,
trim_blocks, lstrip_blocks, loopcontrols, transformers' tojson / raise_exception / strftime_now /
namespace / dict) is the one the C++ renderer imitates. strftime_now is pinned to a fixed clock
(the case's "now", seconds since the epoch, rendered in UTC; run with TZ=UTC) so fixtures are
deterministic.

Each case: {"template": name, "case": name, "context": {...}, "now": seconds?,
            "expected": text} or {..., "error": substring}
The context holds messages, tools, documents, add_generation_prompt, bos_token, eos_token and
any extra keyword arguments (enable_thinking, date_string, ...), exactly as passed to
render_jinja_template. Template sources are stored once under "templates".

Cases whose rendering fails with anything but a template error (raise_exception) are left out:
those are templates that do not support the feature (e.g. a content list in a template that
concatenates strings), and jinja2's exact Python exception text is not something to match.

Also writes each template source to tests/data/chat_templates/<name>.jinja (fuzz seeds).

Usage: TZ=UTC python3 scripts/tokenizer/make_template_fixtures.py [templates_dir]
"""
import copy
import datetime
import json
import os
import sys

import jinja2
from transformers.utils import chat_template_utils as ctu

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.normpath(os.path.join(HERE, "..", "..", "tests", "data", "tokenizer",
                                    "chat_templates_families.json"))
SEEDS = os.path.normpath(os.path.join(HERE, "..", "..", "tests", "data", "chat_templates"))
TEMPLATES = (sys.argv[1] if len(sys.argv) > 1 else
             "/tmp/dl/sdist/llama_cpp_python-0.3.36/vendor/llama.cpp/models/templates")
GEMMA3 = os.path.expanduser("~/.cache/geniex/tokenizers/gemma-3-270m-q4_k_m.gguf")
SMOLLM2 = os.environ.get("GENIEX_MODEL",
                         os.path.expanduser("~/.cache/geniex/models/SmolLM2-135M-Instruct.Q4_1.gguf"))
# Gemma 3's template as published in google/gemma-3-*-it tokenizer_config.json; used when the
# GGUF at GEMMA3 carries no tokenizer.chat_template (the cached gemma-3-270m file has none).
GEMMA3_TEMPLATE = (
    "{{ bos_token }}\n"
    "{%- if messages[0]['role'] == 'system' -%}\n"
    "    {%- if messages[0]['content'] is string -%}\n"
    "        {%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}\n"
    "    {%- else -%}\n"
    "        {%- set first_user_prefix = messages[0]['content'][0]['text'] + '\n\n' -%}\n"
    "    {%- endif -%}\n"
    "    {%- set loop_messages = messages[1:] -%}\n"
    "{%- else -%}\n"
    "    {%- set first_user_prefix = \"\" -%}\n"
    "    {%- set loop_messages = messages -%}\n"
    "{%- endif -%}\n"
    "{%- for message in loop_messages -%}\n"
    "    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}\n"
    "        {{ raise_exception(\"Conversation roles must alternate user/assistant/user/assistant/...\") }}\n"
    "    {%- endif -%}\n"
    "    {%- if (message['role'] == 'assistant') -%}\n"
    "        {%- set role = \"model\" -%}\n"
    "    {%- else -%}\n"
    "        {%- set role = message['role'] -%}\n"
    "    {%- endif -%}\n"
    "    {{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else \"\") }}\n"
    "    {%- if message['content'] is string -%}\n"
    "        {{ message['content'] | trim }}\n"
    "    {%- elif message['content'] is iterable -%}\n"
    "        {%- for item in message['content'] -%}\n"
    "            {%- if item['type'] == 'image' -%}\n"
    "                {{ '<start_of_image>' }}\n"
    "            {%- elif item['type'] == 'text' -%}\n"
    "                {{ item['text'] | trim }}\n"
    "            {%- endif -%}\n"
    "        {%- endfor -%}\n"
    "    {%- else -%}\n"
    "        {{ raise_exception(\"Invalid content type\") }}\n"
    "    {%- endif -%}\n"
    "    {{ '<end_of_turn>\n' }}\n"
    "{%- endfor -%}\n"
    "{%- if add_generation_prompt -%}\n"
    "    {{'<start_of_turn>model\n'}}\n"
    "{%- endif -%}\n")
NOW = 1752926400  # 2025-07-19 12:00:00 UTC

# name -> (file or gguf, bos, eos, family tags)
FAMILIES = {
    "llama-3.1": ("meta-llama-Llama-3.1-8B-Instruct.jinja", "<|begin_of_text|>", "<|eot_id|>", {"tools", "date"}),
    "llama-3.2": ("meta-llama-Llama-3.2-3B-Instruct.jinja", "<|begin_of_text|>", "<|eot_id|>", {"tools", "date"}),
    "llama-3.3": ("meta-llama-Llama-3.3-70B-Instruct.jinja", "<|begin_of_text|>", "<|eot_id|>", {"tools", "date"}),
    "qwen2.5": ("Qwen-Qwen2.5-7B-Instruct.jinja", "", "<|im_end|>", {"tools"}),
    "qwen3": ("Qwen-Qwen3-0.6B.jinja", "", "<|im_end|>", {"tools", "think"}),
    "qwen3.5": ("Qwen3.5-4B.jinja", "", "<|im_end|>", {"tools", "think", "parts"}),
    "qwq": ("Qwen-QwQ-32B.jinja", "", "<|im_end|>", {"tools", "think"}),
    "qwen3-coder": ("Qwen3-Coder.jinja", "", "<|im_end|>", {"tools"}),
    "mistral-nemo": ("mistralai-Mistral-Nemo-Instruct-2407.jinja", "<s>", "</s>", {"tools", "mistral"}),
    "mistral-small-3.2": ("Mistral-Small-3.2-24B-Instruct-2506.jinja", "<s>", "</s>", {"tools", "mistral", "parts"}),
    "devstral": ("unsloth-mistral-Devstral-Small-2507.jinja", "<s>", "</s>", {"tools", "mistral", "parts"}),
    "ministral-3": ("mistralai-Ministral-3-14B-Reasoning-2512.jinja", "<s>", "</s>", {"tools", "mistral", "parts"}),
    "gemma-2": ("google-gemma-2-2b-it.jinja", "<bos>", "<eos>", set()),
    "gemma-3": ("gguf:" + GEMMA3, "<bos>", "<eos>", {"parts"}),
    "smollm2": ("gguf:" + SMOLLM2, "", "<|im_end|>", set()),
    "smollm3": ("HuggingFaceTB-SmolLM3-3B.jinja", "", "<|im_end|>", {"tools", "think"}),
    "phi-3.5": ("microsoft-Phi-3.5-mini-instruct.jinja", "<s>", "<|endoftext|>", set()),
    "deepseek-r1-qwen": ("deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja", "<｜begin▁of▁sentence｜>",
                         "<｜end▁of▁sentence｜>", {"tools", "think"}),
    "deepseek-r1-llama": ("deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja", "<｜begin▁of▁sentence｜>",
                          "<｜end▁of▁sentence｜>", {"tools", "think"}),
    "hermes-3": ("NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja", "<|begin_of_text|>", "<|im_end|>", {"tools"}),
    "hermes-2-pro": ("NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja", "<|begin_of_text|>", "<|im_end|>",
                     {"tools"}),
    "granite-3.3": ("ibm-granite-granite-3.3-2B-Instruct.jinja", "", "<|end_of_text|>", {"tools", "date"}),
    "lfm2": ("LFM2-8B-A1B.jinja", "<|startoftext|>", "<|im_end|>", {"tools"}),
    "command-r7b": ("CohereForAI-c4ai-command-r7b-12-2024-tool_use.jinja", "<BOS_TOKEN>", "<|END_OF_TURN_TOKEN|>",
                    {"tools"}),
    "gpt-oss": ("openai-gpt-oss-120b.jinja", "<|startoftext|>", "<|return|>", {"tools", "think", "date"}),
    "functionary-3.2": ("meetkai-functionary-medium-v3.2.jinja", "<|begin_of_text|>", "<|eot_id|>", {"tools"}),
    "kimi-k2": ("moonshotai-Kimi-K2.jinja", "", "<|im_end|>", {"tools"}),
    "glm-4.6": ("GLM-4.6.jinja", "", "<|endoftext|>", {"tools", "think"}),
    "apertus": ("Apertus-8B-Instruct.jinja", "<s>", "</s>", {"tools", "think"}),
    "minimax-m2": ("MiniMax-M2.jinja", "", "[e~[", {"tools", "think"}),
    "nemotron-nano-v2": ("NVIDIA-Nemotron-Nano-v2.jinja", "", "<SPECIAL_12>", {"tools", "think"}),
    "deepseek-v3.1": ("deepseek-ai-DeepSeek-V3.1.jinja", "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>",
                      {"tools", "think"}),
    # Not covered: ByteDance-Seed-OSS (dicts with integer keys, which the renderer's string-keyed
    # dicts cannot represent), fireworks firefunction-v2 (needs a `functions` argument).
}

# Small templates for the Jinja features real templates lean on, rendered with FEATURE_CONTEXT.
FEATURES = {
    "repr_values": "{{ messages[0] }}|{{ tools }}|{{ [1, 2.5, none, true, 'it''s', \"q\\\"x\"] }}|{{ {'a': {'b': [1]}} }}|"
                   "{{ 'it\\'s' }}|{{ none }}|{{ true }}|{{ 3 / 2 }}|{{ 4 / 2 }}|{{ 7 // 2 }}|{{ -7 % 3 }}|{{ 2 ** 10 }}",
    "tojson_forms": "{{ tools | tojson }}\n{{ tools[0] | tojson(indent=2) }}\n{{ messages[0] | tojson(sort_keys=true) }}\n"
                    "{{ {'u': 'héllo \\u2028 \\x01'} | tojson }}\n{{ {'u': 'é'} | tojson(ensure_ascii=true) }}\n"
                    "{{ [1, [2, {}], []] | tojson(indent=4) }}\n{{ {'a': 1, 'b': 2} | tojson(separators=(',', ':')) }}\n"
                    "{{ 'x\"y' | tojson }}{{ 0.1 | tojson }}{{ 1e20 | tojson }}{{ -0.0 | tojson }}",
    "string_methods": "{% set s = '  Hello, World. hello  ' %}[{{ s.strip() }}][{{ s.lstrip() }}][{{ s.rstrip() }}]"
                      "[{{ s.strip(' Hd') }}][{{ s.split(',') }}][{{ s.split() }}][{{ s.rsplit(' ', 1) }}][{{ s.split(' ', 2) }}]"
                      "[{{ s.upper() }}][{{ s.lower() }}][{{ s.title() }}][{{ 'hELLO wORLD'.capitalize() }}]"
                      "[{{ s.startswith('  He') }}][{{ s.endswith(('x', '  ')) }}][{{ s.replace('l', 'L') }}][{{ s.replace('l', 'L', 2) }}]"
                      "[{{ s.find('World') }}][{{ s.count('l') }}][{{ '-'.join(['a', 'b']) }}][{{ 'a\\nb\\r\\nc'.splitlines() }}]"
                      "[{{ '123'.isdigit() }}{{ 'ab'.isalpha() }}{{ ' '.isspace() }}]",
    "filters_strings": "{% set s = '  Mixed Case text here  ' %}[{{ s | trim }}][{{ s | upper }}][{{ s | lower }}][{{ s | title }}]"
                       "[{{ s | capitalize }}][{{ s | length }}][{{ s | wordcount }}][{{ s | replace('e', '3') }}]"
                       "[{{ 'a\\nb\\n\\nc' | indent(2) }}][{{ 'a\\nb' | indent(4, true) }}][{{ 'a\\n\\nb' | indent(2, blank=true) }}]"
                       "[{{ 'héllo' | length }}][{{ 'abc' | reverse }}][{{ s | string }}][{{ 42 | string }}][{{ '7' | int + 1 }}]"
                       "[{{ '2.5' | float }}][{{ 'x' | int }}][{{ 3.7 | int }}][{{ 2.567 | round(2) }}][{{ -3 | abs }}]"
                       "[{{ 'a<b>&\\'\"' | e }}][{{ 'x' | center(7) }}][{{ \"it's a-b (c) x_y\" | title }}][{{ \"it's a-b x_y\".title() }}]",
    "filters_lists": "{% set xs = [3, 1, 2, 3, 'B', 'a', 'b'] %}[{{ [3, 1, 2] | sort }}][{{ ['b', 'A', 'c'] | sort }}]"
                     "[{{ ['b', 'A', 'c'] | sort(case_sensitive=true) }}][{{ [3, 1, 2] | sort(reverse=true) }}]"
                     "[{{ xs | unique | list }}][{{ [1, 2, 3] | sum }}][{{ [1, 5, 2] | max }}][{{ [4, 2, 8] | min }}]"
                     "[{{ xs | first }}][{{ xs | last }}][{{ xs | length }}][{{ xs | join(', ') }}][{{ xs | reverse | list }}]"
                     "[{{ messages | map(attribute='role') | join(',') }}][{{ messages | map(attribute='nope', default='d') | list }}]"
                     "[{{ ['a', 'B'] | map('upper') | list }}][{{ messages | selectattr('role', 'equalto', 'user') | list | length }}]"
                     "[{{ messages | rejectattr('role', 'eq', 'user') | map(attribute='role') | list }}]"
                     "[{{ messages | selectattr('tool_calls') | list | length }}][{{ messages | selectattr('tool_calls', 'defined') | list | length }}]"
                     "[{{ [0, 1, 2, none, ''] | select | list }}][{{ [1, 2, 3, 4] | reject('odd') | list }}]"
                     "[{{ [1, 2, 3, 4] | select('divisibleby', 2) | list }}][{{ {'b': 1, 'a': 2, 'C': 0} | dictsort }}]"
                     "[{{ {'b': 1, 'a': 2} | dictsort(by='value', reverse=true) }}][{{ [1, 2, 3, 4, 5] | batch(2) | list }}]"
                     "[{{ messages | sort(attribute='role') | map(attribute='role') | join }}][{{ 'abc' | list }}][{{ {'k': 1} | list }}]"
                     "[{{ [[1, 'x'], [2, 'y']] | map('first') | list }}][{{ undefined_thing | default('dflt') }}]"
                     "[{{ '' | default('empty', true) }}][{{ none | default('n') }}][{{ tools[0].function | items | list }}]",
    "tests": "{% set vals = [none, true, false, 0, 1.5, 'str', [1], {'k': 1}, undefined_thing] %}"
             "{% for v in vals %}{{ loop.index0 }}:{{ v is none }}{{ v is defined }}{{ v is string }}{{ v is number }}"
             "{{ v is integer }}{{ v is float }}{{ v is boolean }}{{ v is true }}{{ v is false }}{{ v is mapping }}"
             "{{ v is iterable }}{{ v is sequence }}{{ v is not none }}{{ v is callable }};{% endfor %}"
             "{{ 4 is even }}{{ 3 is odd }}{{ 9 is divisibleby 3 }}{{ 1 is eq 1 }}{{ 2 is gt 1 }}{{ 2 is le 1 }}{{ 'a' is in 'cat' }}"
             "{{ 'x' is lower }}{{ 'X' is upper }}{{ 1 is sameas 1 }}{{ namespace is callable }}",
    "loops": "{% for m in messages %}{% if m.role == 'tool' %}{% break %}{% endif %}{% if loop.first %}{% continue %}{% endif %}"
             "[{{ loop.index }}/{{ loop.length }} {{ loop.revindex }} {{ loop.revindex0 }} {{ loop.last }} "
             "{{ loop.previtem.role if loop.previtem is defined }}>{{ loop.nextitem.role if loop.nextitem is defined }} {{ m.role }}]"
             "{% endfor %}|{% for m in messages[::-1] if m.role != 'system' %}{{ m.role }},{% else %}none{% endfor %}"
             "|{% for k, v in {'a': 1, 'b': [2]}.items() %}{{ k }}={{ v }};{% endfor %}|{% for x in [] %}x{% else %}empty{% endfor %}"
             "|{{ messages[1:3] | map(attribute='role') | join }}{{ messages[-1].role }}{{ messages[::2] | length }}{{ 'abcdef'[::-2] }}"
             "{{ 'abcdef'[1:-1] }}{{ [1, 2, 3][5:] }}{% for i in range(2, 9, 3) %}{{ i }}{% endfor %}{% for i in range(3, 0, -1) %}{{ i }}{% endfor %}",
    "namespace_set_macro": "{% set ns = namespace(count=0, names=[]) %}{% for m in messages %}{% set ns.count = ns.count + 1 %}"
                           "{% set ns.names = ns.names + [m.role] %}{% endfor %}{{ ns.count }}{{ ns.names }}"
                           "{% set a, b = 1, 2 %}{{ a }}{{ b }}"
                           "{% set block %}inside {{ ns.count }}{% endset %}[{{ block | trim }}]"
                           "{% macro item(name, value='dflt', sep=': ') %}<{{ name }}{{ sep }}{{ value }}>{% endmacro %}"
                           "{{ item('a') }}{{ item('b', 2) }}{{ item('c', sep='=') }}{{ item(name='d', value=[1]) }}"
                           "{% macro rec(n) %}{% if n > 0 %}{{ n }}{{ rec(n - 1) }}{% endif %}{% endmacro %}{{ rec(4) }}"
                           "{% set d = dict(x=1, y='z') %}{{ d }}{{ d.x }}{{ d['y'] }}{{ d.get('q', 'dq') }}{{ d.get('q') }}"
                           "{{ d.keys() | list }}{{ d.values() | list }}{{ 'x' in d }}{{ 'q' not in d }}"
                           "{{ 'yes' if ns.count > 2 else 'no' }}[{{ 'inline' if false }}]{{ 'a' ~ 1 ~ none ~ true }}",
    "whitespace": "A  \n  {% if true %}\n    B\n  {% endif %}\n  C {{- ' D ' -}}  E\n{%- for i in [1, 2] %}\n  {{ i }}\n{%- endfor %}\n"
                  "{# comment #}\n  {%+ if true %}kept{% endif %}\n",
}
FEATURE_CONTEXT = {
    "messages": [
        {"role": "system", "content": "Sys 'quote'"},
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": None, "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": {"a": 1}}}]},
        {"role": "tool", "content": "{\"r\": 1}"},
        {"role": "user", "content": [{"type": "text", "text": "parts"}]},
    ],
    "tools": None,  # set to [WEATHER_TOOL] in main()
    "add_generation_prompt": True,
}

SYSTEM = "You are a concise assistant. Answer in one sentence."
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather for a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name, e.g. Paris"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                "days": {"type": "integer", "description": "Forecast days"},
            },
            "required": ["city"],
        },
    },
}
TIME_TOOL = {
    "type": "function",
    "function": {
        "name": "get_time",
        "description": "Current time in a time zone (IANA name, «Europe/Paris»).",
        "parameters": {"type": "object", "properties": {"tz": {"type": "string"}}, "required": ["tz"]},
    },
}
CALL_ARGS = {"city": "Paris", "unit": "celsius", "days": 2, "precision": 0.5, "metric": True, "note": None}


def conversations(tags):
    """(case name, context) pairs; bos/eos are added by the caller."""
    u1 = {"role": "user", "content": "Hello! What's the capital of France?"}
    a1 = {"role": "assistant", "content": "The capital of France is Paris."}
    u2 = {"role": "user", "content": "And of Italy? Answer with \"quotes\", 'apostrophes' and unicode: héllo — 世界 🌍"}
    a2 = {"role": "assistant", "content": "  Rome, of course.\n\n"}
    sys_m = {"role": "system", "content": SYSTEM}
    out = [
        ("single_user_gen", {"messages": [u1], "add_generation_prompt": True}),
        ("single_user_nogen", {"messages": [u1], "add_generation_prompt": False}),
        ("system_multi_gen", {"messages": [sys_m, u1, a1, u2], "add_generation_prompt": True}),
        ("system_multi_nogen", {"messages": [sys_m, u1, a1, u2, a2], "add_generation_prompt": False}),
        ("multi_no_system", {"messages": [u1, a1, u2], "add_generation_prompt": True}),
        ("empty_content", {"messages": [{"role": "user", "content": ""}], "add_generation_prompt": True}),
        ("bad_order_user_user", {"messages": [u1, u2], "add_generation_prompt": True}),
        ("bad_order_assistant_first", {"messages": [a1, u1], "add_generation_prompt": True}),
        ("bad_role", {"messages": [{"role": "narrator", "content": "Once upon a time"}, u1],
                      "add_generation_prompt": True}),
    ]
    if "tools" in tags:
        call = {"role": "assistant", "content": "",
                "tool_calls": [{"id": "abcDEF123", "type": "function",
                                "function": {"name": "get_weather", "arguments": CALL_ARGS}}]}
        call_str = copy.deepcopy(call)
        call_str["tool_calls"][0]["function"]["arguments"] = json.dumps(CALL_ARGS)
        tool_msg = {"role": "tool", "tool_call_id": "abcDEF123", "name": "get_weather",
                    "content": "{\"temperature\": 21, \"condition\": \"sunny\"}"}
        final = {"role": "assistant", "content": "It is 21 °C and sunny in Paris."}
        ask = {"role": "user", "content": "What's the weather in Paris?"}
        out += [
            ("tools_gen", {"messages": [sys_m, ask], "tools": [WEATHER_TOOL, TIME_TOOL],
                           "add_generation_prompt": True}),
            ("tools_no_system", {"messages": [ask], "tools": [WEATHER_TOOL], "add_generation_prompt": True}),
            ("tool_call_cycle", {"messages": [sys_m, ask, call, tool_msg, final], "tools": [WEATHER_TOOL],
                                 "add_generation_prompt": False}),
            ("tool_call_pending", {"messages": [ask, call, tool_msg], "tools": [WEATHER_TOOL],
                                   "add_generation_prompt": True}),
            ("tool_call_string_args", {"messages": [ask, call_str, tool_msg, final], "tools": [WEATHER_TOOL],
                                       "add_generation_prompt": False}),
            ("tool_call_no_tools", {"messages": [ask, call, tool_msg], "add_generation_prompt": True}),
        ]
    if "think" in tags:
        r = {"role": "assistant", "content": "The capital of France is Paris.",
             "reasoning_content": "The user asks about France.\nParis is the capital."}
        inline = {"role": "assistant", "content": "<think>\nSimple geography.\n</think>\n\nParis."}
        out += [
            ("thinking_off", {"messages": [u1], "add_generation_prompt": True, "enable_thinking": False}),
            ("thinking_on", {"messages": [u1], "add_generation_prompt": True, "enable_thinking": True}),
            ("reasoning_history", {"messages": [sys_m, u1, r, u2], "add_generation_prompt": True}),
            ("reasoning_last", {"messages": [u1, r], "add_generation_prompt": False}),
            ("inline_think_history", {"messages": [u1, inline, u2], "add_generation_prompt": True}),
            ("thinking_off_history", {"messages": [u1, r, u2], "add_generation_prompt": True,
                                      "enable_thinking": False}),
        ]
    if "parts" in tags or True:  # every template: those that cannot take parts are left out
        parts = {"role": "user", "content": [{"type": "text", "text": "Describe this"},
                                             {"type": "text", "text": " in two words."}]}
        sys_parts = {"role": "system", "content": [{"type": "text", "text": SYSTEM}]}
        out += [
            ("content_parts", {"messages": [sys_parts, parts], "add_generation_prompt": True}),
            ("content_parts_multi", {"messages": [parts, {"role": "assistant", "content": [
                {"type": "text", "text": "Two words."}]}, u1], "add_generation_prompt": True}),
        ]
    if "date" in tags:
        out += [
            ("date_string", {"messages": [sys_m, u1], "add_generation_prompt": True,
                             "date_string": "26 Jul 2024"}),
            ("strftime_now", {"messages": [u1], "add_generation_prompt": True}),
        ]
    return out


def load_source(spec):
    if spec.startswith("gguf:"):
        from gguf import GGUFReader
        r = GGUFReader(spec[5:])
        f = r.fields.get("tokenizer.chat_template")
        if f is None and spec[5:] == GEMMA3:
            return GEMMA3_TEMPLATE
        if f is None:
            raise KeyError(f"{spec[5:]} has no tokenizer.chat_template")
        return bytes(f.parts[f.data[0]]).decode("utf-8")
    with open(os.path.join(TEMPLATES, spec), encoding="utf-8") as fh:
        return fh.read()


def render(source, ctx):
    kwargs = dict(ctx)
    messages = kwargs.pop("messages")
    tools = kwargs.pop("tools", None)
    documents = kwargs.pop("documents", None)
    agp = kwargs.pop("add_generation_prompt", False)
    compiled = ctu._compile_jinja_template(source)
    compiled.environment.globals["strftime_now"] = (
        lambda fmt: datetime.datetime.fromtimestamp(NOW, datetime.timezone.utc).strftime(fmt))
    out = ctu.render_jinja_template(conversations=[copy.deepcopy(messages)], tools=copy.deepcopy(tools),
                                    documents=documents, chat_template=source, add_generation_prompt=agp,
                                    **copy.deepcopy(kwargs))
    return out[0][0]


def main():
    templates, cases, skipped = {}, [], {}
    for name, (spec, bos, eos, tags) in FAMILIES.items():
        try:
            source = load_source(spec)
        except (OSError, KeyError) as e:
            print(f"skip {name}: {e}")
            continue
        templates[name] = source
        for case, ctx in conversations(tags):
            ctx = dict(ctx)
            ctx["bos_token"] = bos
            ctx["eos_token"] = eos
            entry = {"template": name, "case": case, "context": ctx, "now": NOW}
            try:
                entry["expected"] = render(source, ctx)
            except jinja2.exceptions.UndefinedError as e:
                skipped.setdefault(name, []).append(f"{case} (undefined: {e})")
                continue
            except jinja2.exceptions.TemplateError as e:
                if type(e) is not jinja2.exceptions.TemplateError:  # syntax / security errors: not expected
                    skipped.setdefault(name, []).append(f"{case} ({type(e).__name__}: {e})")
                    continue
                entry["error"] = str(e)
            except Exception as e:  # noqa: BLE001 - unsupported feature for this template
                skipped.setdefault(name, []).append(f"{case} ({type(e).__name__}: {e})")
                continue
            cases.append(entry)
    FEATURE_CONTEXT["tools"] = [WEATHER_TOOL]
    for name, source in FEATURES.items():
        templates["feature:" + name] = source
        entry = {"template": "feature:" + name, "case": "features", "context": FEATURE_CONTEXT, "now": NOW}
        entry["expected"] = render(source, FEATURE_CONTEXT)  # must render: these are the renderer's spec
        cases.append(entry)
    with open(OUT, "w", encoding="utf-8") as fh:
        json.dump({"generator": "scripts/tokenizer/make_template_fixtures.py",
                   "reference": "transformers.utils.chat_template_utils.render_jinja_template",
                   "templates": templates, "cases": cases}, fh, ensure_ascii=False, indent=1)
        fh.write("\n")
    # The template sources double as the fuzz seed corpus (tests/fuzz: fuzz_chat_template).
    os.makedirs(SEEDS, exist_ok=True)
    for name, source in templates.items():
        if name.startswith("feature:"):
            continue
        with open(os.path.join(SEEDS, name + ".jinja"), "w", encoding="utf-8", newline="") as fh:
            fh.write(source)
    per = {}
    for c in cases:
        per.setdefault(c["template"], [0, 0])[0 if "expected" in c else 1] += 1
    for name, (ok, err) in per.items():
        print(f"{name:20s} {ok:3d} renderings {err:2d} errors  skipped: {len(skipped.get(name, []))}")
    for name, why in skipped.items():
        for w in why:
            print(f"  skipped {name}: {w[:150]}")
    print(f"wrote {len(cases)} cases for {len(templates)} templates to {OUT}")


if __name__ == "__main__":
    main()
