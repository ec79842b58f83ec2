"""Chat-template oracle: real checkpoints' Jinja chat templates rendered by transformers'
`apply_chat_template` (the oracle for the C++ Jinja interpreter).

Reads  tests/data/chat_templates/<name>.jinja (verbatim copies of the checkpoints' templates,
       provenance in SOURCES.md; this script never changes them)
Writes tests/data/chat_templates/cases.json: a list of
         {"name", "template": "<file>.jinja", "context": {...}, "expected": "<rendered>"}
       or, where the template raises, "error": "<jinja2's message>" in place of "expected".
       "context" is exactly the set of variables the compiled template is rendered with:
       messages, tools and documents (null = Python None: transformers always passes both),
       add_generation_prompt, the checkpoint's special tokens as its tokenizer_config gives them
       (a token that is null there, e.g. Qwen's bos_token, is absent, i.e. undefined), and the
       template-specific flags (enable_thinking, date_string, add_vision_id).
The rendering is transformers' own: a tokenizer with the checkpoint's special tokens and
`apply_chat_template(..., tokenize=False)`, so the Jinja environment (ImmutableSandboxedEnvironment,
trim_blocks, lstrip_blocks, loopcontrols, its tojson, raise_exception, strftime_now, the
{% generation %} tag) is the one transformers builds. Every case is cross-checked by rendering the
compiled template directly with "context", which proves the context complete.
Also prints (not stored) which templates break the prefix property: rendering messages[:k] is not
a prefix of rendering messages[:k+1].
Deterministic: no template here reads the clock once date_string is given.
Run through tests/oracle/make_fixtures.py templates.
"""
import json
import sys
from pathlib import Path

import jinja2
import transformers
from tokenizers import Tokenizer, models
from transformers import PreTrainedTokenizerFast
from transformers.utils.chat_template_utils import _compile_jinja_template

# ---- the templates: file, special tokens (as the checkpoint's tokenizer_config has them), and
# what the family takes. text: plain string contents; vision: {"type": "image"} parts;
# tools: the template renders a `tools` list.
TEMPLATES = {
    "smollm2_135m_instruct": dict(tokens={"bos_token": "<|im_start|>", "eos_token": "<|im_end|>"},
                                  text=True),
    "qwen2_5_instruct": dict(tokens={"eos_token": "<|im_end|>"}, text=True, tools=True),
    "qwen3": dict(tokens={"eos_token": "<|im_end|>"}, text=True, tools=True),
    "qwen2_5_vl_instruct": dict(tokens={"eos_token": "<|im_end|>"}, text=True, vision=True),
    "qwen3_vl_instruct": dict(tokens={"eos_token": "<|im_end|>"}, text=True, vision=True,
                              tools=True),
    "llama3_1_instruct": dict(tokens={"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"},
                              text=True, tools=True, flags={"date_string": "26 Jul 2024"}),
    "llama3_2_instruct": dict(tokens={"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"},
                              text=True, tools=True, flags={"date_string": "26 Jul 2024"}),
    "gemma3_it": dict(tokens={"bos_token": "<bos>", "eos_token": "<eos>"}, text=True, vision=True),
    "smolvlm_instruct": dict(tokens={"bos_token": "<|im_start|>", "eos_token": "<end_of_utterance>"},
                             vision=True),
    "llava_1_5": dict(tokens={"bos_token": "<s>", "eos_token": "</s>"}, vision=True),
    "mistral_7b_instruct_v0_3": dict(tokens={"bos_token": "<s>", "eos_token": "</s>"}, text=True,
                                     tools=True),
    "phi3_5_mini_instruct": dict(tokens={"bos_token": "<s>", "eos_token": "<|endoftext|>"},
                                 text=True),
    "phi4": dict(tokens={"bos_token": "<|endoftext|>", "eos_token": "<|im_end|>"}, text=True),
    "deepseek_r1_distill_qwen": dict(tokens={"bos_token": "<｜begin▁of▁sentence｜>",
                                             "eos_token": "<｜end▁of▁sentence｜>"}, text=True),
    "gemma2_it": dict(tokens={"bos_token": "<bos>", "eos_token": "<eos>"}, text=True,
                      no_system=True),
    "granite3_0_instruct": dict(tokens={"bos_token": "<|end_of_text|>",
                                        "eos_token": "<|end_of_text|>"}, text=True, tools=True),
    "falcon3_instruct": dict(tokens={"eos_token": "<|endoftext|>"}, text=True, tools=True),
}

