#!/usr/bin/env python3
"""Regenerates the tokenizer fixtures in tests/data/tokenizer/ from Hugging Face
and sentencepiece, the independent references that tests/tokenizer_test.cc and
tests/chat_template_test.cc compare kascade against.

    python3 tools/gen_tokenizer_golden.py [--model PATH.gguf]

Needs: gguf, tokenizers, transformers, sentencepiece, jinja2 (not needed by the tests).

Writes:
  smollm2_golden.jsonl  One JSON object per line. The first holds "meta"; each
      other line holds "text" and the ids of it under four pre-tokenizers, all
      with the default model's vocabulary and merges, specials parsed (a
      variant other than smollm is left out where its ids equal smollm's):
        smollm  the model author's tokenizer (HuggingFaceTB/SmolLM2's tokenizer.json:
                Digits(individual_digits) then ByteLevel with the GPT-2 regex), which
                is what llama.cpp's "smollm" pre-tokenizer names;
        gpt2    ByteLevel with the GPT-2 regex alone;
        llama3  Split(Llama 3 regex) then ByteLevel, ignore_merges (Llama 3's tokenizer.json);
        qwen2   Split(Qwen2 regex) then ByteLevel.
      Lines whose text contains a special token also hold "smollm_plain": the ids with
      special tokens treated as text (tokenizers' encode_special_tokens).
      The regexes are taken from transformers itself, not retyped here.
  spm_tiny.json  A SentencePiece BPE model trained here (byte fallback, identity
      normalisation, dummy prefix: Llama's settings) as GGUF-style arrays, and
      sentencepiece's own ids for a set of strings.
  chat_templates.json  Chat templates (SmolLM2's from the model, Qwen2, Qwen2.5,
      Llama 3, Llama 3.1) rendered with jinja2 as transformers' apply_chat_template
      does, for several conversations.

It also loads the model with transformers (AutoTokenizer, gguf_file=...) and
reports how that conversion differs from the author's tokenizer.
"""
import argparse
import io
import json
import os
import random
import sys
import unicodedata

HERE = os.path.dirname(os.path.abspath(__file__))
OUT_DIR = os.path.join(HERE, "..", "tests", "data", "tokenizer")
DEFAULT_MODEL = os.path.expanduser("~/.cache/kascade/models/SmolLM2-135M-Instruct.Q4_1.gguf")
SEED = 20250611

# ----------------------------------------------------------------------------
# Test strings


WORDS = ("the quick brown fox jumps over lazy dog model token attention sparse dense layer "
         "head query key value cache prompt context window anchor budget kernel tensor memory "
         "Hello World Python Rust C++ GPU CPU LLM Kascade SmolLM Llama Qwen HuggingFace").split()
CONTRACTIONS = ["I'm", "don't", "it's", "they'll", "we've", "you'd", "she's", "can't", "won't",
                "I'M", "DON'T", "IT'S", "They'LL", "We'VE", "YOU'D", "o'clock", "rock'n'roll",
                "'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'RE", "'\u017ft", "x'\u017f"]
