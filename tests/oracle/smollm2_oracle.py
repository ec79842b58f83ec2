"""trimkv against transformers on a real trained instruct model, SmolLM2-135M-Instruct (converted by
smollm2_checkpoint.py), side by side on the same inputs:

1. tokenizer ids of large real texts found on this machine (licence texts, Python and
   transformers source, the CPython test suite's Chinese / Japanese / Korean sample texts and
   non-Latin lines, translated manual pages in six languages);
2. chat prompts rendered by the checkpoint's own template: ids of 20 conversations (system
   messages, single and multi-turn, three of about 2,000 tokens) equal to apply_chat_template's;
3. the logits the answer starts from (max |difference|, float32, target 1e-4);
4. greedy answers (up to --new tokens, stopping at the end-of-turn token) identical token for token.

Usage: ~/.cache/trimkv/venv-oracle/bin/python tests/oracle/smollm2_oracle.py [--trimkv build/app/trimkv]
       [--model DIR] [--new 48] [--out summary.json]
Needs the oracle venv (packaging/setup.sh --oracle) and a build. CI does not run it (no model there).
"""
import argparse
import glob
import json
import os
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

import numpy as np
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))
import smollm2_checkpoint  # noqa: E402


def real_texts():
    """Named texts of this machine: prose, code, CJK."""
    out = []
    lic = sorted(glob.glob("/usr/share/common-licenses/*"))
    out.append(("licences (English prose)", "\n\n".join(Path(p).read_text(errors="replace") for p in lic[:6])))
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    code = [stdlib / n for n in ("json/decoder.py", "textwrap.py", "difflib.py", "argparse.py")]
    out.append(("CPython source (code)", "\n".join(p.read_text() for p in code if p.exists())))
    import transformers
    tsrc = Path(transformers.__file__).parent / "models" / "llama" / "modeling_llama.py"
    out.append(("transformers source (code, docstrings)", tsrc.read_text()))
    cjk = sorted(glob.glob(str(stdlib / "test" / "cjkencodings" / "*-utf8.txt")))
    out.append(("CPython cjkencodings (Chinese, Japanese, Korean)",
                "\n".join(Path(p).read_text(encoding="utf-8", errors="replace") for p in cjk)))
    # Other scripts: the CPython test suite's UTF-8 samples (Greek, Cyrillic, Arabic, Hebrew,
    # Devanagari ... in test_unicodedata / test_str / test_codecs string literals).
    mixed = []
    for name in ("test_unicodedata.py", "test_str.py", "test_codecs.py", "test_re.py"):
        p = stdlib / "test" / name
        if p.exists():
            mixed.extend(l for l in p.read_text(encoding="utf-8", errors="replace").splitlines()
                         if any(ord(ch) > 0x370 for ch in l))
    out.append(("CPython test-suite lines in non-Latin scripts", "\n".join(mixed)))
    # Translated manual pages (roff source): German, French, Spanish, Russian, Japanese, Korean.
    import gzip
    for lang in ("de", "fr", "es", "ru", "ja", "ko"):
        pages = sorted(glob.glob(f"/usr/share/man/{lang}/man1/*.gz"))
        text = ""
        for page in pages:
            if len(text) > 12000:
                break
            text += gzip.open(page, "rt", encoding="utf-8", errors="replace").read()
        if text:
            out.append((f"man pages ({lang})", text[:12000]))
    return out


