#!/usr/bin/env python3
"""Oracle fixtures for the C++ tokenizer (core/src/tokenizer, tests/core/test_tokenizer.cpp).

Trains two tiny byte-level BPE tokenizers with the Hugging Face `tokenizers` library, shaped like
SmolLM2 (Digits + ByteLevel regex pre-tokenizer, merges saved as "a b" strings) and Qwen2 (NFC,
Split with the Qwen2 regex + ByteLevel without regex, merges saved as ["a", "b"] pairs), and
records what the library produces for a corpus of awkward strings. Also writes malformed
tokenizer.json files for the error tests.

Run:  /root/venv-oracle/bin/python tests/oracle/tokenizer_fixtures.py
Outputs (committed; the C++ tests need no Python):
  tests/data/tokenizers/{smollm2,qwen2}/{tokenizer.json,tokenizer_config.json}
  tests/data/tokenizers/expected.json (per tokenizer: corpus entries; decode_cases: byte-level
    id sequences forming broken UTF-8; pipeline_variants: merge patches over the two tokenizers
    (other Split behaviours, Digits, add_prefix_space, NFKC, added-token flags, templates) with
    the ids of the short corpus strings)
  tests/data/tokenizers/bad/{wordpiece,malformed,no_model}/tokenizer.json
Deterministic: fixed seed, single-threaded training.
"""
import json
import os
import random
import unicodedata

os.environ["TOKENIZERS_PARALLELISM"] = "false"
os.environ["RAYON_NUM_THREADS"] = "1"
os.environ["RAYON_RS_NUM_CPUS"] = "1"

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers  # noqa: E402
from tokenizers import pre_tokenizers, processors, trainers  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "tokenizers")
VOCAB_SIZE = 384  # model vocab + every added token; all ids < 384

QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
                 r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def training_corpus():
    """A few hundred deterministic lines: prose, punctuation, numbers, whitespace, code,
    accents, CJK and emoji."""
    rng = random.Random(1234)
    words = ("the cat sat on mat and it is a small model that reads text with care while "
             "we're testing tokens they'll don't can't I'm you've she'd hello world image "
             "cache memory attention token budget retention gate layer head").split()
    accents = ["café", "naïve", "résumé", "über", "São Paulo", "Ångström", "façade", "jalapeño"]
    cjk = ["你好世界", "机器学习", "日本語のテキスト", "한국어 문장", "注意力机制"]
    emoji = ["🙂", "🚀", "👍🏽", "👩‍💻", "🇫🇷", "❤️", "🎉"]
    code = ["def f(x):\n    return x * 2\n", "for (int i = 0; i < n; ++i) {\n\tsum += a[i];\n}",
            "if x == 1:\n        print('ok')", "std::vector<int32_t> ids;", "{\"key\": [1, 2, 3]}"]
    lines = []
    for i in range(400):
        kind = i % 8
        n = rng.randint(3, 14)
        sentence = " ".join(rng.choice(words) for _ in range(n))
        if kind == 0:
            lines.append(sentence.capitalize() + ".")
        elif kind == 1:
            lines.append(f"{sentence}, {rng.randint(0, 10**rng.randint(1, 9))} items; "
                         f"{rng.random():.3f}!")
        elif kind == 2:
            lines.append(sentence.replace(" ", rng.choice(["  ", "   ", "\t", " \n"])))
        elif kind == 3:
            lines.append(rng.choice(code))
        elif kind == 4:
            lines.append(f"{rng.choice(accents)} {sentence} {rng.choice(accents)}")
        elif kind == 5:
            lines.append(f"{rng.choice(cjk)}，{rng.choice(cjk)}。{sentence}")
        elif kind == 6:
            lines.append(f"{sentence} {rng.choice(emoji)}{rng.choice(emoji)}\n\n")
        else:
            lines.append(f"Q: {sentence}?\r\nA: {sentence}!  ")
    return lines