SCRIPTS = {
    "cjk": ["你好，世界！", "这是一个测试。", "日本語のテキスト", "カタカナとひらがな", "東京都", "한국어 텍스트입니다",
            "中文标点：「引号」、顿号。", "𠀀𠀁𪚥", "漢字かな交じり文"],
    "arabic": ["مرحبا بالعالم", "اللغة العربية", "٣٤٥ رقم", "كتاب", "السَّلَامُ عَلَيْكُمْ"],
    "hebrew": ["שלום עולם", "עִבְרִית"],
    "cyrillic": ["Привет, мир!", "Съешь же ещё этих мягких французских булок", "Україна", "ЁЛКА"],
    "greek": ["Γειά σου Κόσμε", "αβγδε ΑΒΓΔΕ", "ΣΊΣΥΦΟΣ"],
    "indic": ["नमस्ते दुनिया", "हिन्दी", "தமிழ்", "বাংলা ভাষা", "ગુજરાતી", "ಕನ್ನಡ", "१२३४"],
    "thai": ["สวัสดีชาวโลก", "ภาษาไทย"],
    "latin": ["Café naïve résumé façade Ångström", "Straße Übermaß", "ﬁnance ﬂow", "Ærøskøbing", "Łódź żółć",
              "İstanbul ıi", "ǅungla ǈ ǋ", "Dvořák"],
    "combining": ["e\u0301", "a\u0308o\u0308u\u0308", "n\u0303", "Z\u0351\u036b\u0343\u036a\u0302\u036b\u033d\u034f\u0334\u0319"
                  "\u0324\u031e\u0349\u035a\u032f\u031e\u0320\u034dA\u036b\u0357\u0334", "\u0301\u0301abc", "ก\u0e31\u0e49",
                  "\u20dd", "x\u20e3", "é\u0327"],
    "other": ["ᚠᛇᚻ᛫ᛒᛦᚦ", "ꦗꦮ", "ትግርኛ", "ᏣᎳᎩ", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢", "𝟘𝟙𝟚", "ℌℑℜ", "ⅠⅡⅢⅻ", "½¼¾", "²³¹⁴", "①②③",
              "㊀㊁", "𐌰𐌱𐌲", "\U0001d11e music", "\u00ad soft hyphen", "\u200b zero width", "a\u200db", "\ufeffbom",
              "\u2028line sep\u2029para", "\ue000 private", "\U000f0000"],
}
EMOJI = ["😀", "🙂🙃", "👍🏽", "👨\u200d👩\u200d👧\u200d👦", "🏳️\u200d🌈", "🇫🇷🇯🇵", "1️⃣", "❤️", "🧑🏿\u200d💻",
         "🤖 robot", "☕️", "👩🏻\u200d🦰", "🫠", "🏴\U000e0067\U000e0062\U000e0065\U000e006e\U000e0067\U000e007f"]
WHITESPACE = [" ", "  ", "   ", "\t", "\t\t", "\n", "\n\n", "\r\n", "\r", " \n ", "\u00a0", "\u3000", "\u2003",
              "\u2009", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x1f", "\x85", "\u1680", "\u202f", "\u205f",
              "    ", "\n\t", " \t\n"]
PUNCT = ["!", "?", ".", ",", ";", ":", "...", "!!!", "?!", "--", "---", "—", "–", "(", ")", "[", "]", "{", "}",
         "<", ">", "<<", ">>", "/", "\\", "|", "@", "#", "$", "%", "^", "&", "*", "_", "=", "+", "~", "`", "'",
         '"', "''", '""', "«", "»", "¿", "¡", "„", "“", "”", "‘", "’", "§", "¶", "•", "…", "©", "®", "™", "°"]
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<repo_name>", "<file_sep>", "<filename>",
            "<gh_stars>", "<issue_start>", "<jupyter_code>", "<empty_output>"]

CODE = [
    'def fibonacci(n: int) -> int:\n    if n < 2:\n        return n\n    return fibonacci(n - 1) + fibonacci(n - 2)\n',
    'for (int i = 0; i < n; ++i) {\n\tsum += a[i] * b[i];\n}\n',
    '#include <vector>\nstd::vector<float> x(1024, 0.0f);\nauto y = std::move(x);  // moved\n',
    'fn main() {\n    let v: Vec<u32> = (0..10).map(|x| x * x).collect();\n    println!("{:?}", v);\n}\n',
    'const f = async (url) => { const r = await fetch(url); return r.json(); };\n',
    'SELECT id, name FROM users WHERE age >= 18 AND name LIKE \'%son\' ORDER BY id DESC;',
    '<!DOCTYPE html>\n<html lang="en"><body><p class="x">Hi &amp; bye</p></body></html>',
    '{"key": [1, 2.5, -3e10, true, null], "nested": {"a": "b\\n"}}',
    '#!/bin/bash\nset -euo pipefail\nfor f in *.txt; do echo "$f" | wc -c; done\n',
    'package main\n\nimport "fmt"\n\nfunc main() {\n\tfmt.Println("hello")\n}\n',
    'public static void main(String[] args) { System.out.println(args.length); }',
    'x = [i**2 for i in range(100) if i % 3 == 0]\nprint(f"{x!r:>10}")',
    '    \n    return self._cache[key]\n\n\n',
    'matrix[i][j] += alpha * (A[i][k] @ B[k][j]) - beta/2;',
    '#define MAX(a,b) ((a)>(b)?(a):(b))\n',
    '$ git commit -m "fix: handle \'quotes\'" && git push origin HEAD:main',
    'λx.λy.x y  ∀x∈ℝ: x²≥0  ∑_{i=1}^{n} i = n(n+1)/2',
]

SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "It's a truth universally acknowledged, that a single man in possession of a good fortune, must be in want of a wife.",
    "Kascade reuses the top-k indices of anchor layers in the layers that follow.",
    "    Indented text with trailing spaces    ",
    "Numbers: 3.14159, 2,718, 1e-9, -42, +7, 0x1F, 0b1010, 1_000_000.",
    "Call me at +1 (555) 123-4567 or e-mail me@example.com!",
    "URL: https://huggingface.co/HuggingFaceTB/SmolLM2-135M-Instruct?x=1&y=2#frag",
    "He said: \"Don't stop believin'\" -- and left.",
    "Price: $1,299.99 (€1.099,00; £999; ¥150000)",
    "Dates: 2024-01-31, 31/01/2024, Jan 31st 2024, 12:30:45.123Z",
]


def random_number(rng):
    kind = rng.randrange(6)
    if kind == 0:
        return str(rng.randrange(10))
    if kind == 1:
        return str(rng.randrange(10 ** rng.randrange(2, 8)))
    if kind == 2:
        return "".join(rng.choice("0123456789") for _ in range(rng.randrange(10, 60)))
    if kind == 3:
        return f"{rng.uniform(-1e6, 1e6):.{rng.randrange(1, 8)}f}"
    if kind == 4:
        return rng.choice(["١٢٣", "۴۵۶", "१२३", "১২৩", "๑๒๓", "１２３", "²", "½", "Ⅻ", "⑦", "𝟠"])
    return f"{rng.randrange(1, 10)}{rng.choice(['st', 'nd', 'rd', 'th', '%', 'px', 'ms', 'GB', 'x', ' km'])}"


def random_unicode_char(rng):
    """An assigned code point (Unicode 14, so every library involved knows it) from a random block."""
    ranges = [(0x20, 0x7E), (0xA0, 0x24F), (0x370, 0x52F), (0x590, 0x6FF), (0x900, 0xDFF), (0xE00, 0xEFF),
              (0x1100, 0x11FF), (0x1E00, 0x1FFF), (0x2000, 0x2BFF), (0x3000, 0x30FF), (0x4E00, 0x9FFF),
              (0xAC00, 0xD7A3), (0xFB00, 0xFFFD), (0x10000, 0x1034F), (0x1D400, 0x1D7FF), (0x1F300, 0x1FAFF),
              (0x20000, 0x2A6DF)]
    while True:
        first, last = rng.choice(ranges)
        cp = rng.randint(first, last)
        if 0xD800 <= cp <= 0xDFFF:
            continue
        if unicodedata.category(chr(cp)) not in ("Cn", "Cs"):
            return chr(cp)


def random_mix(rng, length):
    parts = []
    while sum(len(p) for p in parts) < length:
        kind = rng.randrange(10)
        if kind == 0:
            parts.append(rng.choice(WORDS))
        elif kind == 1:
            parts.append(rng.choice(WHITESPACE))
        elif kind == 2:
            parts.append(rng.choice(PUNCT))
        elif kind == 3:
            parts.append(random_number(rng))
        elif kind == 4:
            parts.append(rng.choice(rng.choice(list(SCRIPTS.values()))))
        elif kind == 5:
            parts.append(rng.choice(EMOJI))
        elif kind == 6:
            parts.append(rng.choice(CONTRACTIONS))
        elif kind == 7:
            parts.append(random_unicode_char(rng))
        elif kind == 8:
            parts.append(" " + rng.choice(WORDS))
        else:
            parts.append(rng.choice(WORDS).upper())
    return "".join(parts)


