#!/usr/bin/env python3
"""Oracle fixtures for the C++ BPE trainer (core/src/tokenizer/bpe_trainer.cpp,
tests/core/test_bpe_trainer.cpp).

1. corpus.jsonl: world conversations rendered in the SmolVLM chat template (a copy of
   vision/src/world/conversation.cpp's chat_text; only used to make a realistic corpus), one
   {"text": ...} a line, plus a few awkward texts (Unicode, digits, whitespace runs).
2. tokenizer.json: trained by OUR trainer (`trimkv train-tokenizer`) on corpus.jsonl.
3. expected.json: what the Hugging Face `tokenizers` library makes of that tokenizer.json for
   the probe texts (ids, and the decoded text), plus the training options. The C++ test
   re-trains on corpus.jsonl, checks the file is byte-identical to tokenizer.json, and checks
   that trimkv::Tokenizer reproduces these ids.

Run (after building `trimkv`):
  build/app/trimkv make-world --out /tmp/bpe-world --n 200 --seed 42 --quiet
  /root/venv-oracle/bin/python tests/oracle/bpe_trainer_fixtures.py \
      --trimkv build/app/trimkv --world /tmp/bpe-world/train.jsonl
Without --world the committed corpus.jsonl is kept (only steps 2 and 3 run).
"""
import argparse
import json
import os
import subprocess
from pathlib import Path

os.environ["TOKENIZERS_PARALLELISM"] = "false"
from tokenizers import Tokenizer  # noqa: E402

HERE = Path(__file__).resolve().parent
OUT = HERE.parent / "data" / "bpe_trainer"
VOCAB_SIZE = 420
MIN_FREQUENCY = 2

AWKWARD = [
    "Hello, world! 12345 and 3.14159 -- digits split one by one.",
    "caf\u00e9 na\u00efve \u00fcber \u4f60\u597d\u4e16\u754c \U0001F600 emoji",
    "tabs\tand  double  spaces\n\nnew lines   trailing   ",
    "<image><image>Two images back to back, then <row_1_col_1><global-img> specials.",
    "What color is the circle?",
]

PROBES = [
    "<|im_start|>User:<image>What color is the star?<end_of_utterance>\nAssistant: red<end_of_utterance>\n",
    "User: In image 3, how many triangles are there?<end_of_utterance>\nAssistant: 2<end_of_utterance>\n",
    "Which image has more circles?",
    "How many squares are there in all images? 17",
    "Where is the purple triangle? bottom left",
    "Is the green circle left of the orange star?",
    "<fake_token_around_image><global-img><image><image><fake_token_around_image>",
    "<row_6_col_6><row_1_col_2>text<|endoftext|>",
    "Unseen words: zebra quantum xylophone, colour vs color.",
    "caf\u00e9 \u00fcber \u4f60\u597d \U0001F600\U0001F680 \u00a0nbsp",
    "   leading spaces and trailing   ",
    "line1\nline2\r\nline3\t\ttabs",
    "0123456789 10 100 image 8",
    "<image",  # an unfinished special token is plain text
    "",
]


def chat_text(turns):
    text = "<|im_start|>"
    for user, answer in turns:
        text += ("User:" if user.startswith("<image>") else "User: ") + user
        text += "<end_of_utterance>\nAssistant: " + answer + "<end_of_utterance>\n"
    return text


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--trimkv", required=True, help="the trimkv executable")
    ap.add_argument("--world", help="a world JSONL to build corpus.jsonl from")
    args = ap.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    corpus = OUT / "corpus.jsonl"
    if args.world:
        texts = []
        for line in open(args.world, encoding="utf-8"):
            conv = json.loads(line)
            texts.append(chat_text([(t["text"], t["answer"]) for t in conv["turns"]]))
        texts += AWKWARD
        with open(corpus, "w", encoding="utf-8") as f:
            for t in texts:
                f.write(json.dumps({"text": t}, ensure_ascii=False) + "\n")
    subprocess.run([args.trimkv, "train-tokenizer", "--data", str(corpus), "--vocab-size", str(VOCAB_SIZE),
                    "--min-frequency", str(MIN_FREQUENCY), "--out", str(OUT / "tokenizer.json")], check=True)

    tok = Tokenizer.from_file(str(OUT / "tokenizer.json"))
    corpus_texts = [json.loads(line)["text"] for line in open(corpus, encoding="utf-8")]
    probes = PROBES + corpus_texts[:20] + corpus_texts[-len(AWKWARD):]
    cases = []
    for text in probes:
        enc = tok.encode(text, add_special_tokens=True)
        cases.append({"text": text, "ids": enc.ids, "tokens": enc.tokens,
                      "decoded": tok.decode(enc.ids, skip_special_tokens=False)})
    expected = {"vocab_size": VOCAB_SIZE, "min_frequency": MIN_FREQUENCY,
                "hf_vocab_size": tok.get_vocab_size(with_added_tokens=True), "cases": cases}
    with open(OUT / "expected.json", "w", encoding="utf-8") as f:
        json.dump(expected, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"wrote {OUT}: {len(corpus_texts)} corpus texts, {len(cases)} probes, "
          f"vocab {expected['hf_vocab_size']}")


if __name__ == "__main__":
    main()