def test_corpus():
    """Strings whose ids / decodes the C++ side must reproduce exactly."""
    paragraph = ("Retention gates decide which key-value entries stay in the cache. "
                 "When the budget of 1024 tokens is reached, the entry with the lowest score "
                 "is evicted; the others keep their positions.\n\nWe measure accuracy, "
                 "latency (in ms) and memory — 3.5 GB vs. 12 GB — on 7 tasks. ") * 3
    nfc = "café naïve résumé Ångström"
    nfd = unicodedata.normalize("NFD", nfc)
    texts = [
        "",
        " ",
        "hello world",
        "Hello, World!",
        "a   b",
        "a\tb\t\tc",
        "  leading spaces",
        "trailing spaces   ",
        "   ",
        "\n",
        "\n\n",
        "line one\n\nline two\n",
        "windows\r\nline\r\n\r\nend",
        "mixed \t \n whitespace \n\t ",
        "1234567890",
        "pi is 3.14159265358979 and e is 2.718",
        "x1y22z333",
        "numbers: 007, 1,000,000 and -42",
        "I'm sure we're done, they'll say it's fine; you've and she'd",
        "DON'T SHOUT, IT'S LOUD",
        "emoji 🙂🚀 and ZWJ 👩‍💻 family 👨‍👩‍👧‍👦 flag 🇫🇷 skin 👍🏽",
        "❤️ heart with variation selector",
        "你好世界，机器学习。",
        "日本語のテキストと한국어",
        nfc,
        nfd,
        "cafe\u0301 vs café",
        "def f(x):\n    return x * 2\n",
        "for (int i = 0; i < n; ++i) {\n\tsum += a[i];\n}",
        "<|im_start|>user\nhi<|im_end|>",
        "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>assistant\n",
        "<|endoftext|>",
        "<|im_start|><|im_end|><|endoftext|>",
        "<|im_sta",
        "<|im_start",
        "<|im_start|",
        "text<|endoftext|>more text",
        "x<image>y",
        "  <image>  ",
        "a <image> b",
        "<image><image>\n<image>",
        "<fake_token_around_image><image><fake_token_around_image>",
        "User: hi<end_of_utterance>  \nAssistant:",
        "<|vision_start|><|image_pad|><|image_pad|><|vision_end|>describe",
        "café and cafe\u0301 as added tokens: café!",
        "zzz single zzz, azzzb, zzz_x, _zzz",
        "<<|im_end|>>",
        "|><|",
        "\u00a0non-breaking\u2003em space\u3000ideographic",
        "tab\tbefore <image>\tafter",
        paragraph,
    ]
    return [(t, True) for t in texts] + [(t, False) for t in texts[28:46]]


def train(name, pre_tokenizer, normalizer, special_tokens, extra_tokens, post_processor):
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizer
    tok.pre_tokenizer = pre_tokenizer
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = post_processor
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE - len(extra_tokens), special_tokens=special_tokens,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), min_frequency=1,
        show_progress=False)
    tok.train_from_iterator(training_corpus(), trainer)
    tok.add_tokens(extra_tokens)
    assert tok.get_vocab_size(with_added_tokens=True) <= VOCAB_SIZE, name
    return tok


def save(tok, name, merges_as_pairs, config):
    folder = os.path.join(ROOT, name)
    os.makedirs(folder, exist_ok=True)
    data = json.loads(tok.to_str())
    merges = data["model"]["merges"]
    pairs = [m.split(" ") if isinstance(m, str) else m for m in merges]
    assert all(len(p) == 2 for p in pairs)
    data["model"]["merges"] = pairs if merges_as_pairs else [" ".join(p) for p in pairs]
    path = os.path.join(folder, "tokenizer.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(data, f, ensure_ascii=False, indent=1)
    with open(os.path.join(folder, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f, ensure_ascii=False, indent=1)
    # The oracle is the saved file itself, re-read, so both merge encodings are exercised.
    return Tokenizer.from_file(path)


def gpt2_byte_chars():
    """GPT-2 bytes_to_unicode: byte -> stand-in character."""
    printable = (list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD))
                 + list(range(0xAE, 0x100)))
    table, n = {}, 0
    for b in range(256):
        if b in printable:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + n)
            n += 1
    return table