def chat_markup(rng):
    turns = []
    for _ in range(rng.randrange(1, 4)):
        role = rng.choice(["system", "user", "assistant"])
        body = rng.choice(SENTENCES + CODE + [random_mix(rng, 30)])
        turns.append(f"<|im_start|>{role}\n{body}<|im_end|>\n")
    if rng.random() < 0.5:
        turns.append("<|im_start|>assistant\n")
    return "".join(turns)


def make_strings(rng):
    strings = ["", " ", "  ", "\n", "\n\n\n", "\t", "a", "A", "0", "00", "  a", "a  ", " a ", "a  b", "a \n b",
               "hello\n\nworld", "x\r\ny", "  \n  \n", "    x", "\t\tx", "word 1", "word  1", "  12", "a1b2c3",
               "'s", "''s", "'", "''", "it's", "IT'S", "\u017f", "'\u017f", "'\u017ft", "  'll", "\n's",
               "\u00a0\u00a0x", " \u00a0x", "\u3000x", "x\x0by", "\x85x", "\x1cx", "!!!???", "...", "—–-",
               "a" * 300, " " * 200, "\n" * 50, "ab" * 200, "1" * 120, "😀" * 40, "é" * 100,
               "<|im_start|>", "<|im_end|>", "<|im_start|><|im_end|>", "<|im_start|user", "<|im_start|>>",
               "<<|im_start|>", "a<|endoftext|>b", "<|endoftext|><|endoftext|>", "text <|im_end|> text",
               "<repo_name>kascade<file_sep>main.cc", "<jupyter_code>print(1)<jupyter_output>1<empty_output>"]
    strings += SENTENCES + CODE + CONTRACTIONS + EMOJI + WHITESPACE + PUNCT + SPECIALS
    for group in SCRIPTS.values():
        strings += group
    for _ in range(120):  # sentences of words with contractions, numbers and punctuation
        n = rng.randrange(3, 20)
        strings.append(" ".join(rng.choice(WORDS + CONTRACTIONS + [random_number(rng)] + PUNCT) for _ in range(n)))
    for _ in range(120):  # whitespace runs of every kind between words
        strings.append("".join(rng.choice(WORDS) + "".join(rng.choice(WHITESPACE) for _ in range(rng.randrange(1, 5)))
                               for _ in range(rng.randrange(2, 8))))
    for _ in range(80):  # digits and long numbers in text
        strings.append(" ".join(random_number(rng) for _ in range(rng.randrange(1, 8))))
    for _ in range(80):  # a script with spaces, punctuation and numbers
        group = rng.choice(list(SCRIPTS.values()))
        strings.append(rng.choice(["", " ", "\n"]).join(rng.choice(group) + rng.choice(["", " ", ", ", "。", "!"])
                                                          for _ in range(rng.randrange(1, 6))))
    for _ in range(60):  # emoji in text
        strings.append(" ".join(rng.choice(EMOJI + WORDS) for _ in range(rng.randrange(2, 10))))
    for _ in range(80):  # code fragments and mutations of them
        code = rng.choice(CODE)
        start = rng.randrange(len(code))
        strings.append(code[start:start + rng.randrange(10, 120)])
    for _ in range(60):  # punctuation runs
        strings.append("".join(rng.choice(PUNCT + [" ", "a", "1"]) for _ in range(rng.randrange(2, 30))))
    for _ in range(80):  # chat markup with special tokens
        strings.append(chat_markup(rng))
    for _ in range(200):  # random mixtures
        strings.append(random_mix(rng, rng.randrange(1, 80)))
    for _ in range(60):  # random code points
        strings.append("".join(random_unicode_char(rng) for _ in range(rng.randrange(1, 20))))
    for _ in range(6):  # long mixtures
        strings.append(random_mix(rng, rng.randrange(500, 1500)))
    seen = set()
    unique = []
    for s in strings:
        if s not in seen:
            seen.add(s)
            unique.append(s)
    return unique


# ----------------------------------------------------------------------------
# Byte-level BPE references over the model's vocabulary