# ---- conversation material: non-ASCII, whitespace the templates trim (or keep), Jinja-looking
# and HTML-looking text that must come out literally (no autoescape, no re-evaluation).
SYSTEM = "You are a concise assistant. Answer in one sentence."
USER1 = "Hello! Grüße, 世界 👋"
ASSISTANT1 = "Hi there! 你好 — how can I help?"
USER2 = "  \n  What is 2 + 2?\nAnswer briefly.  \n\n"
ASSISTANT2 = "2 + 2 = 4. Literal text: {{ x }} {% if y %} <b>&amp;</b> \"double\" 'single' back\\slash"
USER3 = "Thanks.\tOne more: name a colour."

TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather for a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name, e.g. Zürich"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city"],
        },
    },
}


def msg(role, content):
    return {"role": role, "content": content}


def text_conversation(system=True):
    turns = [msg("user", USER1), msg("assistant", ASSISTANT1), msg("user", USER2),
             msg("assistant", ASSISTANT2), msg("user", USER3)]
    return ([msg("system", SYSTEM)] if system else []) + turns


def parts(*items):
    return [{"type": "image"} if item is None else {"type": "text", "text": item} for item in items]


def image_conversation(system=True):
    """Images in the user turns, every content a list of parts (SmolVLM and LLaVA need lists)."""
    turns = [msg("user", parts(None, USER1)),
             msg("assistant", parts(ASSISTANT1)),
             msg("user", parts("Compare these two:", None, None, USER2)),
             msg("assistant", parts(ASSISTANT2)),
             msg("user", parts(USER3))]
    return ([msg("system", parts(SYSTEM))] if system else []) + turns


def tool_roundtrip(mistral=False):
    call = {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Zürich"}}}
    if mistral:  # Mistral v0.3 requires 9-character tool call ids
        call["id"] = "call12345"
    tool_reply = msg("tool", '{"temperature": 21, "unit": "celsius"}')
    if mistral:
        tool_reply["tool_call_id"] = "call12345"
    return [msg("system", SYSTEM), msg("user", "What is the weather in Zürich?"),
            {"role": "assistant", "content": "", "tool_calls": [call]}, tool_reply]


def think_conversation(end_with_assistant=False):
    conv = [msg("system", SYSTEM), msg("user", USER1),
            msg("assistant", "<think>\nThe user greets me.\n</think>\n\n" + ASSISTANT1),
            msg("user", USER2),
            msg("assistant", "<think>\nSimple arithmetic: 2 + 2 = 4.\n</think>\n\n2 + 2 = 4.")]
    if not end_with_assistant:
        conv.append(msg("user", USER3))
    return conv


# ---- rendering --------------------------------------------------------------------------------

class Renderer:
    def __init__(self, data_dir):
        self.dir = Path(data_dir) / "chat_templates"
        self.sources = {}
        self.tokenizers = {}

    def source(self, name):
        if name not in self.sources:
            self.sources[name] = (self.dir / f"{name}.jinja").read_bytes().decode("utf-8")
        return self.sources[name]

    def tokenizer(self, name):
        if name not in self.tokenizers:
            tok = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.BPE()),
                                          **TEMPLATES[name]["tokens"])
            assert tok.special_tokens_map == TEMPLATES[name]["tokens"], tok.special_tokens_map
            self.tokenizers[name] = tok
        return self.tokenizers[name]

    def context(self, name, messages, add_generation_prompt, tools=None, **flags):
        ctx = {"messages": messages, "tools": tools, "documents": None,
               "add_generation_prompt": add_generation_prompt}
        ctx.update(TEMPLATES[name]["tokens"])
        ctx.update(TEMPLATES[name].get("flags", {}))
        ctx.update(flags)
        return {k: v for k, v in ctx.items() if not (k in flags and v is _ABSENT)}

    def render(self, name, ctx):
        """apply_chat_template's rendering; returns (text, None) or (None, error message)."""
        flags = {k: v for k, v in ctx.items()
                 if k not in ("messages", "tools", "documents", "add_generation_prompt")
                 and k not in TEMPLATES[name]["tokens"]}
        try:
            text = self.tokenizer(name).apply_chat_template(
                ctx["messages"], tools=ctx["tools"], add_generation_prompt=ctx["add_generation_prompt"],
                chat_template=self.source(name), tokenize=False, **flags)
        except jinja2.exceptions.TemplateError as e:
            direct_error = self._direct(name, ctx)[1]
            assert direct_error == str(e), (name, direct_error, str(e))
            return None, str(e)
        direct = self._direct(name, ctx)
        assert direct == (text, None), (name, direct, text)
        return text, None

    def _direct(self, name, ctx):
        try:
            return _compile_jinja_template(self.source(name)).render(**json.loads(json.dumps(ctx))), None
        except jinja2.exceptions.TemplateError as e:
            return None, str(e)


