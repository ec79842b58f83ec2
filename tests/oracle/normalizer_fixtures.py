"""Unicode normalizers as Hugging Face `tokenizers` applies them: the SmolLM2 byte-level BPE
tokenizer (tests/data/tokenizers/smollm2) with its normalizer set to NFD, NFKD, NFKC and a
Sequence of NFKD then NFC, and the ids `tokenizers` gives for texts whose normalized forms differ
(accents composed and decomposed, ligatures, full-width letters, fractions, superscripts, Roman
numerals, Hangul syllables). Writes tests/data/tokenizers/normalizers.json: {"normalizers":
{name: {"normalizer": spec, "cases": [{"text", "ids"}]}}}; test_core "[tokenizer]" loads the same
tokenizer.json with each spec and must give the same ids.
Run through tests/oracle/make_fixtures.py normalizers."""
import json
from pathlib import Path

from tokenizers import Tokenizer

TEXTS = [
    "café, cafe\u0301 and Ångström",
    "\ufb01le \ufb00ort \u00bd cup, x\u00b2 + y\u00b3, chapter \u216b",
    "\uff26\uff55\uff4c\uff4c\uff57\uff49\uff44\uff54\uff48 text and \u210c\u212d",
    "\ud55c\uad6d\uc5b4 \u1112\u1161\u11ab and na\u00efve co\u00f6perate",
    "plain ASCII stays as it is: The code for the blue door is 4821.",
]
SPECS = {
    "NFD": {"type": "NFD"},
    "NFKD": {"type": "NFKD"},
    "NFKC": {"type": "NFKC"},
    "NFKD+NFC": {"type": "Sequence", "normalizers": [{"type": "NFKD"}, {"type": "NFC"}]},
}


def main(data: Path):
    src = json.loads((data / "tokenizers" / "smollm2" / "tokenizer.json").read_text())
    out = {}
    for name, spec in SPECS.items():
        cfg = dict(src, normalizer=spec)
        tok = Tokenizer.from_str(json.dumps(cfg))
        out[name] = {"normalizer": spec,
                     "cases": [{"text": t, "ids": tok.encode(t, add_special_tokens=False).ids} for t in TEXTS]}
    path = data / "tokenizers" / "normalizers.json"
    path.write_text(json.dumps({"normalizers": out}, ensure_ascii=False, indent=1) + "\n")
    print("normalizer fixtures:", path)


if __name__ == "__main__":
    main(Path(__file__).resolve().parent.parent / "data")