def read_gguf_tokenizer(path):
    from gguf import GGUFReader
    reader = GGUFReader(path)

    def field(name):
        f = reader.fields.get(name)
        return None if f is None else f.contents()
    return {"tokens": field("tokenizer.ggml.tokens"), "types": field("tokenizer.ggml.token_type"),
            "merges": field("tokenizer.ggml.merges"), "pre": field("tokenizer.ggml.pre"),
            "chat_template": field("tokenizer.chat_template")}


def build_byte_level(info, pre_tokenizer, ignore_merges=False):
    from tokenizers import AddedToken, Tokenizer, models
    vocab = {token: i for i, token in enumerate(info["tokens"])}
    assert len(vocab) == len(info["tokens"]), "duplicate tokens"
    merges = [tuple(m.split(" ", 1)) for m in info["merges"]]
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, ignore_merges=ignore_merges))
    tok.pre_tokenizer = pre_tokenizer
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False)
                            for t, ty in zip(info["tokens"], info["types"]) if ty == 3])
    user_defined = [AddedToken(t, special=False, normalized=False)
                    for t, ty in zip(info["tokens"], info["types"]) if ty == 4]
    if user_defined:
        tok.add_tokens(user_defined)
    return tok


def byte_level_variants(info):
    from tokenizers import Regex, pre_tokenizers
    from transformers.integrations.gguf.gguf_tokenizer_mapping import GGUF_PRE_TOKENIZER_SPLITS

    def split_then_bytes(regex):
        return pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(regex), behavior="isolated", invert=False),
                                        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    return {
        "smollm": build_byte_level(info, pre_tokenizers.Sequence([
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True)])),
        "gpt2": build_byte_level(info, pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)),
        "llama3": build_byte_level(info, split_then_bytes(GGUF_PRE_TOKENIZER_SPLITS["llama-bpe"]), ignore_merges=True),
        "qwen2": build_byte_level(info, split_then_bytes(GGUF_PRE_TOKENIZER_SPLITS["qwen2"])),
    }


def compare_with_transformers(model_path, strings, variants):
    """How transformers' own GGUF conversion of the tokenizer tokenizes the strings."""
    from transformers import AutoTokenizer
    hf = AutoTokenizer.from_pretrained(os.path.dirname(model_path), gguf_file=os.path.basename(model_path))
    counts = {name: 0 for name in variants}
    example = None
    for s in strings:
        ids = hf.encode(s, add_special_tokens=False)
        for name, tok in variants.items():
            if tok.encode(s, add_special_tokens=False).ids != ids:
                counts[name] += 1
                if name == "smollm" and example is None:
                    example = s
    return {"pre_tokenizer": str(hf.backend_tokenizer.pre_tokenizer), "mismatches": counts,
            "first_difference_from_author": example}


# ----------------------------------------------------------------------------
# SentencePiece


def sentencepiece_fixture(strings, rng):
    import sentencepiece as spm
    # Mostly English and code, a little CJK and Cyrillic: rarer characters are left to byte fallback.
    corpus = SENTENCES + CODE + SCRIPTS["cjk"] + SCRIPTS["cyrillic"] + CONTRACTIONS
    corpus += [" ".join(rng.choice(WORDS + CONTRACTIONS) for _ in range(12)) for _ in range(400)]
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(corpus), model_writer=model, model_type="bpe", vocab_size=600,
        byte_fallback=True, normalization_rule_name="identity", add_dummy_prefix=True,
        remove_extra_whitespaces=False, split_digits=True, allow_whitespace_only_pieces=True,
        character_coverage=0.98, user_defined_symbols=["<sep>"], unk_id=0, bos_id=1, eos_id=2, pad_id=-1,
        num_threads=1, shuffle_input_sentence=False, max_sentence_length=100000, minloglevel=2)
    sp = spm.SentencePieceProcessor(model_proto=model.getvalue())
    tokens, scores, types = [], [], []
    for i in range(sp.get_piece_size()):
        tokens.append(sp.id_to_piece(i))
        scores.append(sp.get_score(i))
        if sp.is_unknown(i):
            types.append(2)
        elif sp.is_control(i):
            types.append(3)
        elif sp.is_byte(i):
            types.append(6)
        elif sp.is_unused(i):
            types.append(5)
        elif tokens[-1] == "<sep>":
            types.append(4)
        else:
            types.append(1)
    cases = [s for s in strings if len(s) < 400][:500] + ["a<sep>b", "<sep>", "x <sep> y", "  lead", "trail  "]
    return {"tokens": tokens, "scores": scores, "types": types, "unk": 0, "bos": 1, "eos": 2,
            "cases": [{"text": s, "ids": sp.encode(s)} for s in cases]}