def decode_cases(tok):
    """Id sequences made of single-byte tokens that form broken UTF-8, to pin down the U+FFFD
    replacement of HF's decode (Rust String::from_utf8_lossy), plus an id with no token."""
    chars = gpt2_byte_chars()

    def byte_ids(data):
        return [tok.token_to_id(chars[b]) for b in data]

    sequences = [
        byte_ids(b"A\xe2\x82B"),            # truncated 3-byte sequence inside text
        byte_ids(b"\xe2\x82\xac\xe2\x82"),    # euro sign then a truncated one at the end
        byte_ids(b"\xf0\x9f\x99\x82"),        # emoji spelled byte by byte
        byte_ids(b"\xf0\x80\x80z"),           # overlong lead: each byte replaced
        byte_ids(b"\xed\xa0\x80!"),           # surrogate
        byte_ids(b"\x80\xbf\xc0\xff\xc3"),     # stray continuations, invalid leads, tail
        byte_ids(b"ok") + [VOCAB_SIZE + 1000] + byte_ids(b"!"),  # id with no token: dropped
        [tok.token_to_id("<|im_start|>")] + byte_ids(b"\xe4\xbd") + [tok.token_to_id("<|im_end|>")]
        + byte_ids(b"\xa0"),
    ]
    return [{"ids": ids, "decoded": tok.decode(ids, skip_special_tokens=False),
             "decoded_skip_special": tok.decode(ids, skip_special_tokens=True)}
            for ids in sequences]


def expectations(tok):
    out = []
    for text, add_special in test_corpus():
        ids = tok.encode(text, add_special_tokens=add_special).ids
        out.append({
            "text": text,
            "add_special_tokens": add_special,
            "ids": ids,
            "decoded": tok.decode(ids, skip_special_tokens=False),
            "decoded_skip_special": tok.decode(ids, skip_special_tokens=True),
        })
    return out


def merge_patch(target, patch):
    """RFC 7396 JSON merge patch (what nlohmann::json::merge_patch does on the C++ side)."""
    if not isinstance(patch, dict):
        return patch
    target = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        else:
            target[key] = merge_patch(target.get(key), value)
    return target


def pipeline_variants():
    """Other settings of the same pipeline stages, as merge patches over the two tokenizers:
    each is checked on the short corpus strings."""
    qwen_split = lambda pattern, behavior, invert: {"pre_tokenizer": {  # noqa: E731
        "type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": pattern, "behavior": behavior, "invert": invert},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]}}
    smol_pre = lambda digits, prefix: {"pre_tokenizer": {  # noqa: E731
        "type": "Sequence", "pretokenizers": [
            {"type": "Digits", "individual_digits": digits},
            {"type": "ByteLevel", "add_prefix_space": prefix, "trim_offsets": True, "use_regex": True}]}}
    template = {"type": "TemplateProcessing",
                "single": [{"SpecialToken": {"id": "<|im_start|>", "type_id": 0}},
                           {"Sequence": {"id": "A", "type_id": 0}},
                           {"SpecialToken": {"id": "<|im_end|>", "type_id": 0}}],
                "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
                "special_tokens": {
                    "<|im_start|>": {"id": "<|im_start|>", "ids": [1], "tokens": ["<|im_start|>"]},
                    "<|im_end|>": {"id": "<|im_end|>", "ids": [2], "tokens": ["<|im_end|>"]}}}
    qwen = json.load(open(os.path.join(ROOT, "qwen2", "tokenizer.json"), encoding="utf-8"))
    flipped = []
    for t in qwen["added_tokens"]:
        t = dict(t)
        t.update(lstrip=t["id"] % 2 == 0, rstrip=t["id"] % 3 != 0, single_word=t["id"] in (1, 4),
                 normalized=t["id"] in (2, 382))
        flipped.append(t)
    return [
        ("smollm2 ByteLevel add_prefix_space", "smollm2", smol_pre(True, True)),
        ("smollm2 contiguous Digits", "smollm2", smol_pre(False, False)),
        ("smollm2 ignore_merges", "smollm2", {"model": {"ignore_merges": True}}),
        ("smollm2 TemplateProcessing", "smollm2", {"post_processor": template}),
        ("qwen2 Split MergedWithPrevious", "qwen2", qwen_split({"Regex": QWEN2_PATTERN}, "MergedWithPrevious", False)),
        ("qwen2 Split MergedWithNext inverted", "qwen2", qwen_split({"Regex": QWEN2_PATTERN}, "MergedWithNext", True)),
        ("qwen2 Split Contiguous on a string", "qwen2", qwen_split({"String": " "}, "Contiguous", False)),
        ("qwen2 Split Removed with empty matches", "qwen2", qwen_split({"Regex": r"\s*"}, "Removed", False)),
        ("qwen2 Split Isolated on a lookahead", "qwen2", qwen_split({"Regex": r"(?=\p{Lu})"}, "Isolated", False)),
        ("qwen2 NFKC", "qwen2", {"normalizer": {"type": "Sequence", "normalizers": [{"type": "NFKC"}]}}),
        ("qwen2 added-token flags", "qwen2", {"added_tokens": flipped}),
    ]


