#!/usr/bin/env python3
"""Oracle fixtures for the C++ BPE trainer (core/src/tokenizer/bpe_trainer.cpp,
tests/core/test_bpe_trainer.cpp).

1. corpus.jsonl: world conversations rendered in the SmolVLM chat template (a copy of
   vision/src/world/conversation.cpp's chat_text; only used to make a realistic corpus), one
   {"text": ...} a line, plus a few awkward texts (Unicode, digits, whitespace runs).
2. tokenizer.json: trained by OUR trainer (`trimkv train-tokenizer`) on corpus.jsonl.
3. expected.json: what the Hugging Face `tokenizers` library makes of that tokenizer.json for
   the probe texts (ids, and the decoded text), plus the training options. The C++ test
   re-trains on corpus.jsonl, checks the file is byte-identical to tokenizer.json (a regression
   snapshot of our own output), and checks that trimkv::Tokenizer reproduces these ids.
4. hf_merges.json: the merges that the library's own trainer (tokenizers.trainers.BpeTrainer)
   learns on corpus.jsonl with our trainer's settings: the same pre-tokenizer, no normalizer, the
   256 byte-level characters as initial alphabet, the same special tokens (ids 0..42), vocab size
   and min frequency. HF's trainer does not cut special tokens out of the texts (it would count
   "<image>" as the words "<", "image", ">"), so the texts are cut at them here first, as our
   trainer does; each piece is then pre-tokenized on its own by both. The C++ test compares our
   merges with these ([bpe_trainer]; the two break ties between pairs of equal count
   differently, see there).

Run (after building `trimkv`):
  build/app/trimkv make-world --out /tmp/bpe-world --n 200 --seed 42 --quiet
  ~/.cache/trimkv/venv-oracle/bin/python tests/oracle/bpe_trainer_fixtures.py \
      --trimkv build/app/trimkv --world /tmp/bpe-world/train.jsonl
Without --world the committed corpus.jsonl is kept (steps 2 to 4 run):
`tests/oracle/make_fixtures.py bpe` does that (the executable from $TRIMKV_BIN, else
build/app/trimkv), so `tests/oracle/check_fixtures.sh bpe` checks the committed files.
"""
import argparse
import json
import os
import re
import subprocess
from pathlib import Path

os.environ["TOKENIZERS_PARALLELISM"] = "false"
import tokenizers  # noqa: E402
from tokenizers import Tokenizer, models, pre_tokenizers, trainers  # noqa: E402

HERE = Path(__file__).resolve().parent
VOCAB_SIZE = 420
MIN_FREQUENCY = 2
HF_LARGE_VOCAB_SIZE = 1000  # more than the corpus allows at MIN_FREQUENCY (443 tokens)

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


def hf_trainer_merges(corpus_texts, special_tokens, vocab_size, min_frequency):
    """The merges of HF's BpeTrainer with our trainer's settings, as [left, right] token strings,
    and the number of tokens it ends with."""
    cut = re.compile("|".join(re.escape(s) for s in sorted(special_tokens, key=len, reverse=True)))
    pieces = [p for text in corpus_texts for p in cut.split(text) if p]
    tok = Tokenizer(models.BPE())
    # Our trainer's pre-tokenizer (core/src/tokenizer/bpe_trainer.cpp, pre_tokenizer_spec): SmolLM2's.
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                                 pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=min_frequency, special_tokens=special_tokens,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(pieces, trainer=trainer)
    model = json.loads(tok.to_str())["model"]
    assert len(model["vocab"]) == tok.get_vocab_size(with_added_tokens=True)
    return [m.split(" ") if isinstance(m, str) else m for m in model["merges"]], len(model["vocab"])


def main(data_dir, trimkv, world=None):
    out = Path(data_dir) / "bpe_trainer"
    out.mkdir(parents=True, exist_ok=True)
    corpus = out / "corpus.jsonl"
    if world:
        texts = []
        for line in open(world, encoding="utf-8"):
            conv = json.loads(line)
            texts.append(chat_text([(t["text"], t["answer"]) for t in conv["turns"]]))
        texts += AWKWARD
        with open(corpus, "w", encoding="utf-8") as f:
            for t in texts:
                f.write(json.dumps({"text": t}, ensure_ascii=False) + "\n")
    subprocess.run([str(trimkv), "train-tokenizer", "--data", str(corpus), "--vocab-size", str(VOCAB_SIZE),
                    "--min-frequency", str(MIN_FREQUENCY), "--out", str(out / "tokenizer.json")], check=True)

    tok = Tokenizer.from_file(str(out / "tokenizer.json"))
    corpus_texts = [json.loads(line)["text"] for line in open(corpus, encoding="utf-8")]
    probes = PROBES + corpus_texts[:20] + corpus_texts[-len(AWKWARD):]
    cases = []
    for text in probes:
        enc = tok.encode(text, add_special_tokens=True)
        cases.append({"text": text, "ids": enc.ids, "tokens": enc.tokens,
                      "decoded": tok.decode(enc.ids, skip_special_tokens=False)})
    expected = {"vocab_size": VOCAB_SIZE, "min_frequency": MIN_FREQUENCY,
                "hf_vocab_size": tok.get_vocab_size(with_added_tokens=True), "cases": cases}
    with open(out / "expected.json", "w", encoding="utf-8") as f:
        json.dump(expected, f, ensure_ascii=False, indent=1)
        f.write("\n")

    # Two runs: the fixture's options (training stops at the vocab size), and a vocab size never
    # reached (training stops when no pair occurs min_frequency times).
    special_tokens = [t["content"] for t in json.load(open(out / "tokenizer.json", encoding="utf-8"))["added_tokens"]]
    runs = []
    for vocab_size in (VOCAB_SIZE, HF_LARGE_VOCAB_SIZE):
        merges, n_vocab = hf_trainer_merges(corpus_texts, special_tokens, vocab_size, MIN_FREQUENCY)
        merge_lines = ",\n".join("    " + json.dumps(m, ensure_ascii=False) for m in merges)  # one merge a line
        runs.append(f'  {{"vocab_size": {vocab_size}, "min_frequency": {MIN_FREQUENCY}, "n_vocab": {n_vocab},\n'
                    f'   "merges": [\n{merge_lines}\n   ]}}')
    with open(out / "hf_merges.json", "w", encoding="utf-8") as f:
        f.write(f'{{\n "tokenizers_version": "{tokenizers.__version__}",\n "runs": [\n' + ",\n".join(runs) + "\n ]\n}\n")
    print(f"wrote {out}: {len(corpus_texts)} corpus texts, {len(cases)} probes, "
          f"vocab {expected['hf_vocab_size']}; HF's trainer: {n_vocab} tokens with vocab size {HF_LARGE_VOCAB_SIZE}")


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--trimkv", required=True, help="the trimkv executable")
    ap.add_argument("--world", help="a world JSONL to build corpus.jsonl from")
    args = ap.parse_args()
    main(HERE.parent / "data", args.trimkv, args.world)
