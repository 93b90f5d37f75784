#!/usr/bin/env python3
"""Writes tests/data/tokenizer/corpus.jsonl: varied strings for tokenizer parity tests.

Deterministic (fixed seed). Each line is {"text": "..."}. The corpus covers code in several
languages, whitespace runs, digits and long numbers, emoji (ZWJ sequences, flags, skin tones),
many scripts, combining marks, special-token literals, mixed-case contractions, URLs and JSON.

Usage: python3 scripts/tokenizer/make_corpus.py [out_path]
"""
import json
import os
import random
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_OUT = os.path.join(HERE, "..", "..", "tests", "data", "tokenizer", "corpus.jsonl")

BASE = [
    "",
    " ",
    "Hello world",
    "Hello, world!",
    " Hello world",
    "  leading two spaces",
    "trailing spaces   ",
    "Hello\nworld",
    "line one\n\nline three\n",
    "tabs\tbetween\twords",
    "\t\tindented with tabs",
    "mixed \t \n whitespace \r\n runs",
    "windows\r\nline\r\nendings\r\n",
    "    four spaces\n        eight spaces\n",
    "a  b   c    d     e",
    "\n\n\n",
    "   \n   \n",
    " \t ",
    "end with newline\n",
    "space before newline \nnext",
    "I'm here, you're there, we've done it, they'll go, he'd say, it's ok, don't",
    "I'M SHOUTING, WE'LL SEE, YOU'RE RIGHT, THEY'VE GONE, SHE'D KNOW, IT'S, DON'T",
    "we'LL mIxEd CaSe'S aNd 'Re 'vE 'M 'D",
    "'s 't 're 've 'm 'll 'd",
    "rock 'n' roll isn't 'quoted' text",
    "The year 2024 and 1999; pi is 3.14159265358979 and e = 2.718281828",
    "1234567890",
    "12345678901234567890123456789012345678901234567890",
    "phone: +1 (555) 123-4567, zip 94103-1234",
    "1,000,000 and 1.000.000 and 1 000 000",
    "0x1F600 0b1010 0o777 1e-9 6.02e23 -42 +7",
    "v1.2.3-rc.4+build.5",
    "2024-01-31T23:59:59.123Z",
    "numbers in words: one2three4five6",
    "Unicode digits: \u0661\u0662\u0663 \u0967\u0968\u0969 \uff11\uff12\uff13 \u00bd \u00b2 \u2167 \u216b",
    "print('hello, world')",
    "def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n",
    "#include <stdio.h>\n\nint main(void) {\n\tprintf(\"%d\\n\", 42);\n\treturn 0;\n}\n",
    "fn main() {\n    let v: Vec<u32> = (0..10).map(|x| x * x).collect();\n    println!(\"{:?}\", v);\n}\n",
    "function add(a, b) { return a + b; }\nconsole.log(add(1, 2)); // 3\n",
    "const x = async () => { await fetch('/api/v1/items?id=12&sort=desc'); };",
    "SELECT id, name FROM users WHERE age >= 18 AND name LIKE '%son' ORDER BY id DESC;",
    "<html>\n  <body>\n    <div class=\"main\">Hi &amp; bye</div>\n  </body>\n</html>",
    "package main\n\nimport \"fmt\"\n\nfunc main() {\n\tfmt.Println(\"hi\")\n}\n",
    "public static void main(String[] args) { System.out.println(\"Hello\"); }",
    "#!/bin/bash\nfor f in *.txt; do echo \"$f\"; done\n",
    "x <<= 2; y >>= 3; z **= 4; a != b; c == d; e <= f; g >= h; i && j || !k",
    "std::vector<std::pair<int, std::string>> v{{1, \"a\"}, {2, \"b\"}};",
    "$$\\int_0^\\infty e^{-x^2} dx = \\frac{\\sqrt{\\pi}}{2}$$",
    "{\"name\": \"GenieX\", \"version\": [0, 1, 0], \"ok\": true, \"ratio\": 0.75, \"none\": null}",
    "[{\"role\": \"user\", \"content\": \"hi\"}, {\"role\": \"assistant\", \"content\": \"hello\"}]",
    "https://example.com/path/to/page?query=value&other=123#fragment",
    "http://user:pass@localhost:8080/a%20b/c.html",
    "mailto:someone@example.org and ftp://files.example.net/pub/file.tar.gz",
    "Visit www.hf.co/HuggingFaceTB/SmolLM2-135M-Instruct for details.",
    "<|im_start|>user\nhi<|im_end|>",
    "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n",
    "<|endoftext|>",
    "text<|endoftext|>more text",
    "<|im_start|><|im_end|><|endoftext|>",
    "<|im_start|assistant",
    "< |im_start| >",
    "<|im_start|><|im_start|>nested<|im_end|><|im_end|>",
    "<repo_name>geniex<file_sep>src/main.cpp<filename>x.py<gh_stars>100",
    "<issue_start>bug<issue_comment>fixed<issue_closed>",
    "<jupyter_start><jupyter_text>md<jupyter_code>print(1)<jupyter_output>1<empty_output><jupyter_script>",
    "<reponame> vs <repo_name> vs <repo_nam",
    " <|im_end|> spaces around <|im_end|> ",
    "\ud83d\ude00 \ud83d\ude03 \ud83d\ude04",
    "\ud83d\udc68\u200d\ud83d\udc69\u200d\ud83d\udc67\u200d\ud83d\udc66 family",
    "\ud83d\udc69\ud83c\udffd\u200d\ud83d\udcbb technologist with skin tone",
    "\ud83c\uddfa\ud83c\uddf8\ud83c\uddef\ud83c\uddf5\ud83c\udde9\ud83c\uddea flags",
    "\ud83c\udff3\ufe0f\u200d\ud83c\udf08 rainbow flag",
    "\u2764\ufe0f heart with variation selector",
    "\ud83d\udc4d\ud83c\udffb\ud83d\udc4d\ud83c\udffc\ud83d\udc4d\ud83c\udffd\ud83d\udc4d\ud83c\udffe\ud83d\udc4d\ud83c\udfff",
    "keycaps 1\ufe0f\u20e3 #\ufe0f\u20e3",
    "\u4f60\u597d\uff0c\u4e16\u754c\uff01\u4eca\u5929\u5929\u6c14\u5f88\u597d\u3002",
    "\u673a\u5668\u5b66\u4e60\u662f\u4eba\u5de5\u667a\u80fd\u7684\u4e00\u4e2a\u5206\u652f\u3002",
    "\u3053\u3093\u306b\u3061\u306f\u4e16\u754c\u3002\u30ab\u30bf\u30ab\u30ca\u3068\u3072\u3089\u304c\u306a\u3002",
    "\u6771\u4eac\u306f\u65e5\u672c\u306e\u9996\u90fd\u3067\u3059\u3002",
    "\uc548\ub155\ud558\uc138\uc694 \uc138\uacc4! \ud55c\uad6d\uc5b4 \ud14d\uc2a4\ud2b8\uc785\ub2c8\ub2e4.",
    "\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645! \u0647\u0630\u0627 \u0646\u0635 \u0639\u0631\u0628\u064a.",
    "\u0928\u092e\u0938\u094d\u0924\u0947 \u0926\u0941\u0928\u093f\u092f\u093e! \u092f\u0939 \u0939\u093f\u0902\u0926\u0940 \u0939\u0948\u0964",
    "\u041f\u0440\u0438\u0432\u0435\u0442, \u043c\u0438\u0440! \u042d\u0442\u043e \u0440\u0443\u0441\u0441\u043a\u0438\u0439 \u0442\u0435\u043a\u0441\u0442.",
    "\u0393\u03b5\u03b9\u03ac \u03c3\u03bf\u03c5 \u039a\u03cc\u03c3\u03bc\u03b5! \u0395\u03bb\u03bb\u03b7\u03bd\u03b9\u03ba\u03ac.",
    "\u05e9\u05dc\u05d5\u05dd \u05e2\u05d5\u05dc\u05dd",
    "\u0e2a\u0e27\u0e31\u0e2a\u0e14\u0e35\u0e0a\u0e32\u0e27\u0e42\u0e25\u0e01",
    "Ti\u1ebfng Vi\u1ec7t c\u00f3 d\u1ea5u",
    "caf\u00e9 na\u00efve r\u00e9sum\u00e9 fa\u00e7ade co\u00f6perate \u00fcber Stra\u00dfe",
    "cafe\u0301 nai\u0308ve (combining marks)",
    "Z\u0351\u036b\u0343\u036a\u0302\u036b\u033d\u034f\u0334\u0319\u0324\u031e\u0349\u035a\u032f\u031e\u0320\u034dA\u036b\u0357\u0334\u0362\u0335\u031c\u0330\u0354L\u0368\u0367\u0369\u0358\u0320G\u0311\u0357\u030e\u0305\u035b\u0341\u0334\u033b\u0348\u034d\u0354\u0339O\u0342\u030c\u030c\u0358\u0328\u0335\u0339\u033b\u031d\u0333",
    "\u00c5ngstr\u00f6m \u212b vs \u00c5 (NFC vs NFD)",
    "\ufb01 ligature, \u2460 circled, \uff21\uff22\uff23 fullwidth",
    "no\u00a0break\u00a0space and\u2009thin\u2009space and\u3000ideographic",
    "next line\u0085char and mongolian\u180evowel sep",
    "zero\u200bwidth\u200cjoiner\u200dtest\ufeffbom",
    "line\u2028separator\u2029paragraph",
    "emoji at end \ud83d\ude80",
    "\ud83d\ude80\ud83d\ude80\ud83d\ude80\ud83d\ude80\ud83d\ude80",
    "math: \u2200x\u2208\u211d, x\u00b2 \u2265 0; \u2211 \u220f \u221a \u221e \u2248 \u2260",
    "arrows \u2190 \u2191 \u2192 \u2193 \u21d2 \u27f9 and box \u2500\u2502\u250c\u2510",
    "currency $100 \u20ac50 \u00a330 \u00a51000 \u20b9500 \u20bf0.1",
    "punctuation!!! ??? ... --- ___ *** ### @@@ %%% ^^^ &&& ((( ))) [[[ ]]] {{{ }}}",
    "\"double\" 'single' `back` \u201ccurly\u201d \u2018curly\u2019 \u00abguillemets\u00bb",
    "a.b.c,d;e:f!g?h",
    "...",
    "\u2014em dash\u2013en dash",
    "CamelCaseIdentifier snake_case_identifier kebab-case-identifier SCREAMING_CASE",
    "getHTTPResponseCode XMLHttpRequest iOS macOS",
    "e.g. i.e. etc. Mr. Dr. U.S.A.",
    "A",
    "z",
    "7",
    "!",
    "\n",
    "\t",
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    "the the the the the the the the the the",
    "Supercalifragilisticexpialidocious antidisestablishmentarianism",
    "pneumonoultramicroscopicsilicovolcanoconiosis",
]