def variant_expectations():
    short = [(t, a) for t, a in test_corpus() if len(t) < 100]
    out = []
    for name, base, patch in pipeline_variants():
        with open(os.path.join(ROOT, base, "tokenizer.json"), encoding="utf-8") as f:
            data = merge_patch(json.load(f), patch)
        tok = Tokenizer.from_str(json.dumps(data))
        out.append({"name": name, "base": base, "patch": patch, "cases": [
            {"text": t, "add_special_tokens": a, "ids": tok.encode(t, add_special_tokens=a).ids}
            for t, a in short]})
    return out


def write_bad():
    bad = os.path.join(ROOT, "bad")
    for sub in ("wordpiece", "malformed", "no_model"):
        os.makedirs(os.path.join(bad, sub), exist_ok=True)
    wordpiece = {"version": "1.0", "added_tokens": [], "normalizer": None, "pre_tokenizer": None,
                 "post_processor": None, "decoder": None,
                 "model": {"type": "WordPiece", "unk_token": "[UNK]",
                           "continuing_subword_prefix": "##", "max_input_chars_per_word": 100,
                           "vocab": {"[UNK]": 0, "a": 1, "##b": 2}}}
    with open(os.path.join(bad, "wordpiece", "tokenizer.json"), "w") as f:
        json.dump(wordpiece, f, indent=1)
    with open(os.path.join(bad, "malformed", "tokenizer.json"), "w") as f:
        f.write('{"version": "1.0", "model": {"type": "BPE", "vocab": {"a": 0,, }\n')
    no_model = {k: v for k, v in wordpiece.items() if k != "model"}
    with open(os.path.join(bad, "no_model", "tokenizer.json"), "w") as f:
        json.dump(no_model, f, indent=1)


def main(data_dir=None):
    global ROOT
    if data_dir is not None:
        ROOT = os.path.join(str(data_dir), "tokenizers")
    smol_specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    smol = train(
        "smollm2",
        pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                 pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)]),
        None, smol_specials,
        [AddedToken("<fake_token_around_image>", special=True, normalized=False),
         AddedToken("<image>", special=True, normalized=False, lstrip=True, rstrip=True),
         AddedToken("<end_of_utterance>", special=False, normalized=False, rstrip=True)],
        None)
    smol = save(smol, "smollm2", merges_as_pairs=False, config={
        "add_prefix_space": False, "bos_token": "<|im_start|>", "eos_token": "<|im_end|>",
        "pad_token": "<|im_end|>", "unk_token": "<|endoftext|>",
        "model_max_length": 8192, "tokenizer_class": "GPT2Tokenizer",
        "chat_template": "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
                         "{{ message['content'] }}<|im_end|>\n{% endfor %}"})

    qwen_specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>",
                     "<|image_pad|>", "<|vision_end|>"]
    qwen = train(
        "qwen2",
        pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(QWEN2_PATTERN), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]),
        normalizers.NFC(), qwen_specials,
        # "café" is matched on NFC-normalized text (so its NFD spelling matches too);
        # "zzz" only as a whole word.
        [AddedToken("café", special=False, normalized=True),
         AddedToken("zzz", special=False, normalized=False, single_word=True)],
        processors.ByteLevel(trim_offsets=False))
    qwen = save(qwen, "qwen2", merges_as_pairs=True, config={
        "add_prefix_space": False, "bos_token": None, "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>", "unk_token": None, "errors": "replace",
        "model_max_length": 32768, "split_special_tokens": False,
        "tokenizer_class": "Qwen2Tokenizer",
        "chat_template": "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
                         "{{ message['content'] }}<|im_end|>\n{% endfor %}"})

    expected = {"smollm2": expectations(smol), "qwen2": expectations(qwen),
                "decode_cases": {"smollm2": decode_cases(smol), "qwen2": decode_cases(qwen)},
                "pipeline_variants": variant_expectations()}
    with open(os.path.join(ROOT, "expected.json"), "w", encoding="utf-8") as f:
        json.dump(expected, f, ensure_ascii=False, indent=None, separators=(",", ":"))
        f.write("\n")
    write_bad()


if __name__ == "__main__":
    main()