_ABSENT = object()  # a flag passed as _ABSENT is left out of the context (undefined)


def build_cases(r):
    cases = []

    def add(case_name, name, messages, add_generation_prompt, expect_error=False, **kw):
        ctx = r.context(name, messages, add_generation_prompt, **kw)
        text, error = r.render(name, ctx)
        assert (error is not None) == expect_error, (case_name, error)
        case = {"name": case_name, "template": f"{name}.jinja", "context": ctx}
        if error is None:
            case["expected"] = text
        else:
            case["error"] = error
        cases.append(case)

    for name, spec in TEMPLATES.items():
        sys_err = spec.get("no_system", False)
        if spec.get("text"):
            add(f"{name}/text/system/gen", name, text_conversation(), True, expect_error=sys_err)
            add(f"{name}/text/system/nogen", name, text_conversation(), False, expect_error=sys_err)
            add(f"{name}/text/nosystem/gen", name, text_conversation(False), True)
            add(f"{name}/text/nosystem/nogen", name, text_conversation(False), False)
            add(f"{name}/text/single_user/gen", name, [msg("user", USER1)], True)
        if spec.get("vision"):
            add(f"{name}/image/system/gen", name, image_conversation(), True)
            add(f"{name}/image/system/nogen", name, image_conversation(), False)
            add(f"{name}/image/nosystem/gen", name, image_conversation(False), True)
        if spec.get("tools"):
            add(f"{name}/tools/gen", name, text_conversation(), True, tools=[TOOL])

    # Qwen3: the enable_thinking switch, and <think> in the history (dropped before the last query)
    for et, label in ((True, "true"), (False, "false")):
        add(f"qwen3/text/system/gen/enable_thinking_{label}", "qwen3", text_conversation(), True,
            enable_thinking=et)
        add(f"qwen3/text/system/nogen/enable_thinking_{label}", "qwen3", text_conversation(), False,
            enable_thinking=et)
    add("qwen3/think_history/gen", "qwen3", think_conversation(), True)
    add("qwen3/think_history/gen/enable_thinking_false", "qwen3", think_conversation(), True,
        enable_thinking=False)
    add("qwen3/think_last_assistant/nogen", "qwen3", think_conversation(True), False)
    add("deepseek_r1_distill_qwen/think_history/gen", "deepseek_r1_distill_qwen",
        think_conversation(), True)
    add("deepseek_r1_distill_qwen/think_last_assistant/nogen", "deepseek_r1_distill_qwen",
        think_conversation(True), False)

    # Tool calls and results in the history
    for name in ("qwen2_5_instruct", "qwen3", "qwen3_vl_instruct", "llama3_1_instruct",
                 "llama3_2_instruct"):
        add(f"{name}/tool_roundtrip/gen", name, tool_roundtrip(), True, tools=[TOOL])
    add("mistral_7b_instruct_v0_3/tool_roundtrip/gen", "mistral_7b_instruct_v0_3",
        tool_roundtrip(mistral=True), True, tools=[TOOL])

    # Vision ids (Qwen2-VL style "Picture N: "), string contents on the VLM templates
    for name in ("qwen2_5_vl_instruct", "qwen3_vl_instruct"):
        add(f"{name}/image/system/gen/add_vision_id", name, image_conversation(), True,
            add_vision_id=True)
        add(f"{name}/image/nosystem/nogen/add_vision_id", name, image_conversation(False), False,
            add_vision_id=True)

    # Llama 3.1 without date_string (its own default "26 Jul 2024"), tools kept out of the user turn
    add("llama3_1_instruct/text/system/gen/default_date", "llama3_1_instruct", text_conversation(),
        True, date_string=_ABSENT)
    add("llama3_1_instruct/tools/gen/tools_in_system", "llama3_1_instruct", text_conversation(), True,
        tools=[TOOL], tools_in_user_message=False)
    add("llama3_2_instruct/tools/gen/tools_in_system", "llama3_2_instruct", text_conversation(), True,
        tools=[TOOL], tools_in_user_message=False)

    # Phi-3.5 skips an empty system message
    add("phi3_5_mini_instruct/text/empty_system/gen", "phi3_5_mini_instruct",
        [msg("system", "")] + text_conversation(False), True)

    # Errors: raise_exception in the templates
    two_users = [msg("user", USER1), msg("user", USER2)]
    add("gemma3_it/error/roles_alternate", "gemma3_it", two_users, True, expect_error=True)
    add("gemma3_it/error/roles_alternate_image", "gemma3_it",
        [msg("user", parts(None, USER1)), msg("user", parts(USER2))], True, expect_error=True)
    add("gemma2_it/error/roles_alternate", "gemma2_it", two_users, True, expect_error=True)
    add("mistral_7b_instruct_v0_3/error/roles_alternate", "mistral_7b_instruct_v0_3",
        [msg("system", SYSTEM)] + two_users, True, expect_error=True)
    add("llama3_1_instruct/error/multiple_tool_calls", "llama3_1_instruct",
        [msg("user", "Weather in Bern and Basel?"),
         {"role": "assistant", "content": "", "tool_calls": [
             {"type": "function", "function": {"name": "get_weather", "arguments": {"city": c}}}
             for c in ("Bern", "Basel")]}], True, tools=[TOOL], expect_error=True)
    return cases