# ----------------------------------------------------------------------------
# Chat templates

QWEN2_TEMPLATE = ("{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
                  "{{ '<|im_start|>system\nYou are a helpful assistant<|im_end|>\n' }}{% endif %}"
                  "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
                  "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")

# Qwen2.5-Instruct's template as its tokenizer_config.json holds it (escapes as Jinja sees them).
QWEN25_TEMPLATE = r"""{%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0]['role'] == 'system' %}
        {{- messages[0]['content'] }}
    {%- else %}
        {{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}
    {%- endif %}
    {{- "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>" }}
    {%- for tool in tools %}
        {{- "\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" }}
{%- else %}
    {%- if messages[0]['role'] == 'system' %}
        {{- '<|im_start|>system\n' + messages[0]['content'] + '<|im_end|>\n' }}
    {%- else %}
        {{- '<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n' }}
    {%- endif %}
{%- endif %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) or (message.role == "assistant" and not message.tool_calls) %}
        {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>' + '\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>' + message.role }}
        {%- if message.content %}
            {{- '\n' + message.content }}
        {%- endif %}
        {%- for tool_call in message.tool_calls %}
            {%- if tool_call.function is defined %}
                {%- set tool_call = tool_call.function %}
            {%- endif %}
            {{- '\n<tool_call>\n{"name": "' }}
            {{- tool_call.name }}
            {{- '", "arguments": ' }}
            {{- tool_call.arguments | tojson }}
            {{- '}\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == "tool" %}
        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\n<tool_response>\n' }}
        {{- message.content }}
        {{- '\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
{%- endif %}
"""

LLAMA3_TEMPLATE = ("{% set loop_messages = messages %}{% for message in loop_messages %}"
                   "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'"
                   "+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}"
                   "{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}"
                   "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}")

# Llama 3.1-Instruct's template (tool branches included: detection must see past them).
LLAMA31_TEMPLATE = r"""{{- bos_token }}
{%- if custom_tools is defined %}
    {%- set tools = custom_tools %}
{%- endif %}
{%- if not tools_in_user_message is defined %}
    {%- set tools_in_user_message = true %}
{%- endif %}
{%- if not date_string is defined %}
    {%- set date_string = "26 Jul 2024" %}
{%- endif %}
{%- if not tools is defined %}
    {%- set tools = none %}
{%- endif %}

{#- This block extracts the system message, so we can slot it into the right place. #}
{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content']|trim %}
    {%- set messages = messages[1:] %}
{%- else %}
    {%- set system_message = "" %}
{%- endif %}

{#- System message + builtin tools #}
{{- "<|start_header_id|>system<|end_header_id|>\n\n" }}
{%- if builtin_tools is defined or tools is not none %}
    {{- "Environment: ipython\n" }}
{%- endif %}
{%- if builtin_tools is defined %}
    {{- "Tools: " + builtin_tools | reject('equalto', 'code_interpreter') | join(", ") + "\n\n"}}
{%- endif %}
{{- "Cutting Knowledge Date: December 2023\n" }}
{{- "Today Date: " + date_string + "\n\n" }}
{%- if tools is not none and not tools_in_user_message %}
    {{- "You have access to the following functions. To call a function, please respond with JSON for a function call." }}
    {{- 'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.' }}
    {{- "Do not use variables.\n\n" }}
    {%- for t in tools %}
        {{- t | tojson(indent=4) }}
        {{- "\n\n" }}
    {%- endfor %}
{%- endif %}
{{- system_message }}
{{- "<|eot_id|>" }}

{%- for message in messages %}
    {%- if not (message.role == 'ipython' or message.role == 'tool' or 'tool_calls' in message) %}
        {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' }}
    {%- elif message.role == "tool" or message.role == "ipython" %}
        {{- "<|start_header_id|>ipython<|end_header_id|>\n\n" }}
        {{- message.content }}
        {{- "<|eot_id|>" }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' }}
{%- endif %}
"""