WORDS = ("the quick brown fox jumps over lazy dog model token runtime device phone laptop "
         "GPU NPU CPU kernel tensor quantize batch stream cache memory graph schedule "
         "Hello World GenieX SmolLM Llama Qwen apple banana cherry").split()
SCRIPTS = [
    "\u4e2d\u6587\u6d4b\u8bd5", "\u65e5\u672c\u8a9e", "\ud55c\uad6d\uc5b4", "\u0627\u0644\u0639\u0631\u0628\u064a\u0629",
    "\u0939\u093f\u0928\u094d\u0926\u0940", "\u0440\u0443\u0441\u0441\u043a\u0438\u0439", "\u03b5\u03bb\u03bb\u03b7\u03bd\u03b9\u03ba\u03ac",
    "\u05e2\u05d1\u05e8\u05d9\u05ea", "\u0e44\u0e17\u0e22", "T\u00fcrk\u00e7e", "\u0a2a\u0a70\u0a1c\u0a3e\u0a2c\u0a40",
    "\u1403\u14c4\u1483\u144e\u1450\u1466",
]
EMOJI = ["\ud83d\ude00", "\ud83d\udc4b\ud83c\udffd", "\ud83c\uddeb\ud83c\uddf7", "\ud83d\udc68\u200d\ud83d\udcbb",
         "\u2728", "\ud83e\udd16", "\ud83d\udd25", "\ud83c\udf89", "\u2764\ufe0f", "\ud83e\uddd1\u200d\ud83d\ude80"]