# ---- the prefix property (printed only) --------------------------------------------------------

def prefix_report(r):
    """For each template and conversation: is render(messages[:k]) a prefix of
    render(messages[:k+1]) (both without generation prompt), and is render(messages[:k], gen)
    a prefix of render(messages[:k+1]) when message k is the assistant's reply?"""
    print("prefix property (render(messages[:k]) is a prefix of render(messages[:k+1])):")
    broken = []
    for name, spec in TEMPLATES.items():
        convs = []
        if spec.get("text"):
            convs += [("text/system", text_conversation()), ("text/nosystem", text_conversation(False))]
        if spec.get("vision"):
            convs += [("image/system", image_conversation())]
        if name in ("qwen3", "deepseek_r1_distill_qwen"):
            convs += [("think_history", think_conversation())]
        for label, conv in convs:
            if spec.get("no_system") and conv[0]["role"] == "system":
                continue
            notes = []
            for k in range(1, len(conv)):
                a, ea = r.render(name, r.context(name, conv[:k], False))
                b, eb = r.render(name, r.context(name, conv[:k + 1], False))
                if ea or eb:
                    notes.append(f"k={k}: error {ea or eb!r}")
                    continue
                if not b.startswith(a):
                    notes.append(f"k={k} nogen: {first_diff(a, b)}")
                if conv[k]["role"] == "assistant":
                    g, eg = r.render(name, r.context(name, conv[:k], True))
                    if eg is None and not b.startswith(g):
                        notes.append(f"k={k} gen->reply: {first_diff(g, b)}")
            status = "ok" if not notes else "BROKEN"
            print(f"  {name:28s} {label:14s} {status}")
            for n in notes:
                print(f"      {n}")
            if notes:
                broken.append(f"{name} ({label})")
    print("templates breaking the prefix property:", ", ".join(broken) if broken else "none")


def first_diff(a, b):
    i = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    return f"at char {i}: shorter {a[max(0, i - 20):i + 30]!r} vs longer {b[max(0, i - 20):i + 30]!r}"


def main(data_dir):
    data_dir = Path(data_dir)
    r = Renderer(data_dir)
    cases = build_cases(r)
    out = data_dir / "chat_templates" / "cases.json"
    text = json.dumps(cases, ensure_ascii=False, indent=1) + "\n"
    out.write_text(text, encoding="utf-8")
    n_err = sum("error" in c for c in cases)
    print(f"transformers {transformers.__version__}, jinja2 {jinja2.__version__}: "
          f"{len(cases)} cases ({n_err} errors) over {len(TEMPLATES)} templates, "
          f"{len(text.encode('utf-8'))} bytes -> {out}")
    prefix_report(r)


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent.parent / "data")
