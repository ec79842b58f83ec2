"""Text instruct models chatting through their own chat template: the oracle.

Gives three tiny random text checkpoints (tests/data/models/{llama_gqa,qwen2,qwen3}) a real
checkpoint's chat template as chat_template.jinja (SmolLM2-135M-Instruct, Qwen2.5-Instruct,
Qwen3; from tests/data/chat_templates), and writes models/<name>/chat_expected.json: for a
conversation with a system message, the ids transformers' apply_chat_template(tokenize=True)
gives after the first user turn and after the second (the first answer given as text), and the
greedy continuation of each (float32, eager). The C++ Session must lay out the same ids turn by
turn and generate the same tokens.
Run through tests/oracle/make_fixtures.py (part "chat"), after "models" and "templates".
"""
import json
import shutil
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

N_NEW = 12
SYSTEM = "You are a concise assistant."
USER1 = "Hello! Grüße 👋 What is 2 + 2?"
ANSWER1 = "2 + 2 = 4."
USER2 = "  And times three?\n"

MODELS = {
    # model folder: (template file, [template variables])
    "llama_gqa": ("smollm2_135m_instruct.jinja", [{}]),
    "qwen2": ("qwen2_5_instruct.jinja", [{}]),
    "qwen3": ("qwen3.jinja", [{}, {"enable_thinking": False}]),
}


def greedy(model, ids):
    out = model.generate(torch.tensor([ids]), max_new_tokens=N_NEW, do_sample=False, eos_token_id=None,
                         pad_token_id=0, min_new_tokens=N_NEW)
    return out[0, len(ids):].tolist()


def ids_of(tok, messages, variables):
    out = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=False,
                                  **variables)
    return list(out["input_ids"] if isinstance(out, dict) else out)


def write(model_dir: Path, template: Path, variants):
    shutil.copyfile(template, model_dir / "chat_template.jinja")
    cfg_path = model_dir / "tokenizer_config.json"
    cfg = json.loads(cfg_path.read_text())
    if cfg.pop("chat_template", None) is not None:  # one template per folder: the real one
        cfg_path.write_text(json.dumps(cfg, indent=1, ensure_ascii=False) + "\n")
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32,
                                                 attn_implementation="eager").eval()
    cases = []
    for variables in variants:
        turn1 = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": USER1}]
        turn2 = turn1 + [{"role": "assistant", "content": ANSWER1}, {"role": "user", "content": USER2}]
        ids1, ids2 = ids_of(tok, turn1, variables), ids_of(tok, turn2, variables)
        with torch.no_grad():
            cases.append({"variables": variables,
                          "text_turn1": tok.apply_chat_template(turn1, add_generation_prompt=True,
                                                                tokenize=False, **variables),
                          "ids_turn1": ids1, "greedy_turn1": greedy(model, ids1),
                          "ids_turn2": ids2, "greedy_turn2": greedy(model, ids2)})
    out = {"system": SYSTEM, "user1": USER1, "answer1": ANSWER1, "user2": USER2, "n_new": N_NEW,
           "template": template.name, "cases": cases}
    (model_dir / "chat_expected.json").write_text(json.dumps(out, indent=1, ensure_ascii=False) + "\n")
    print(f"chat fixture: {model_dir.name} with {template.name}: {len(cases)} case(s)")


def main(data_dir: Path):
    for name, (template, variants) in MODELS.items():
        write(data_dir / "models" / name, data_dir / "chat_templates" / template, variants)


if __name__ == "__main__":
    main(Path(__file__).resolve().parents[1] / "data")