PUNCT = list(".,;:!?-_()[]{}<>/\\|@#$%^&*+=~`'\"")
WS = [" ", "  ", "   ", "\t", "\n", "\n\n", " \n", "\r\n", "\t\t", "    ", " \t\n "]
SPECIAL = ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<file_sep>", "<jupyter_code>"]
CONTRACTIONS = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'T", "'RE", "'VE", "'M", "'LL", "'D", "'Ll", "'rE"]


def fix_surrogates(s):
    """Joins the surrogate pairs written as \\ud83d\\ude00 escapes above into real characters."""
    return s.encode("utf-16-le", "surrogatepass").decode("utf-16-le")


def random_piece(rng):
    kind = rng.randrange(10)
    if kind == 0:
        return rng.choice(WORDS)
    if kind == 1:
        return str(rng.randrange(10 ** rng.randrange(1, 15)))
    if kind == 2:
        return rng.choice(SCRIPTS)
    if kind == 3:
        return rng.choice(EMOJI)
    if kind == 4:
        return "".join(rng.choice(PUNCT) for _ in range(rng.randrange(1, 4)))
    if kind == 5:
        return rng.choice(WS)
    if kind == 6:
        return rng.choice(WORDS) + rng.choice(CONTRACTIONS)
    if kind == 7:
        return rng.choice(SPECIAL) if rng.random() < 0.5 else rng.choice(WORDS).upper()
    if kind == 8:
        return chr(rng.choice([rng.randrange(0x20, 0x7F), rng.randrange(0xA0, 0x2FF), rng.randrange(0x370, 0x52F),
                               rng.randrange(0x3040, 0x30FF), rng.randrange(0x4E00, 0x9FFF), rng.randrange(0xAC00, 0xD7A3),
                               rng.randrange(0x1F300, 0x1FAFF), rng.randrange(0x2000, 0x2BFF)]))
    return rng.choice(WORDS).capitalize()