def conversations(long_text):
    sys_msg = {"role": "system", "content": "You are a concise, helpful assistant."}
    singles = ["What is the capital of France?", "Give me three tips for staying focused while studying.",
               "Write a haiku about autumn leaves.", "Explain what a KV cache is in one paragraph.",
               "How do I reverse a list in Python?", "Translate 'good morning' into Spanish and German.",
               "What is 17 times 23?", "Name the planets of the solar system in order.",
               "Why is the sky blue?", "Suggest a name for a small bakery.",
               "  What does HTTP stand for?\n", "Grüße! Wie geht es dir heute?"]
    convs = []
    for k, q in enumerate(singles):
        convs.append(([sys_msg] if k % 2 == 0 else []) + [{"role": "user", "content": q}])
    multi = [
        [("Hi! Can you help me plan a trip?", "Of course! Where would you like to go?"),
         ("Somewhere warm in December.", "Consider the Canary Islands, Thailand or Mexico."),
         ("Which is cheapest from Europe?", None)],
        [("What is a prime number?", "A prime number has exactly two divisors: 1 and itself."),
         ("Is 91 prime?", None)],
        [("Let's write a story about a robot.", "Once upon a time, a small robot named Bolt woke up."),
         ("What did Bolt do next?", "Bolt looked around the workshop and saw a door left open."),
         ("Continue the story in two sentences.", None)],
        [("I have eggs, flour and milk.", "You could make pancakes or crêpes."),
         ("How do I make crêpes?", None)],
        [("Define entropy.", "Entropy measures disorder, or the number of microstates of a system."),
         ("Give an everyday example.", None)],
    ]
    for turns in multi:
        msgs = [sys_msg]
        for u, a in turns:
            msgs.append({"role": "user", "content": u})
            if a:
                msgs.append({"role": "assistant", "content": a})
        convs.append(msgs)
    for k, q in enumerate(["Summarise the text above in three sentences.",
                           "What is the main purpose of the text above?",
                           "List four terms the text above uses."]):
        chunk = long_text[k * 9500:(k + 1) * 9500]  # about 2,000 tokens
        convs.append([sys_msg, {"role": "user", "content": chunk + "\n\n" + q}])
    return convs


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(cmd[:3])} ... failed ({p.returncode}): {p.stderr.strip()}")
    return p.stdout


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trimkv", default=str(ROOT / "build" / "app" / "trimkv"))
    ap.add_argument("--model", type=Path, default=None)
    ap.add_argument("--new", type=int, default=48)
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args()
    model_dir = smollm2_checkpoint.convert(a.model or smollm2_checkpoint.default_out())
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, attn_implementation="eager").eval()
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    tmp = Path(tempfile.mkdtemp(prefix="smollm2-oracle-"))
    summary = {"model": str(model_dir), "tokenizer": [], "chats": []}

    print("== tokenizer ids on real text")
    texts = real_texts()
    for name, text in texts:
        f = tmp / "text.txt"
        f.write_text(text, encoding="utf-8")
        ours = json.loads(run([a.trimkv, "tokenize", "--model", str(model_dir), "--text-file", str(f), "--no-special"]))
        theirs = tok(text, add_special_tokens=False)["input_ids"]
        first = next((i for i, (x, y) in enumerate(zip(ours, theirs)) if x != y), None)
        same = ours == theirs
        summary["tokenizer"].append({"text": name, "chars": len(text), "tokens": len(theirs), "identical": same,
                                     "first_difference": first})
        print(f"  {name}: {len(text)} chars, {len(theirs)} tokens, identical: {same}"
              + ("" if same else f" (first difference at token {first})"))

    print("== chat prompts, logits, greedy answers")
    im_end = tok.convert_tokens_to_ids("<|im_end|>")
    stop = sorted({im_end, tok.eos_token_id})
    for k, msgs in enumerate(conversations(texts[0][1])):
        f = tmp / f"conv{k}.json"
        f.write_text(json.dumps({"messages": msgs}, ensure_ascii=False), encoding="utf-8")
        lf = tmp / f"logits{k}.bin"
        ours = json.loads(run([a.trimkv, "generate", "--model", str(model_dir), "--messages", str(f), "--max-new-tokens",
                               str(a.new), "--json", "--logits", str(lf), "--threads", str(os.cpu_count() or 1)]))
        ids = tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True, return_dict=False)
        ids = list(ids["input_ids"] if isinstance(ids, dict) else ids)
        with torch.no_grad():
            ref_logits = model(torch.tensor([ids])).logits[0, -1].numpy()
            out = model.generate(torch.tensor([ids]), max_new_tokens=a.new, do_sample=False, eos_token_id=stop,
                                 pad_token_id=tok.pad_token_id)
        ref_new = out[0, len(ids):].tolist()
        our_logits = np.fromfile(lf, dtype="<f4")
        diff = float(np.abs(our_logits - ref_logits).max()) if our_logits.shape == ref_logits.shape else float("inf")
        row = {"conversation": k, "messages": len(msgs), "prompt_tokens": len(ids),
               "prompt_ids_identical": ours["prompt_ids"] == ids, "max_abs_logit_diff": diff,
               "greedy_identical": ours["tokens"] == ref_new, "generated": len(ref_new),
               "answer": tok.decode(ref_new, skip_special_tokens=True)}
        summary["chats"].append(row)
        print(f"  #{k:2d} {len(msgs)} msgs, {len(ids):5d} prompt tokens: ids {row['prompt_ids_identical']}, "
              f"max|dlogit| {diff:.2e}, greedy {row['greedy_identical']} ({len(ref_new)} tokens): "
              f"{row['answer'][:60]!r}")
    chats = summary["chats"]
    summary["all_prompt_ids_identical"] = all(c["prompt_ids_identical"] for c in chats)
    summary["max_abs_logit_diff"] = max(c["max_abs_logit_diff"] for c in chats)
    summary["greedy_identical"] = sum(c["greedy_identical"] for c in chats)
    summary["tokenizer_identical"] = all(t["identical"] for t in summary["tokenizer"])
    print(f"== {len(chats)} conversations: prompt ids identical {summary['all_prompt_ids_identical']}, "
          f"max |dlogit| {summary['max_abs_logit_diff']:.2e}, greedy identical {summary['greedy_identical']}/"
          f"{len(chats)}; tokenizer identical on all texts: {summary['tokenizer_identical']}")
    if a.out:
        a.out.write_text(json.dumps(summary, indent=1, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