CONVERSATIONS = [
    [{"role": "user", "content": "Hi!"}],
    [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "What is 2+2?"}],
    [{"role": "user", "content": "Hello"}, {"role": "assistant", "content": "Hi, how can I help?"},
     {"role": "user", "content": "Tell me a joke."}],
    [{"role": "system", "content": "  Padded system prompt.\n"}, {"role": "user", "content": "\n  spaced question  \n"},
     {"role": "assistant", "content": " answer with spaces "}, {"role": "user", "content": "ok"}],
    [{"role": "user", "content": "Unicode: 你好 👋🏽 café\tand tabs\n\nand blank lines"}],
    [{"role": "user", "content": "first"}, {"role": "system", "content": "a late system message"},
     {"role": "user", "content": "second"}],
    [{"role": "user", "content": ""}],
    [{"role": "user", "content": "Write code:\n```python\nprint('x')\n```"}, {"role": "assistant", "content": "Done."}],
]


def render_templates(smollm_template):
    from transformers.utils.chat_template_utils import _compile_jinja_template
    templates = {"smollm2": smollm_template, "qwen2": QWEN2_TEMPLATE, "qwen2.5": QWEN25_TEMPLATE,
                 "llama3": LLAMA3_TEMPLATE, "llama3.1": LLAMA31_TEMPLATE}
    cases = []
    for name, source in templates.items():
        compiled = _compile_jinja_template(source)
        for messages in CONVERSATIONS:
            for add_generation_prompt in (False, True):
                # BOS is left to the tokenizer (add_bos_token), so the template renders it empty.
                text = compiled.render(messages=messages, add_generation_prompt=add_generation_prompt,
                                       bos_token="", eos_token="")
                cases.append({"template": name, "messages": messages,
                              "add_generation_prompt": add_generation_prompt, "expected": text})
    return {"templates": templates, "cases": cases}


# ----------------------------------------------------------------------------


def write_json(path, value):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(value, f, ensure_ascii=False, separators=(",", ":"))
        f.write("\n")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default=DEFAULT_MODEL)
    args = parser.parse_args()
    rng = random.Random(SEED)
    strings = make_strings(rng)
    info = read_gguf_tokenizer(args.model)
    variants = byte_level_variants(info)

    hf_report = compare_with_transformers(args.model, strings, variants)
    meta = {"model": os.path.basename(args.model), "pre": info["pre"], "strings": len(strings), "seed": SEED,
            "transformers_gguf": hf_report}
    os.makedirs(OUT_DIR, exist_ok=True)
    specials = [t for t, ty in zip(info["tokens"], info["types"]) if ty == 3]
    with open(os.path.join(OUT_DIR, "smollm2_golden.jsonl"), "w", encoding="utf-8") as f:
        f.write(json.dumps({"meta": meta}, ensure_ascii=False) + "\n")
        for s in strings:
            record = {"text": s}
            for name, tok in variants.items():
                ids = tok.encode(s, add_special_tokens=False).ids
                if name == "smollm" or ids != record["smollm"]:
                    record[name] = ids
            if any(special in s for special in specials):
                plain = variants["smollm"]
                plain.encode_special_tokens = True
                record["smollm_plain"] = plain.encode(s, add_special_tokens=False).ids
                plain.encode_special_tokens = False
            f.write(json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n")

    write_json(os.path.join(OUT_DIR, "spm_tiny.json"), sentencepiece_fixture(strings, rng))
    write_json(os.path.join(OUT_DIR, "chat_templates.json"), render_templates(info["chat_template"]))
    print(json.dumps(meta, ensure_ascii=False, indent=1))


if __name__ == "__main__":
    sys.exit(main())