ALL_SPECIAL = SPECIAL + [
    "<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>",
    "<|eom_id|>", "<|python_tag|>", "<|finetune_right_pad_id|>", "<|reserved_special_token_5|>",
    "<s>", "</s>", "<unk>", "[INST]", "[/INST]", "[TOOL_CALLS]", "[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]",
    "[TOOL_RESULTS]", "[/TOOL_RESULTS]", "[SYSTEM_PROMPT]", "<bos>", "<eos>", "<pad>", "<mask>",
    "<start_of_turn>", "<end_of_turn>", "<start_of_image>", "<end_of_image>", "<image_soft_token>",
    "<|vision_start|>", "<|vision_end|>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>",
    "<tool_call>", "</tool_call>", "<think>", "</think>", "<tool_response>", "<|box_start|>",
    "<0x41>", "<0xFF>", "\u2581", "\u2581\u2581", "<unused0>", "<unused99>", "[control_8]",
]

EXTRA = [
    "\u2581leading lower-one-eighth block (SentencePiece's space marker)",
    "a\u2581b\u2581\u2581c \u2581 d",
    "<0x41><0x42> byte-fallback spellings <0x0A>",
    "\\xff\\xfe not bytes but backslashes",
    "\ufffd replacement character \ufffd\ufffd",
    "\ufeffBOM at start",
    "[INST] What is the capital of France? [/INST]",
    "<s>[INST] hi [/INST] hello</s>[INST] again [/INST]",
    "[INST]no spaces[/INST]answer</s>",
    "<start_of_turn>user\nhello<end_of_turn>\n<start_of_turn>model\n",
    "<bos><start_of_turn>user\nWrite a poem<end_of_turn>",
    "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nYou are a bot.<|eot_id|>",
    "<|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n",
    "<|im_start|>assistant\n<think>\nreasoning\n</think>\n\nanswer<|im_end|>",
    "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
    " " * 100,
    "\n" * 40,
    "\t" * 33,
    "x" + " " * 257 + "y",
    "a" * 300,
    "ab" * 200,
    "\u00e9" * 120,
    "\ud83d\ude00" * 64,
    "9" * 200,
    "  \n  \n\t\n   \r\n\r\n  ",
    "The quick brown fox jumps over the lazy dog. " * 12,
    "Le renard brun rapide saute par-dessus le chien paresseux. \u00c0 bient\u00f4t, gar\u00e7on !",
    "Der schnelle braune Fuchs springt \u00fcber den faulen Hund. Gr\u00f6\u00dfe, \u00c4rger, \u00d6l.",
    "El veloz murci\u00e9lago hind\u00fa com\u00eda feliz cardillo y kiwi. \u00bfQu\u00e9? \u00a1S\u00ed!",
    "\u0421\u044a\u0435\u0448\u044c \u0436\u0435 \u0435\u0449\u0451 \u044d\u0442\u0438\u0445 \u043c\u044f\u0433\u043a\u0438\u0445 \u0444\u0440\u0430\u043d\u0446\u0443\u0437\u0441\u043a\u0438\u0445 \u0431\u0443\u043b\u043e\u043a.",
    "\u1780\u17d2\u1793\u17bb\u17c6\u1787\u17b6\u1793\u17b7\u179f\u17d2\u179f\u17b7\u178f Khmer",
    "\u10e5\u10d0\u10e0\u10d7\u10e3\u10da\u10d8 Georgian \u0540\u0561\u0575\u0565\u0580\u0565\u0576 Armenian",
    "\u12a0\u121b\u122d\u129b Amharic \u0dc3\u0dd2\u0d82\u0dc4\u0dbd Sinhala \u0ba4\u0bae\u0bbf\u0bb4\u0bcd Tamil",
    "\U0001d400\U0001d401 math bold, \U00010348 gothic, \U0001f9ec\U0001faa9 new emoji",
]


def random_piece2(rng):
    if rng.random() < 0.15:
        return rng.choice(ALL_SPECIAL)
    if rng.random() < 0.1:
        return " " * rng.randrange(1, 20)
    return random_piece(rng)


def random_code(rng):
    name = rng.choice(WORDS).lower()
    lang = rng.randrange(5)
    n = rng.randrange(100)
    if lang == 0:
        return f"def {name}_{n}(x, y={n}):\n    return x * y + {rng.random():.4f}\n"
    if lang == 1:
        return f"int {name}{n}(int a) {{\n\treturn a << {n % 8};\n}}\n"
    if lang == 2:
        return f"let {name} = [{', '.join(str(rng.randrange(1000)) for _ in range(5))}];\n"
    if lang == 3:
        return f"<{name} id=\"{n}\">{rng.choice(WORDS)}</{name}>"
    return json.dumps({name: n, "list": [rng.randrange(50) for _ in range(3)], "s": rng.choice(SCRIPTS)},
                      ensure_ascii=False)


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else DEFAULT_OUT
    rng = random.Random(20240531)
    lines = list(BASE)
    for _ in range(380):
        lines.append("".join(random_piece(rng) for _ in range(rng.randrange(1, 14))))
    for _ in range(80):
        lines.append(random_code(rng))
    for _ in range(40):  # whitespace-heavy
        lines.append("".join(rng.choice(WS + ["x", "1", "\u00e9", "\ud83d\ude00"]) for _ in range(rng.randrange(1, 12))))
    for _ in range(40):  # digit-heavy
        lines.append("".join(rng.choice(["0123456789", " ", ".", ",", "-", "a", "\u0663", "\u00bd"])[:rng.randrange(1, 6)]
                             for _ in range(rng.randrange(1, 8))))
    # Second part (appended so that the first 650 lines stay as they were): literals of every
    # supported family's special tokens, longer whitespace runs, SentencePiece's own markers,
    # byte-fallback lookalikes, and more mixtures, to reach over 2,000 distinct strings.
    rng2 = random.Random(20261130)
    lines.extend(EXTRA)
    for _ in range(900):
        lines.append("".join(random_piece2(rng2) for _ in range(rng2.randrange(1, 18))))
    for _ in range(200):
        lines.append(random_code(rng2) + (random_code(rng2) if rng2.random() < 0.3 else ""))
    for _ in range(120):  # long whitespace runs mixed with text
        lines.append("".join(rng2.choice(WS + [" " * rng2.randrange(5, 70), "\n" * rng2.randrange(2, 9),
                                               "\t" * rng2.randrange(2, 6), "x", "y z", "\u00e9", "1"])
                             for _ in range(rng2.randrange(1, 10))))
    for _ in range(100):  # numbers
        lines.append(" ".join(str(rng2.choice([rng2.randrange(10 ** 12), rng2.random() * 10 ** rng2.randrange(-3, 9),
                                               -rng2.randrange(10 ** 6)])) for _ in range(rng2.randrange(1, 6))))
    for _ in range(150):  # special-token literals in context, all families
        lines.append("".join(rng2.choice(ALL_SPECIAL) if rng2.random() < 0.4 else random_piece2(rng2)
                             for _ in range(rng2.randrange(1, 9))))
    seen = set()
    uniq = []
    for s in map(fix_surrogates, lines):
        if s not in seen:
            seen.add(s)
            uniq.append(s)
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out, "w", encoding="utf-8") as f:
        for s in uniq:
            f.write(json.dumps({"text": s}, ensure_ascii=False) + "\n")
    print(f"wrote {len(uniq)} lines to {out}")


if __name__ == "__main__":
    main()
